// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

/// @file
/// The entry points of `commpress._commpress`: array checks, execution policies, encode /
/// decode / decode_accumulate / roundtrip for codecs and pipelines, sizes, channel ends, and
/// the chunk layout of the sharded collectives. Each call checks every array first, then
/// releases the GIL and calls the library through binding.hpp.

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>

#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <typeinfo>
#include <variant>
#include <vector>

#include "commpress/collective/all_reduce.hpp"
#include "commpress/collective/layout.hpp"
#include "commpress/format/header.hpp"
#include "module.hpp"

namespace commpress::py {

// --- array checks ---------------------------------------------------------------------------

namespace {

template <class A> array_info inspect_any(const A& a, const char* what) {
  array_info r;
  r.data = const_cast<void*>(static_cast<const void*>(a.data()));
  r.type = a.dtype();
  r.count = a.size();
  // C-contiguous: each stride is the product of the extents to its right (extent-1 axes are
  // free). Views that skip or reorder elements are refused rather than copied.
  std::int64_t expected = 1;
  for (std::size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expected)
      detail::throw_error(errc::invalid_argument, "python",
                          std::string(what) +
                              " is not C-contiguous: pass a contiguous array (e.g. .contiguous())");
    expected *= static_cast<std::int64_t>(a.shape(i));
  }
  const int dev = a.device_type();
  if (dev == nb::device::cpu::value) {
    r.where = memory::host;
  } else if (dev == nb::device::cuda::value || dev == nb::device::cuda_managed::value) {
    r.where = memory::cuda;
    r.device = a.device_id();
  } else {
    detail::throw_error(errc::invalid_argument, "python",
                        std::string(what) + " lives on DLPack device type " + std::to_string(dev) +
                            "; commpress takes host or CUDA memory");
  }
  return r;
}

std::string dtype_name(nb::dlpack::dtype t) {
  const char* kind = "?";
  switch (static_cast<nb::dlpack::dtype_code>(t.code)) {
  case nb::dlpack::dtype_code::Int:
    kind = "int";
    break;
  case nb::dlpack::dtype_code::UInt:
    kind = "uint";
    break;
  case nb::dlpack::dtype_code::Float:
    kind = "float";
    break;
  case nb::dlpack::dtype_code::Bfloat:
    kind = "bfloat";
    break;
  case nb::dlpack::dtype_code::Bool:
    kind = "bool";
    break;
  default:
    break;
  }
  return kind + std::to_string(t.bits);
}

} // namespace

array_info inspect(const in_array& a, const char* what) {
  return inspect_any(a, what);
}
array_info inspect(const out_array& a, const char* what) {
  return inspect_any(a, what);
}

tensor_ref as_tensor(const array_info& a, const char* what) {
  using code = nb::dlpack::dtype_code;
  const auto c = static_cast<code>(a.type.code);
  tensor_ref t{a.data, a.count, dtype::f32};
  if (a.type.lanes == 1 && c == code::Float && a.type.bits == 32)
    t.type = dtype::f32;
  else if (a.type.lanes == 1 && c == code::Float && a.type.bits == 16)
    t.type = dtype::f16;
  else if (a.type.lanes == 1 && c == code::Bfloat && a.type.bits == 16)
    t.type = dtype::bf16;
  else
    detail::throw_error(errc::invalid_argument, "python",
                        std::string(what) + " has dtype " + dtype_name(a.type) +
                            "; commpress takes float32, float16 or bfloat16");
  return t;
}

std::span<float> as_floats(const array_info& a, const char* what) {
  const tensor_ref t = as_tensor(a, what);
  COMMPRESS_EXPECTS(t.type == dtype::f32, errc::invalid_argument, "python",
                    std::string(what) + " must be float32 (it accumulates in fp32)");
  return {static_cast<float*>(a.data), static_cast<std::size_t>(a.count)};
}

bytes as_bytes(const array_info& a, const char* what) {
  using code = nb::dlpack::dtype_code;
  const auto c = static_cast<code>(a.type.code);
  COMMPRESS_EXPECTS(a.type.bits == 8 && a.type.lanes == 1 && (c == code::UInt || c == code::Int),
                    errc::invalid_argument, "python",
                    std::string(what) + " has dtype " + dtype_name(a.type) +
                        "; payloads, blobs and workspaces are uint8 (or int8) arrays");
  return {static_cast<std::byte*>(a.data), static_cast<std::size_t>(a.count)};
}

ids_span as_ids(const array_info& a, const char* what) {
  using code = nb::dlpack::dtype_code;
  const auto c = static_cast<code>(a.type.code);
  COMMPRESS_EXPECTS(a.type.bits == 64 && a.type.lanes == 1 && (c == code::UInt || c == code::Int),
                    errc::invalid_argument, "python",
                    std::string(what) + " has dtype " + dtype_name(a.type) +
                        "; sample ids are uint64 or int64");
  COMMPRESS_EXPECTS(a.where == memory::host, errc::invalid_argument, "python",
                    std::string(what) + " must be in host memory");
  return {static_cast<const std::uint64_t*>(a.data), static_cast<std::size_t>(a.count)};
}

policy_ref resolve_policy(const nb::object& policy, const nb::object& stream,
                          std::initializer_list<const array_info*> arrays) {
  policy_ref p;
  const array_info* first = nullptr;
  for (const array_info* a : arrays)
    if (a != nullptr && first == nullptr)
      first = a;
  if (!policy.is_none()) {
    p = nb::cast<policy_ref>(policy);
  } else if (first != nullptr && first->where == memory::cuda) {
    p.k = policy_ref::kind::cuda;
  }
  if (!stream.is_none()) {
    COMMPRESS_EXPECTS(p.k == policy_ref::kind::cuda, errc::invalid_argument, "python",
                      "stream= applies to device arrays (the cuda policy) only");
    p.stream = nb::cast<std::uintptr_t>(stream);
  }
  const memory want = p.k == policy_ref::kind::cuda ? memory::cuda : memory::host;
  for (const array_info* a : arrays) {
    if (a == nullptr)
      continue;
    COMMPRESS_EXPECTS(a->where == want, errc::invalid_argument, "python",
                      std::string("wrong device: the call runs on ") +
                          (want == memory::cuda ? "CUDA device memory" : "host memory") +
                          " but an array lives in " +
                          (a->where == memory::cuda ? "CUDA device memory" : "host memory"));
    if (want == memory::cuda) {
      COMMPRESS_EXPECTS(a->device == first->device, errc::invalid_argument, "python",
                        "wrong device: the arrays of one call live on different GPUs");
      p.device = a->device;
    }
  }
  if (want == memory::cuda)
    COMMPRESS_EXPECTS(has_cuda(), errc::invalid_argument, "python",
                      "device arrays need a module built with COMMPRESS_PYTHON_CUDA=ON");
  return p;
}

// --- the entry points -----------------------------------------------------------------------

namespace {

using opt_array = std::optional<out_array>;

struct call_arrays {
  array_info ws, status;
  bool has_ws = false, has_status = false;
  call_arrays(const opt_array& workspace, const opt_array& st) {
    if (workspace) {
      ws = inspect(*workspace, "workspace");
      has_ws = true;
    }
    if (st) {
      status = inspect(*st, "status");
      has_status = true;
    }
  }
  const array_info* ws_ptr() const { return has_ws ? &ws : nullptr; }
  const array_info* status_ptr() const { return has_status ? &status : nullptr; }
};

/// A host call's temporary workspace: uninitialised (a workspace is scratch, written before it
/// is read), in floats so that it is 4-byte aligned, as required.
using temporary_workspace = std::unique_ptr<float[]>;

/// The caller's workspace, or a temporary of `need` bytes in `own` (host calls only; the CUDA
/// entry points never allocate, so device calls must pass one).
bytes workspace_or_own(const call_arrays& a, const policy_ref& p, std::uint64_t need,
                       temporary_workspace& own) {
  if (a.has_ws)
    return as_bytes(a.ws, "workspace");
  COMMPRESS_EXPECTS(p.k != policy_ref::kind::cuda, errc::invalid_argument, "python",
                    "device calls need a workspace= array of workspace_bytes() bytes");
  own = std::make_unique_for_overwrite<float[]>((need + sizeof(float) - 1) / sizeof(float));
  return {reinterpret_cast<std::byte*>(own.get()), static_cast<std::size_t>(need)};
}

void* status_pointer(const call_arrays& a) {
  if (!a.has_status)
    return nullptr;
  const bytes s = as_bytes(a.status, "status");
  COMMPRESS_EXPECTS(s.size() >= cuda_status_bytes(), errc::buffer_too_small, "python",
                    "status holds " + std::to_string(s.size()) + " bytes, a device status needs " +
                        std::to_string(cuda_status_bytes()));
  return s.data();
}

nb::object encode_codec(const any_codec& codec, const context& ctx, const in_array& input,
                        const out_array& out, const opt_array& workspace, const nb::object& policy,
                        const nb::object& stream, const opt_array& status) {
  const array_info in = inspect(input, "input");
  const array_info o = inspect(out, "out");
  const call_arrays extra(workspace, status);
  const policy_ref p =
      resolve_policy(policy, stream, {&in, &o, extra.ws_ptr(), extra.status_ptr()});
  const tensor_ref t = as_tensor(in, "input");
  const bytes payload = as_bytes(o, "out");
  return std::visit(
      [&](const auto& c) -> nb::object {
        using C = std::decay_t<decltype(c)>;
        temporary_workspace own;
        const bytes ws =
            workspace_or_own(extra, p, codec_ops<C>::encode_workspace_bytes(p, c, t.n), own);
        if (p.k == policy_ref::kind::cuda) {
          void* st = status_pointer(extra);
          nb::gil_scoped_release nogil;
          cuda_codec_ops<C>::encode(p, c, ctx, t, payload, ws, st);
          return nb::none();
        }
        encode_result r;
        {
          nb::gil_scoped_release nogil;
          r = codec_ops<C>::encode(p, c, ctx, t, payload, ws);
        }
        return nb::cast(r);
      },
      codec);
}

nb::object decode_codec(const any_codec& codec, const in_array& payload, const out_array& out,
                        const opt_array& workspace, const nb::object& policy,
                        const nb::object& stream, const opt_array& status) {
  const array_info pl = inspect(payload, "payload");
  const array_info o = inspect(out, "out");
  const call_arrays extra(workspace, status);
  const policy_ref p =
      resolve_policy(policy, stream, {&pl, &o, extra.ws_ptr(), extra.status_ptr()});
  const cbytes bytes_in = as_bytes(pl, "payload");
  const tensor_ref t = as_tensor(o, "out");
  return std::visit(
      [&](const auto& c) -> nb::object {
        using C = std::decay_t<decltype(c)>;
        if (p.k == policy_ref::kind::cuda) {
          temporary_workspace own;
          const bytes ws = workspace_or_own(extra, p, 0, own);
          void* st = status_pointer(extra);
          nb::gil_scoped_release nogil;
          cuda_codec_ops<C>::decode(p, c, bytes_in, t, ws, st);
          return nb::none();
        }
        payload_header h;
        {
          nb::gil_scoped_release nogil;
          h = codec_ops<C>::decode(p, c, bytes_in, t, {});
        }
        return nb::cast(h);
      },
      codec);
}

nb::object accumulate_codec(const any_codec& codec, const in_array& payload, const out_array& acc,
                            float weight, const opt_array& workspace, const nb::object& policy,
                            const nb::object& stream, const opt_array& status) {
  const array_info pl = inspect(payload, "payload");
  const array_info a = inspect(acc, "acc");
  const call_arrays extra(workspace, status);
  const policy_ref p =
      resolve_policy(policy, stream, {&pl, &a, extra.ws_ptr(), extra.status_ptr()});
  const cbytes bytes_in = as_bytes(pl, "payload");
  const std::span<float> sum = as_floats(a, "acc");
  return std::visit(
      [&](const auto& c) -> nb::object {
        using C = std::decay_t<decltype(c)>;
        if (p.k == policy_ref::kind::cuda) {
          temporary_workspace own;
          const bytes ws = workspace_or_own(extra, p, 0, own);
          void* st = status_pointer(extra);
          nb::gil_scoped_release nogil;
          cuda_codec_ops<C>::decode_accumulate(p, c, bytes_in, sum, weight, ws, st);
          return nb::none();
        }
        payload_header h;
        {
          nb::gil_scoped_release nogil;
          h = codec_ops<C>::decode_accumulate(p, c, bytes_in, sum, weight, {});
        }
        return nb::cast(h);
      },
      codec);
}

nb::object roundtrip_codec(const any_codec& codec, const context& ctx, const out_array& x,
                           const opt_array& workspace, const nb::object& policy,
                           const nb::object& stream, const opt_array& status) {
  const array_info xi = inspect(x, "x");
  const call_arrays extra(workspace, status);
  const policy_ref p = resolve_policy(policy, stream, {&xi, extra.ws_ptr(), extra.status_ptr()});
  const std::span<float> v = as_floats(xi, "x");
  return std::visit(
      [&](const auto& c) -> nb::object {
        using C = std::decay_t<decltype(c)>;
        temporary_workspace own;
        const bytes ws =
            workspace_or_own(extra, p, codec_ops<C>::workspace_bytes(p, c, v.size()), own);
        if (p.k == policy_ref::kind::cuda) {
          void* st = status_pointer(extra);
          nb::gil_scoped_release nogil;
          cuda_codec_ops<C>::roundtrip(p, c, ctx, v, ws, st);
          return nb::none();
        }
        encode_result r;
        {
          nb::gil_scoped_release nogil;
          r = codec_ops<C>::roundtrip(p, c, ctx, v, ws);
        }
        return nb::cast(r);
      },
      codec);
}

// --- pipelines ------------------------------------------------------------------------------

/// A state object of the exact C++ type the pipeline needs, or commpress.Error.
template <class S> S& state_as(const nb::handle& state, const char* role) {
  if (!nb::isinstance<S>(state))
    detail::throw_error(errc::invalid_argument, "python",
                        std::string("the ") + role + " state is a " +
                            nb::cast<std::string>(nb::str(state.type().attr("__name__"))) +
                            ", this pipeline needs a " +
                            nb::cast<std::string>(nb::str(nb::type<S>().attr("__name__"))) +
                            " (make it with make_" +
                            (std::string(role) == "sender" ? "state" : "receiver_state") + "())");
  return nb::cast<S&>(state);
}

/// Pipelines run on host memory with cpu::seq (the library's pipeline entry points).
void check_host(std::initializer_list<const array_info*> arrays) {
  for (const array_info* a : arrays)
    COMMPRESS_EXPECTS(a == nullptr || a->where == memory::host, errc::invalid_argument, "python",
                      "wrong device: pipelines, channels and optimizers run on host memory "
                      "(cpu::seq) in this binding");
}

template <class F> ids_span ids_for(const std::optional<in_array>& ids, array_info& info) {
  if constexpr (keyed_by_sample_v<F>) {
    COMMPRESS_EXPECTS(ids.has_value(), errc::invalid_argument, "python",
                      "aq_sgd pipelines need ids= (one sample id per row)");
    info = inspect(*ids, "ids");
    return as_ids(info, "ids");
  } else {
    COMMPRESS_EXPECTS(!ids.has_value(), errc::invalid_argument, "python",
                      "ids= belongs to aq_sgd pipelines only");
    return {};
  }
}

step_result encode_pipeline(const any_pipeline& pipe, const nb::handle& state, const context& ctx,
                            const in_array& input, const out_array& out, const opt_array& workspace,
                            const std::optional<in_array>& ids) {
  const array_info in = inspect(input, "input");
  const array_info o = inspect(out, "out");
  const call_arrays extra(workspace, std::nullopt);
  check_host({&in, &o, extra.ws_ptr()});
  const tensor_ref t = as_tensor(in, "input");
  const bytes payload = as_bytes(o, "out");
  return std::visit(
      [&](const auto& f, const auto& c) {
        using F = std::decay_t<decltype(f)>;
        using C = std::decay_t<decltype(c)>;
        using ops = pipeline_ops<F, C>;
        auto& st = state_as<typename F::sender_state>(state, "sender");
        array_info ids_info;
        const ids_span id = ids_for<F>(ids, ids_info);
        temporary_workspace own;
        const bytes ws = workspace_or_own(extra, {}, ops::workspace_bytes(f, c, t.n), own);
        nb::gil_scoped_release nogil;
        return ops::encode(f, c, st, ctx, id, t, payload, ws);
      },
      pipe.feedback, pipe.codec);
}

decode_result decode_pipeline(const any_pipeline& pipe, const nb::handle& state,
                              const in_array& payload, const out_array& out,
                              const opt_array& workspace, const std::optional<in_array>& ids) {
  const array_info pl = inspect(payload, "payload");
  const array_info o = inspect(out, "out");
  const call_arrays extra(workspace, std::nullopt);
  check_host({&pl, &o, extra.ws_ptr()});
  const cbytes bytes_in = as_bytes(pl, "payload");
  const tensor_ref t = as_tensor(o, "out");
  return std::visit(
      [&](const auto& f, const auto& c) {
        using F = std::decay_t<decltype(f)>;
        using C = std::decay_t<decltype(c)>;
        using ops = pipeline_ops<F, C>;
        auto& st = state_as<typename F::receiver_state>(state, "receiver");
        array_info ids_info;
        const ids_span id = ids_for<F>(ids, ids_info);
        temporary_workspace own;
        const bytes ws = workspace_or_own(extra, {}, ops::workspace_bytes(f, c, t.n), own);
        nb::gil_scoped_release nogil;
        return ops::decode(f, c, st, id, bytes_in, t, ws);
      },
      pipe.feedback, pipe.codec);
}

decode_result accumulate_pipeline(const any_pipeline& pipe, const nb::handle& state,
                                  const in_array& payload, const out_array* acc, float weight,
                                  const opt_array& workspace) {
  const array_info pl = inspect(payload, "payload");
  array_info a;
  if (acc != nullptr)
    a = inspect(*acc, "acc");
  const call_arrays extra(workspace, std::nullopt);
  check_host({&pl, acc != nullptr ? &a : nullptr, extra.ws_ptr()});
  const cbytes bytes_in = as_bytes(pl, "payload");
  const std::span<float> sum = acc != nullptr ? as_floats(a, "acc") : std::span<float>{};
  return std::visit(
      [&](const auto& f, const auto& c) {
        using F = std::decay_t<decltype(f)>;
        using C = std::decay_t<decltype(c)>;
        using ops = pipeline_ops<F, C>;
        if constexpr (F::id == feedback_id::ef21) {
          COMMPRESS_EXPECTS(acc == nullptr, errc::invalid_argument, "python",
                            "ef21 accumulates into its receiver state: "
                            "decode_accumulate(pipe, state, payload, weight)");
          auto& st = state_as<ef21_state>(state, "receiver");
          temporary_workspace own;
          const bytes ws = workspace_or_own(extra, {}, ops::workspace_bytes(f, c, st.size()), own);
          nb::gil_scoped_release nogil;
          return ops::decode_accumulate(f, c, st, bytes_in, {}, weight, ws);
        } else {
          COMMPRESS_EXPECTS(acc != nullptr, errc::invalid_argument, "python",
                            "only ef21 accumulates into a state; pass acc= for this pipeline");
          typename F::receiver_state st{};
          nb::gil_scoped_release nogil;
          return ops::decode_accumulate(f, c, st, bytes_in, sum, weight, {});
        }
      },
      pipe.feedback, pipe.codec);
}

// --- channel ends ---------------------------------------------------------------------------

struct py_sender {
  any_pipeline pipe;
  std::uint64_t n;
  std::unique_ptr<sender_iface> end;
};
struct py_receiver {
  any_pipeline pipe;
  std::uint64_t n;
  std::unique_ptr<receiver_iface> end;
};

ids_span channel_ids(bool keyed_end, const std::optional<in_array>& ids, array_info& info) {
  if (keyed_end) {
    COMMPRESS_EXPECTS(ids.has_value(), errc::invalid_argument, "python",
                      "an aq_sgd channel needs ids= (one sample id per row)");
    info = inspect(*ids, "ids");
    return as_ids(info, "ids");
  }
  COMMPRESS_EXPECTS(!ids.has_value(), errc::invalid_argument, "python",
                    "ids= belongs to aq_sgd channels only");
  return {};
}

// --- random_k's all-reduce: the value array of a payload, and the decode of its sum ---------

/// Validates a random_k payload against `c` and returns its header.
payload_header check_random_k(const random_k& c, cbytes payload) {
  const payload_header env = format::validate_envelope(payload);
  detail::throw_if(c.can_implement(env.count), "random_k_values");
  const payload_header h = format::validate_for(payload, c, env.count);
  // Every kept value takes at least one bit of the body: a count the bytes cannot hold is not
  // allocated for.
  COMMPRESS_EXPECTS(c.kept(h.count) <= 8 * std::uint64_t{h.body_bytes}, errc::corrupt,
                    "random_k_values", "the header's count does not fit the payload's body");
  return h;
}

} // namespace

void bind_api(nb::module_& m) {
  // --- policies ------------------------------------------------------------------------------
  nb::enum_<policy_ref::kind>(m, "policy_kind")
      .value("seq", policy_ref::kind::seq)
      .value("par", policy_ref::kind::par)
      .value("cuda", policy_ref::kind::cuda);
  nb::class_<policy_ref>(m, "policy",
                         "An execution policy: cpu.seq, cpu.par / cpu.par_t(threads, grain), or "
                         "cuda.par.on(stream).")
      .def_ro("kind", &policy_ref::k)
      .def_ro("threads", &policy_ref::threads)
      .def_ro("grain", &policy_ref::grain)
      .def_ro("stream", &policy_ref::stream)
      .def(
          "on",
          [](const policy_ref& p, std::uintptr_t stream) {
            COMMPRESS_EXPECTS(p.k == policy_ref::kind::cuda, errc::invalid_argument, "python",
                              "on(stream) is a method of cuda.par");
            policy_ref q = p;
            q.stream = stream;
            return q;
          },
          nb::arg("stream"), "The same CUDA policy on another stream (an integer cudaStream_t).")
      .def("__repr__", [](const policy_ref& p) {
        switch (p.k) {
        case policy_ref::kind::par:
          return "cpu.par_t(threads=" + std::to_string(p.threads) +
                 ", grain=" + std::to_string(p.grain) + ")";
        case policy_ref::kind::cuda:
          return "cuda.par.on(" + std::to_string(p.stream) + ")";
        default:
          return std::string("cpu.seq");
        }
      });
  // The cpu and cuda namespaces of the C++ API are Python modules of the package
  // (commpress/cpu.py, commpress/cuda.py) built on these constructors.
  m.def("_policy_seq", [] { return policy_ref{}; });
  m.def(
      "_policy_par",
      [](unsigned threads, std::uint64_t grain) {
        return policy_ref{.k = policy_ref::kind::par, .threads = threads, .grain = grain};
      },
      nb::arg("threads") = 0, nb::arg("grain") = 0);
  m.def(
      "_policy_cuda",
      [](std::uintptr_t stream) {
        return policy_ref{.k = policy_ref::kind::cuda, .stream = stream};
      },
      nb::arg("stream") = 0);
  m.def("_has_cuda", &has_cuda, "Whether this module was built with the CUDA backend.");
  m.def("_cuda_status_bytes", &cuda_status_bytes, "Bytes of a cuda::device_status.");

  // --- sizes ---------------------------------------------------------------------------------
  m.def(
      "max_payload_bytes",
      [](const any_codec& codec, std::uint64_t n) {
        return std::visit([n](const auto& c) { return commpress::max_payload_bytes(c, n); }, codec);
      },
      nb::arg("codec"), nb::arg("n"), "Exact size of the payload a codec writes for n elements.");
  m.def(
      "can_implement",
      [](const any_codec& codec, std::uint64_t n) {
        return std::visit([n](const auto& c) { return c.can_implement(n); }, codec);
      },
      nb::arg("codec"), nb::arg("n"),
      "Whether the codec's configuration is valid for n elements (C++ codec::can_implement).");
  m.def(
      "max_payload_bytes",
      [](const any_pipeline& pipe, std::uint64_t n) {
        return std::visit(
            [n](const auto& f, const auto& c) {
              return pipeline_ops<std::decay_t<decltype(f)>,
                                  std::decay_t<decltype(c)>>::max_payload_bytes(f, c, n);
            },
            pipe.feedback, pipe.codec);
      },
      nb::arg("pipe"), nb::arg("n"));
  m.def(
      "workspace_bytes",
      [](const any_codec& codec, std::uint64_t n, const nb::object& policy) {
        const policy_ref p = policy.is_none() ? policy_ref{} : nb::cast<policy_ref>(policy);
        return std::visit(
            [&](const auto& c) {
              return codec_ops<std::decay_t<decltype(c)>>::workspace_bytes(p, c, n);
            },
            codec);
      },
      nb::arg("codec"), nb::arg("n"), nb::arg("policy") = nb::none(),
      "Scratch bytes encode and roundtrip need for n elements under `policy` (cpu.seq).");
  m.def(
      "workspace_bytes",
      [](const any_pipeline& pipe, std::uint64_t n) {
        return std::visit(
            [n](const auto& f, const auto& c) {
              return pipeline_ops<std::decay_t<decltype(f)>,
                                  std::decay_t<decltype(c)>>::workspace_bytes(f, c, n);
            },
            pipe.feedback, pipe.codec);
      },
      nb::arg("pipe"), nb::arg("n"));

  // --- codec entry points --------------------------------------------------------------------
  m.def("encode", &encode_codec, nb::arg("codec"), nb::arg("ctx"), nb::arg("input"), nb::arg("out"),
        nb::arg("workspace") = nb::none(), nb::kw_only(), nb::arg("policy") = nb::none(),
        nb::arg("stream") = nb::none(), nb::arg("status") = nb::none(),
        "Encodes `input` (float32/float16/bfloat16) into the payload `out` (uint8, at least "
        "max_payload_bytes). Host: returns an encode_result. Device: enqueues on `stream`, "
        "returns None; NaN counts and errors go to the `status` array.");
  m.def("decode", &decode_codec, nb::arg("codec"), nb::arg("payload"), nb::arg("out"),
        nb::arg("workspace") = nb::none(), nb::kw_only(), nb::arg("policy") = nb::none(),
        nb::arg("stream") = nb::none(), nb::arg("status") = nb::none(),
        "Validates `payload` and writes the decoded tensor to `out`; returns its header.");
  m.def("decode_accumulate", &accumulate_codec, nb::arg("codec"), nb::arg("payload"),
        nb::arg("acc"), nb::arg("weight") = 1.0f, nb::arg("workspace") = nb::none(), nb::kw_only(),
        nb::arg("policy") = nb::none(), nb::arg("stream") = nb::none(),
        nb::arg("status") = nb::none(), "acc += weight * decoded (acc float32).");
  m.def("roundtrip", &roundtrip_codec, nb::arg("codec"), nb::arg("ctx"), nb::arg("x"),
        nb::arg("workspace") = nb::none(), nb::kw_only(), nb::arg("policy") = nb::none(),
        nb::arg("stream") = nb::none(), nb::arg("status") = nb::none(),
        "Replaces float32 `x` by C(x), bit-identical to decode(encode(x)).");

  // --- pipelines -----------------------------------------------------------------------------
  nb::class_<any_pipeline>(m, "pipeline",
                           "C++ pipeline<Feedback, Codec>: a feedback policy and a codec.")
      .def(nb::init<any_feedback, any_codec>(), nb::arg("feedback"), nb::arg("codec"))
      .def_rw("feedback", &any_pipeline::feedback)
      .def_rw("codec", &any_pipeline::codec)
      .def(
          "make_state",
          [](const any_pipeline& p, std::uint64_t n) {
            return std::visit([n](const auto& f) { return nb::cast(f.make_sender_state(n)); },
                              p.feedback);
          },
          nb::arg("n") = 0, "The sender's state for n-element tensors.")
      .def(
          "make_receiver_state",
          [](const any_pipeline& p, std::uint64_t n) {
            return std::visit([n](const auto& f) { return nb::cast(f.make_receiver_state(n)); },
                              p.feedback);
          },
          nb::arg("n") = 0, "The receiver's state for n-element tensors.")
      .def(
          "max_payload_bytes",
          [](const any_pipeline& pipe, std::uint64_t n) {
            return std::visit(
                [n](const auto& f, const auto& c) {
                  return pipeline_ops<std::decay_t<decltype(f)>,
                                      std::decay_t<decltype(c)>>::max_payload_bytes(f, c, n);
                },
                pipe.feedback, pipe.codec);
          },
          nb::arg("n"))
      .def(
          "workspace_bytes",
          [](const any_pipeline& pipe, std::uint64_t n) {
            return std::visit(
                [n](const auto& f, const auto& c) {
                  return pipeline_ops<std::decay_t<decltype(f)>,
                                      std::decay_t<decltype(c)>>::workspace_bytes(f, c, n);
                },
                pipe.feedback, pipe.codec);
          },
          nb::arg("n"))
      .def(
          "can_implement",
          [](const any_pipeline& pipe, std::uint64_t n) {
            return std::visit(
                [n](const auto& f, const auto& c) { return concrete(f, c).can_implement(n); },
                pipe.feedback, pipe.codec);
          },
          nb::arg("n"))
      .def(
          "__eq__", [](const any_pipeline& a, const any_pipeline& b) { return a == b; },
          nb::is_operator())
      .def("__repr__", [](nb::handle self) {
        return "pipeline(feedback=" + nb::cast<std::string>(nb::repr(self.attr("feedback"))) +
               ", codec=" + nb::cast<std::string>(nb::repr(self.attr("codec"))) + ")";
      });

  m.def("encode", &encode_pipeline, nb::arg("pipe"), nb::arg("state"), nb::arg("ctx"),
        nb::arg("input"), nb::arg("out"), nb::arg("workspace") = nb::none(), nb::kw_only(),
        nb::arg("ids") = nb::none(),
        "Sender step: updates `state` and writes the payload to `out`; returns a step_result. "
        "aq_sgd takes ids= (uint64/int64, one sample id per row).");
  m.def("decode", &decode_pipeline, nb::arg("pipe"), nb::arg("state"), nb::arg("payload"),
        nb::arg("out"), nb::arg("workspace") = nb::none(), nb::kw_only(),
        nb::arg("ids") = nb::none(),
        "Receiver step: validates `payload`, updates the receiver state and writes `out`.");
  m.def(
      "decode_accumulate",
      [](const any_pipeline& pipe, const in_array& payload, const out_array& acc, float weight,
         const opt_array& workspace) {
        return accumulate_pipeline(pipe, nb::none(), payload, &acc, weight, workspace);
      },
      nb::arg("pipe"), nb::arg("payload"), nb::arg("acc"), nb::arg("weight") = 1.0f,
      nb::arg("workspace") = nb::none(),
      "acc += weight * deQ(payload) for stateless receivers (none, ef, loco).");
  m.def(
      "decode_accumulate",
      [](const any_pipeline& pipe, const nb::handle& state, const in_array& payload, float weight,
         const opt_array& workspace) {
        return accumulate_pipeline(pipe, state, payload, nullptr, weight, workspace);
      },
      nb::arg("pipe"), nb::arg("state"), nb::arg("payload"), nb::arg("weight") = 1.0f,
      nb::arg("workspace") = nb::none(),
      "EF21 server mirror: state += weight * deQ(payload) (read it with state.mirror()).");

  // --- channel ends --------------------------------------------------------------------------
  nb::class_<py_sender>(m, "sender_end",
                        "The sending end of a stage boundary (C++ sender_end<Pipeline>).")
      .def(
          "__init__",
          [](py_sender* self, const any_pipeline& pipe, std::uint64_t n, const context& base) {
            auto end = std::visit(
                [&](const auto& f, const auto& c) {
                  return channel_ops<std::decay_t<decltype(f)>,
                                     std::decay_t<decltype(c)>>::make_sender(f, c, n, base);
                },
                pipe.feedback, pipe.codec);
            new (self) py_sender{pipe, n, std::move(end)};
          },
          nb::arg("pipe"), nb::arg("n"), nb::arg("base") = context{})
      .def(
          "send",
          [](py_sender& s, const in_array& x, const std::optional<in_array>& ids) {
            const array_info xi = inspect(x, "x");
            check_host({&xi});
            const std::span<float> v = as_floats(xi, "x");
            array_info ids_info;
            const ids_span id = channel_ids(s.end->keyed_by_sample(), ids, ids_info);
            std::vector<std::uint8_t> copy;
            {
              nb::gil_scoped_release nogil;
              const cbytes wire = s.end->send(id, v);
              const auto* p = reinterpret_cast<const std::uint8_t*>(wire.data());
              copy.assign(p, p + wire.size());
            }
            return to_numpy(std::move(copy));
          },
          nb::arg("x"), nb::arg("ids") = nb::none(),
          "Encodes float32 `x` (aq_sgd: rows of sample ids=) and returns the payload (uint8).")
      .def_prop_rw(
          "enabled", [](py_sender& s) { return s.end->enabled(); },
          [](py_sender& s, bool v) { s.end->enabled() = v; },
          "False: uncompressed identity payloads, state and step untouched (inference).")
      .def("last", [](const py_sender& s) { return s.end->last(); })
      .def_prop_ro("step", [](const py_sender& s) { return s.end->step(); })
      .def_prop_ro("keyed_by_sample", [](const py_sender& s) { return s.end->keyed_by_sample(); })
      .def_ro("pipe", &py_sender::pipe)
      .def_ro("n", &py_sender::n)
      .def("save", [](const py_sender& s) { return to_bytes(s.end->save()); })
      .def(
          "load",
          [](py_sender& s, const in_array& blob) {
            const array_info b = inspect(blob, "blob");
            check_host({&b});
            s.end->load(as_bytes(b, "blob"));
          },
          nb::arg("blob"));
  nb::class_<py_receiver>(m, "receiver_end",
                          "The receiving end of a stage boundary (C++ receiver_end<Pipeline>).")
      .def(
          "__init__",
          [](py_receiver* self, const any_pipeline& pipe, std::uint64_t n, const context& base) {
            auto end = std::visit(
                [&](const auto& f, const auto& c) {
                  return channel_ops<std::decay_t<decltype(f)>,
                                     std::decay_t<decltype(c)>>::make_receiver(f, c, n, base);
                },
                pipe.feedback, pipe.codec);
            new (self) py_receiver{pipe, n, std::move(end)};
          },
          nb::arg("pipe"), nb::arg("n"), nb::arg("base") = context{})
      .def(
          "receive",
          [](py_receiver& r, const in_array& payload, const std::optional<in_array>& ids) {
            const array_info pi = inspect(payload, "payload");
            check_host({&pi});
            const cbytes wire = as_bytes(pi, "payload");
            array_info ids_info;
            const ids_span id = channel_ids(r.end->keyed_by_sample(), ids, ids_info);
            std::vector<float> copy;
            {
              nb::gil_scoped_release nogil;
              const std::span<const float> out = r.end->receive(wire, id);
              copy.assign(out.begin(), out.end());
            }
            return to_numpy(std::move(copy));
          },
          nb::arg("payload"), nb::arg("ids") = nb::none(),
          "Decodes the payload of the matching send into a new float32 array.")
      .def_prop_rw(
          "enabled", [](py_receiver& r) { return r.end->enabled(); },
          [](py_receiver& r, bool v) { r.end->enabled() = v; })
      .def("last", [](const py_receiver& r) { return r.end->last(); })
      .def_prop_ro("step", [](const py_receiver& r) { return r.end->step(); })
      .def_prop_ro("keyed_by_sample", [](const py_receiver& r) { return r.end->keyed_by_sample(); })
      .def_ro("pipe", &py_receiver::pipe)
      .def_ro("n", &py_receiver::n)
      .def("save", [](const py_receiver& r) { return to_bytes(r.end->save()); })
      .def(
          "load",
          [](py_receiver& r, const in_array& blob) {
            const array_info b = inspect(blob, "blob");
            check_host({&b});
            r.end->load(as_bytes(b, "blob"));
          },
          nb::arg("blob"));

  // --- collectives: the decisions and layouts of collective/*.hpp -----------------------------
  m.def(
      "sum_compatible",
      [](const any_codec& codec) {
        return std::visit([](const auto& c) { return sum_compatible_v<std::decay_t<decltype(c)>>; },
                          codec);
      },
      nb::arg("codec"),
      "Whether payloads of this codec sum by a plain all-reduce (C++ sum_compatible_v): "
      "identity, and random_k when every rank shares (seed, step, tensor_id).");
  m.def(
      "has_variable_body",
      [](const any_codec& codec) {
        return std::visit([](const auto& c) { return commpress::has_variable_body(c); }, codec);
      },
      nb::arg("codec"),
      "Whether this codec configuration's body varies in length (QSGD's Elias coding): its "
      "payloads are max_payload_bytes at most, and encode returns their length. The collectives "
      "then send each payload at its length after an exchange of the lengths.");
  m.def(
      "chunk_alignment",
      [](const any_codec& codec) {
        return std::visit([](const auto& c) { return chunk_alignment(c); }, codec);
      },
      nb::arg("codec"), "Elements a chunk of the sharded path must be a multiple of.");
  nb::class_<chunk_layout>(m, "chunk_layout",
                           "How the sharded path cuts n elements over `ranks` owners.")
      .def(
          "__init__",
          [](chunk_layout* self, std::uint64_t n, int ranks, std::uint64_t align) {
            new (self) chunk_layout(chunk_layout::make(n, ranks, align));
          },
          nb::arg("n"), nb::arg("ranks"), nb::arg("align") = 1,
          "chunk_layout::make(n, ranks, align).")
      .def_ro("n", &chunk_layout::n)
      .def_ro("ranks", &chunk_layout::ranks)
      .def_ro("chunk", &chunk_layout::chunk)
      .def("offset", &chunk_layout::offset, nb::arg("j"))
      .def("length", &chunk_layout::length, nb::arg("j"))
      .def("__repr__", [](const chunk_layout& l) {
        return "chunk_layout(n=" + std::to_string(l.n) + ", ranks=" + std::to_string(l.ranks) +
               ", chunk=" + std::to_string(l.chunk) + ")";
      });
  m.def(
      "random_k_values",
      [](const random_k& c, const in_array& payload) {
        const array_info pi = inspect(payload, "payload");
        check_host({&pi});
        const cbytes wire = as_bytes(pi, "payload");
        const payload_header h = check_random_k(c, wire);
        std::vector<float> vals(static_cast<std::size_t>(c.kept(h.count)));
        detail::sum_view<random_k>::read(c, wire.data() + format::header_bytes, vals);
        return to_numpy(std::move(vals));
      },
      nb::arg("codec"), nb::arg("payload"),
      "The k kept values of a random_k payload as float32 (before the unbiased scaling): what "
      "all_reduce_compressed sums across ranks.");
  m.def(
      "random_k_decode_sum",
      [](const random_k& c, const context& ctx, const in_array& values, const out_array& out) {
        const array_info vi = inspect(values, "values");
        const array_info oi = inspect(out, "out");
        check_host({&vi, &oi});
        const std::span<float> vals = as_floats(vi, "values");
        const tensor_ref t = as_tensor(oi, "out");
        COMMPRESS_EXPECTS(t.type == dtype::f32, errc::invalid_argument, "python",
                          "out must be float32");
        COMMPRESS_EXPECTS(vals.size() == c.kept(t.n), errc::size_mismatch, "python",
                          "values holds " + std::to_string(vals.size()) +
                              " floats, random_k keeps " + std::to_string(c.kept(t.n)) + " of " +
                              std::to_string(t.n));
        // As all_reduce_compressed: the summed values as an fp32 payload of the same selection,
        // decoded by the codec itself so that the indices come from the one place defining them.
        const random_k c32 = detail::sum_view<random_k>::f32(c);
        std::vector<std::byte> sum(static_cast<std::size_t>(max_payload_bytes(c32, t.n)));
        payload_header h;
        h.codec = random_k::id;
        h.element = dtype::f32;
        h.count = t.n;
        h.body_bytes = c32.body_bytes(t.n);
        h.seed = ctx.seed;
        h.step = ctx.step;
        h.tensor_id = ctx.tensor_id;
        h.params = c32.params();
        format::write_header(h, sum.data());
        if (!vals.empty())
          std::memcpy(sum.data() + format::header_bytes, vals.data(), vals.size_bytes());
        format::seal(sum, static_cast<std::size_t>(h.body_bytes));
        nb::gil_scoped_release nogil;
        codec_ops<random_k>::decode(policy_ref{}, c32, sum, t, {});
      },
      nb::arg("codec"), nb::arg("ctx"), nb::arg("values"), nb::arg("out"),
      "Decodes summed random_k values (random_k_values of every rank, added) into float32 `out`, "
      "as all_reduce_compressed does before its 1/N scaling.");
}

} // namespace commpress::py
