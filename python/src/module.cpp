// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

/// @file
/// The extension module `commpress._commpress`: commpress.Error, the enums, the configuration
/// structs (codecs, feedback policies, optimizers, the context), results and every state object.
/// The entry points are registered by api.cpp.

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <Python.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "commpress/compress/powersgd.hpp"
#include "commpress/core/error.hpp"
#include "commpress/optim/adam.hpp"
#include "commpress/optim/onebit_adam.hpp"
#include "commpress/optim/sgd.hpp"
#include "commpress/pipeline/layer_policy.hpp"
#include "module.hpp"

namespace commpress::py {
namespace {

/// commpress.Error, created at import (a RuntimeError subclass with a `code` attribute).
PyObject* error_type = nullptr;

void raise_error(errc code, const char* what) {
  nb::object exc = nb::steal(PyObject_CallFunction(error_type, "s", what));
  if (!exc.is_valid())
    return; // PyObject_CallFunction set a Python error already
  nb::setattr(exc, "code", nb::cast(code));
  PyErr_SetObject(error_type, exc.ptr());
}

// --- helpers for configuration classes -----------------------------------------------------

/// "name(field=value, ...)", enum values written as `enum.member`.
std::string config_repr(nb::handle self, const char* name, const std::vector<const char*>& fields) {
  std::string s = std::string(name) + "(";
  nb::handle enum_base = nb::module_::import_("enum").attr("Enum");
  for (std::size_t i = 0; i < fields.size(); ++i) {
    nb::object v = nb::getattr(self, fields[i]);
    const bool is_enum = PyObject_IsInstance(v.ptr(), enum_base.ptr()) == 1;
    s += std::string(i ? ", " : "") + fields[i] + "=" +
         nb::cast<std::string>(is_enum ? nb::str(v) : nb::repr(v));
  }
  return s + ")";
}

/// __repr__ and __eq__ (the C++ operator==) of a configuration or state class.
template <class T>
void add_common(nb::class_<T>& cls, const char* name, std::vector<const char*> fields) {
  cls.def("__repr__", [name, fields](nb::handle self) { return config_repr(self, name, fields); });
  cls.def(
      "__eq__", [](const T& a, const T& b) { return a == b; }, nb::is_operator());
  cls.def(
      "__ne__", [](const T& a, const T& b) { return !(a == b); }, nb::is_operator());
  cls.attr("__hash__") = nb::none();
}

/// QSGD with codes of Bits bits (C++ qsgd<Bits>) as the Python class `name`.
template <unsigned Bits> void bind_qsgd(nb::module_& m, const char* name) {
  using Q = qsgd<Bits>;
  auto c = nb::class_<Q>(m, name,
                         "QSGD: stochastic levels of the L2 norm, as fixed-width codes or the "
                         "paper's Elias coding (coding=qsgd_coding.elias, CPU only) (C++ qsgd).");
  c.def(
       "__init__",
       [](Q* self, std::uint32_t block, std::uint32_t levels, qsgd_coding coding) {
         new (self) Q{block, levels, coding};
       },
       nb::arg("block") = 0u, nb::arg("levels") = Q::max_levels,
       nb::arg("coding") = qsgd_coding::fixed)
      .def_rw("block", &Q::block)
      .def_rw("levels", &Q::levels)
      .def_rw("coding", &Q::coding);
  add_common(c, name, {"block", "levels", "coding"});
}

/// rotated<C> as the Python class `name`: its inner codec and window (C++ rotated).
template <class C> void bind_rotated(nb::module_& m, const char* name) {
  using R = rotated<C>;
  auto c = nb::class_<R>(m, name,
                         "A codec after the randomized Hadamard rotation, in windows of "
                         "2^log2_window elements (C++ rotated); build it with commpress.rotated.");
  c.def(
       "__init__",
       [](R* self, const C& inner, std::uint8_t log2_window) {
         new (self) R{inner, log2_window};
       },
       nb::arg("inner"), nb::arg("log2_window") = R{}.log2_window)
      .def_rw("inner", &R::inner)
      .def_rw("log2_window", &R::log2_window);
  add_common(c, name, {"inner", "log2_window"});
}

/// A float32 NumPy view of a state's buffer, kept alive by the state object.
nb::ndarray<nb::numpy, float, nb::ndim<1>> view_of(std::span<float> v, nb::handle owner) {
  return nb::ndarray<nb::numpy, float, nb::ndim<1>>(v.data(), {v.size()}, owner);
}

template <class T> nb::bytes save_state(const T& s, std::uint32_t tensor_id) {
  std::vector<std::byte> blob;
  {
    nb::gil_scoped_release nogil;
    blob = s.save(tensor_id);
  }
  return to_bytes(blob);
}

template <class T> void load_state(T& s, const in_array& blob, std::uint32_t tensor_id) {
  const array_info b = inspect(blob, "blob");
  COMMPRESS_EXPECTS(b.where == memory::host, errc::invalid_argument, "python",
                    "a state blob must be in host memory");
  const bytes raw = as_bytes(b, "blob");
  nb::gil_scoped_release nogil;
  s.load(cbytes(raw), tensor_id);
}

/// save(tensor_id) -> bytes and load(blob, tensor_id) of a feedback or optimizer state.
template <class T> void add_checkpoint(nb::class_<T>& cls) {
  cls.def("save", &save_state<T>, nb::arg("tensor_id") = 0,
          "A versioned, checksummed blob of the state (C++ save(tensor_id)).");
  cls.def("load", &load_state<T>, nb::arg("blob"), nb::arg("tensor_id") = 0,
          "Restores a blob from save(); raises commpress.Error and leaves the state unchanged "
          "for a blob of another kind, shape, tensor id, or a corrupted one.");
}

template <class S> const char* storage_suffix();
template <> const char* storage_suffix<store_f32>() {
  return "f32";
}
template <> const char* storage_suffix<store_bf16>() {
  return "bf16";
}
template <> const char* storage_suffix<store_int8>() {
  return "int8";
}
template <> const char* storage_suffix<store_int4>() {
  return "int4";
}

/// The Python-side tag of an error storage.
enum class storage_kind : std::uint8_t { f32, bf16, int8, int4 };
template <class S> storage_kind storage_of();
template <> storage_kind storage_of<store_f32>() {
  return storage_kind::f32;
}
template <> storage_kind storage_of<store_bf16>() {
  return storage_kind::bf16;
}
template <> storage_kind storage_of<store_int8>() {
  return storage_kind::int8;
}
template <> storage_kind storage_of<store_int4>() {
  return storage_kind::int4;
}

template <class S> void bind_storage(nb::module_& m) {
  const std::string sfx = storage_suffix<S>();

  using loco_t = loco<S>;
  auto lc = nb::class_<loco_t>(m, ("loco_" + sfx).c_str(),
                               ("LoCo feedback with its error stored as " + sfx +
                                " (C++ loco<store_" + sfx + ">); make it with commpress.loco().")
                                   .c_str());
  lc.def(
        "__init__",
        [](loco_t* self, float beta, std::uint64_t reset_every) {
          new (self) loco_t{.beta = beta, .reset_every = reset_every};
        },
        nb::arg("beta") = loco_t{}.beta, nb::arg("reset_every") = loco_t{}.reset_every)
      .def_rw("beta", &loco_t::beta, "weight on the old error, in [0, 1)")
      .def_rw("reset_every", &loco_t::reset_every, "reset period in optimizer steps; 0 = never")
      .def_prop_ro_static("storage", [](nb::handle) { return storage_of<S>(); })
      .def("can_implement", &loco_t::can_implement, nb::arg("n"));
  static const std::string loco_name = "loco_" + sfx;
  add_common(lc, loco_name.c_str(), {"beta", "reset_every"});

  using loco_state_t = loco_state<S>;
  auto ls = nb::class_<loco_state_t>(m, ("loco_state_" + sfx).c_str(),
                                     "The sender's LoCo error (C++ loco_state<Storage>).");
  ls.def(nb::init<std::uint64_t>(), nb::arg("n"))
      .def_prop_ro("size", &loco_state_t::size)
      .def_prop_ro("memory_bytes", [](const loco_state_t& s) { return s.storage().memory_bytes(); })
      .def(
          "error",
          [](const loco_state_t& s) {
            std::vector<float> e(s.size());
            s.error(e);
            return to_numpy(std::move(e));
          },
          "The error, dequantized, as a new float32 array.")
      .def(
          "rescale", [](loco_state_t& s, float factor) { rescale(s, factor); }, nb::arg("factor"),
          "Multiplies the error by new_loss_scale / old_loss_scale (C++ rescale).")
      .def(
          "drop", [](loco_state_t& s) { drop(s); }, "Clears the error (C++ drop).");
  add_checkpoint(ls);
  static const std::string ls_name = "loco_state_" + sfx;
  add_common(ls, ls_name.c_str(), {"size"});

  using aq_t = aq_sgd<S>;
  auto ac = nb::class_<aq_t>(m, ("aq_sgd_" + sfx).c_str(),
                             ("AQ-SGD with caches stored as " + sfx + " (C++ aq_sgd<store_" + sfx +
                              ">); make it with commpress.aq_sgd().")
                                 .c_str());
  ac.def(
        "__init__",
        [](aq_t* self, std::uint64_t samples, std::uint64_t sample_size,
           std::uint64_t warmup_steps) {
          new (self)
              aq_t{.samples = samples, .sample_size = sample_size, .warmup_steps = warmup_steps};
        },
        nb::arg("samples") = 0, nb::arg("sample_size") = 0, nb::arg("warmup_steps") = 0)
      .def_rw("samples", &aq_t::samples, "dataset size: cache rows on each side")
      .def_rw("sample_size", &aq_t::sample_size, "elements per sample (row length)")
      .def_rw("warmup_steps", &aq_t::warmup_steps, "steps sent uncompressed while caches fill")
      .def_prop_ro_static("storage", [](nb::handle) { return storage_of<S>(); })
      .def("can_implement", &aq_t::can_implement, nb::arg("n"));
  static const std::string ac_name = "aq_sgd_" + sfx;
  add_common(ac, ac_name.c_str(), {"samples", "sample_size", "warmup_steps"});

  using aq_state_t = aq_sgd_state<S>;
  auto as = nb::class_<aq_state_t>(m, ("aq_sgd_state_" + sfx).c_str(),
                                   "An AQ-SGD per-sample cache (C++ aq_sgd_state<Storage>).");
  as.def(nb::init<std::uint64_t, std::uint64_t>(), nb::arg("samples"), nb::arg("sample_size"))
      .def_prop_ro("samples", &aq_state_t::samples)
      .def_prop_ro("sample_size", &aq_state_t::sample_size)
      .def(
          "sample",
          [](const aq_state_t& s, std::uint64_t id) {
            std::vector<float> row(s.sample_size());
            s.sample(id, row);
            return to_numpy(std::move(row));
          },
          nb::arg("id"), "m(id), dequantized, as a new float32 array.");
  add_checkpoint(as);
  static const std::string as_name = "aq_sgd_state_" + sfx;
  add_common(as, as_name.c_str(), {"samples", "sample_size"});
}

/// optimizer.step(cpu::seq, state, params, grads) on float32 host arrays.
template <class O>
void optimizer_step(const O& o, typename O::state_type& s, const out_array& params,
                    const in_array& grads) {
  const array_info p = inspect(params, "params");
  const array_info g = inspect(grads, "grads");
  COMMPRESS_EXPECTS(p.where == memory::host && g.where == memory::host, errc::invalid_argument,
                    "python", "wrong device: optimizers run on host memory (cpu::seq)");
  const std::span<float> ps = as_floats(p, "params");
  const std::span<float> gs = as_floats(g, "grads");
  nb::gil_scoped_release nogil;
  o.step(cpu::seq, s, ps, std::span<const float>(gs));
}

template <class S> nb::object make_loco(float beta, std::uint64_t reset_every) {
  return nb::cast(loco<S>{.beta = beta, .reset_every = reset_every});
}
template <class S>
nb::object make_aq_sgd(std::uint64_t samples, std::uint64_t sample_size, std::uint64_t warmup) {
  return nb::cast(
      aq_sgd<S>{.samples = samples, .sample_size = sample_size, .warmup_steps = warmup});
}

} // namespace

void bind_types(nb::module_& m) {
  // --- errors --------------------------------------------------------------------------------
  nb::enum_<errc>(m, "errc", "Why an operation was refused (C++ commpress::errc).")
      .value("ok", errc::ok)
      .value("invalid_argument", errc::invalid_argument)
      .value("buffer_too_small", errc::buffer_too_small)
      .value("size_mismatch", errc::size_mismatch)
      .value("truncated", errc::truncated)
      .value("bad_magic", errc::bad_magic)
      .value("bad_version", errc::bad_version)
      .value("codec_mismatch", errc::codec_mismatch)
      .value("checksum_mismatch", errc::checksum_mismatch)
      .value("corrupt", errc::corrupt)
      .value("non_finite", errc::non_finite)
      .value("stream_mismatch", errc::stream_mismatch);

  error_type = PyErr_NewExceptionWithDoc(
      "commpress.Error",
      "Raised by every refused call; `code` is the commpress.errc, str(e) the C++ message.",
      PyExc_RuntimeError, nullptr);
  m.attr("Error") = nb::handle(error_type);
  nb::setattr(m.attr("Error"), "code", nb::cast(errc::ok));
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const error& e) {
      raise_error(e.code(), e.what());
    }
  });

  nb::class_<status>(m, "status", "Result of can_implement: a code and a message.")
      .def_ro("code", &status::code)
      .def_prop_ro("message", [](const status& s) { return std::string(s.message); })
      .def("__bool__", [](const status& s) { return static_cast<bool>(s); })
      .def("__repr__", [](const status& s) {
        return std::string("status(code=errc.") + to_string(s.code) + ", message='" + s.message +
               "')";
      });

  // --- enums ---------------------------------------------------------------------------------
  nb::enum_<dtype>(m, "dtype", "Element and wire types (C++ commpress::dtype).")
      .value("f32", dtype::f32)
      .value("f16", dtype::f16)
      .value("bf16", dtype::bf16);
  nb::enum_<nonfinite_policy>(m, "nonfinite_policy", "What codecs do with NaN/Inf inputs.")
      .value("propagate", nonfinite_policy::propagate)
      .value("zero_and_count", nonfinite_policy::zero_and_count)
      .value("fail", nonfinite_policy::fail);
  nb::enum_<scale_granularity>(m, "scale_granularity", "Which elements share one scale.")
      .value("tensor", scale_granularity::tensor)
      .value("block", scale_granularity::block)
      .value("column", scale_granularity::column);
  nb::enum_<qsgd_coding>(m, "qsgd_coding", "How qsgd sends its levels (C++ qsgd_coding).")
      .value("fixed", qsgd_coding::fixed)
      .value("elias", qsgd_coding::elias);
  nb::enum_<quant_range>(m, "quant_range")
      .value("symmetric", quant_range::symmetric)
      .value("asymmetric", quant_range::asymmetric);
  nb::enum_<rounding>(m, "rounding")
      .value("nearest", rounding::nearest)
      .value("stochastic", rounding::stochastic);
  nb::enum_<sign_scale>(m, "sign_scale")
      .value("mean_abs", sign_scale::mean_abs)
      .value("rms", sign_scale::rms);
  nb::enum_<sign_granularity>(m, "sign_granularity")
      .value("tensor", sign_granularity::tensor)
      .value("block", sign_granularity::block);
  nb::enum_<codec_id>(m, "codec_id")
      .value("identity", codec_id::identity)
      .value("cast", codec_id::cast)
      .value("quantize", codec_id::quantize)
      .value("top_k", codec_id::top_k)
      .value("random_k", codec_id::random_k)
      .value("sign", codec_id::sign)
      .value("fp8", fp8::id)
      .value("mxfp8", mxfp8::id)
      .value("mxfp8_e5m2", mxfp8_e5m2::id)
      .value("mxfp4", mxfp4::id)
      .value("nvfp4", nvfp4::id)
      .value("terngrad", terngrad::id)
      .value("natural", natural::id)
      .value("qsgd8", qsgd8::id)
      .value("qsgd4", qsgd4::id)
      .value("qsgd2", qsgd2::id);
  nb::enum_<minifloat>(m, "minifloat", "Element formats of the fp8 and MX codecs.")
      .value("e4m3", minifloat::e4m3)
      .value("e5m2", minifloat::e5m2)
      .value("e2m1", minifloat::e2m1);
  nb::enum_<feedback_id>(m, "feedback_id")
      .value("none", feedback_id::none)
      .value("ef", feedback_id::ef)
      .value("ef21", feedback_id::ef21)
      .value("loco", feedback_id::loco)
      .value("aq_sgd", feedback_id::aq_sgd)
      .value("dgc", feedback_id::dgc);
  nb::enum_<storage_kind>(m, "storage", "Error storage of loco and aq_sgd (C++ store_*).")
      .value("f32", storage_kind::f32)
      .value("bf16", storage_kind::bf16)
      .value("int8", storage_kind::int8)
      .value("int4", storage_kind::int4);
  m.attr("store_f32") = storage_kind::f32;
  m.attr("store_bf16") = storage_kind::bf16;
  m.attr("store_int8") = storage_kind::int8;
  m.attr("store_int4") = storage_kind::int4;

  // --- the context and results ---------------------------------------------------------------
  auto ctx = nb::class_<context>(m, "context", "Random stream and non-finite policy of a call.");
  ctx.def(
         "__init__",
         [](context* self, std::uint64_t seed, std::uint64_t step, std::uint32_t tensor_id,
            nonfinite_policy on_nonfinite) {
           new (self) context{seed, step, tensor_id, on_nonfinite};
         },
         nb::arg("seed") = 0, nb::arg("step") = 0, nb::arg("tensor_id") = 0,
         nb::arg("on_nonfinite") = nonfinite_policy::propagate)
      .def_rw("seed", &context::seed)
      .def_rw("step", &context::step)
      .def_rw("tensor_id", &context::tensor_id)
      .def_rw("on_nonfinite", &context::on_nonfinite);
  ctx.def("__repr__", [](nb::handle self) {
    return config_repr(self, "context", {"seed", "step", "tensor_id", "on_nonfinite"});
  });

  nb::class_<encode_result>(m, "encode_result")
      .def_ro("bytes", &encode_result::bytes, "payload bytes written")
      .def_ro("nonfinite", &encode_result::nonfinite, "NaN/Inf input elements seen")
      .def("__repr__", [](nb::handle self) {
        return config_repr(self, "encode_result", {"bytes", "nonfinite"});
      });
  nb::class_<step_result>(m, "step_result")
      .def_ro("bytes", &step_result::bytes, "payload bytes written")
      .def_ro("nonfinite", &step_result::nonfinite, "NaN/Inf input elements seen")
      .def_ro("held", &step_result::held, "state elements kept because their update was non-finite")
      .def("__repr__", [](nb::handle self) {
        return config_repr(self, "step_result", {"bytes", "nonfinite", "held"});
      });
  nb::class_<payload_header>(m, "payload_header")
      .def_ro("codec", &payload_header::codec)
      .def_ro("element", &payload_header::element)
      .def_ro("count", &payload_header::count)
      .def_ro("body_bytes", &payload_header::body_bytes)
      .def_ro("seed", &payload_header::seed)
      .def_ro("step", &payload_header::step)
      .def_ro("tensor_id", &payload_header::tensor_id)
      .def_ro("transform", &payload_header::transform)
      .def_prop_ro("params",
                   [](const payload_header& h) {
                     return nb::bytes(reinterpret_cast<const char*>(h.params.data()),
                                      h.params.size());
                   })
      .def("__repr__", [](nb::handle self) {
        return config_repr(
            self, "payload_header",
            {"codec", "element", "count", "body_bytes", "seed", "step", "tensor_id", "transform"});
      });
  nb::class_<decode_result>(m, "decode_result")
      .def_ro("header", &decode_result::header)
      .def_ro("held", &decode_result::held)
      .def("__repr__", [](nb::handle self) {
        return config_repr(self, "decode_result", {"header", "held"});
      });

  // --- codecs --------------------------------------------------------------------------------
  {
    auto c = nb::class_<identity>(m, "identity", "Lossless fp32 baseline (C++ identity).");
    c.def(nb::init<>());
    add_common(c, "identity", {});
  }
  {
    auto c = nb::class_<cast>(m, "cast", "fp16 / bf16 on the wire (C++ cast).");
    c.def(
         "__init__", [](cast* self, dtype to) { new (self) cast{.to = to}; },
         nb::arg("to") = cast{}.to)
        .def_rw("to", &cast::to);
    add_common(c, "cast", {"to"});
  }
  {
    auto c = nb::class_<quantize>(m, "quantize", "b-bit uniform quantization (C++ quantize).");
    const quantize d{};
    c.def(
         "__init__",
         [](quantize* self, std::uint32_t bits, scale_granularity granularity, std::uint32_t group,
            quant_range range, rounding round) {
           new (self) quantize{bits, granularity, group, range, round};
         },
         nb::arg("bits") = d.bits, nb::arg("granularity") = d.granularity,
         nb::arg("group") = d.group, nb::arg("range") = d.range, nb::arg("round") = d.round)
        .def_rw("bits", &quantize::bits)
        .def_rw("granularity", &quantize::granularity)
        .def_rw("group", &quantize::group)
        .def_rw("range", &quantize::range)
        .def_rw("round", &quantize::round);
    add_common(c, "quantize", {"bits", "granularity", "group", "range", "round"});
  }
  {
    auto c = nb::class_<top_k>(m, "top_k",
                               "Exact top-k by magnitude, per tensor or per row (chunk), its kept "
                               "values as a dtype or b-bit quantized (C++ top_k).");
    const top_k d{};
    // value_quantizer: None sends the kept values as `values`; a quantize sends them through it.
    const auto quantizer_of = [](const top_k& t) -> std::optional<quantize> {
      return t.quantized() ? std::optional<quantize>(t.value_quantizer) : std::nullopt;
    };
    c.def(
         "__init__",
         [](top_k* self, float fraction, std::uint64_t count, std::uint32_t row_length,
            dtype values, std::optional<quantize> value_quantizer) {
           new (self) top_k{fraction, count, row_length, values,
                            value_quantizer.value_or(quantize{.bits = 0})};
         },
         nb::arg("fraction") = d.fraction, nb::arg("count") = d.count,
         nb::arg("row_length") = d.row_length, nb::arg("values") = d.values,
         nb::arg("value_quantizer") = nb::none())
        .def_rw("fraction", &top_k::fraction)
        .def_rw("count", &top_k::count)
        .def_rw("row_length", &top_k::row_length)
        .def_rw("values", &top_k::values)
        .def_prop_rw("value_quantizer", quantizer_of, [](top_k& t, std::optional<quantize> q) {
          t.value_quantizer = q.value_or(quantize{.bits = 0});
        });
    add_common(c, "top_k", {"fraction", "count", "row_length", "values", "value_quantizer"});
  }
  {
    auto c = nb::class_<random_k>(m, "random_k",
                                  "Shared-seed random-k, its kept values as a dtype or b-bit "
                                  "quantized (C++ random_k).");
    const random_k d{};
    // value_quantizer: None sends the kept values as `values`; a quantize sends them through it.
    const auto quantizer_of = [](const random_k& r) -> std::optional<quantize> {
      return r.quantized() ? std::optional<quantize>(r.value_quantizer) : std::nullopt;
    };
    c.def(
         "__init__",
         [](random_k* self, float fraction, std::uint64_t count, bool unbiased, dtype values,
            std::optional<quantize> value_quantizer) {
           new (self) random_k{fraction, count, unbiased, values,
                               value_quantizer.value_or(quantize{.bits = 0})};
         },
         nb::arg("fraction") = d.fraction, nb::arg("count") = d.count,
         nb::arg("unbiased") = d.unbiased, nb::arg("values") = d.values,
         nb::arg("value_quantizer") = nb::none())
        .def_rw("fraction", &random_k::fraction)
        .def_rw("count", &random_k::count)
        .def_rw("unbiased", &random_k::unbiased)
        .def_rw("values", &random_k::values)
        .def_prop_rw("value_quantizer", quantizer_of, [](random_k& r, std::optional<quantize> q) {
          r.value_quantizer = q.value_or(quantize{.bits = 0});
        });
    add_common(c, "random_k", {"fraction", "count", "unbiased", "values", "value_quantizer"});
  }
  {
    auto c = nb::class_<sign>(m, "sign", "1-bit sign with fp32 scales (C++ sign).");
    const sign d{};
    c.def(
         "__init__",
         [](sign* self, sign_granularity granularity, std::uint32_t block, sign_scale scale) {
           new (self) sign{granularity, block, scale};
         },
         nb::arg("granularity") = d.granularity, nb::arg("block") = d.block,
         nb::arg("scale") = d.scale)
        .def_rw("granularity", &sign::granularity)
        .def_rw("block", &sign::block)
        .def_rw("scale", &sign::scale);
    add_common(c, "sign", {"granularity", "block", "scale"});
  }
  {
    auto c =
        nb::class_<fp8>(m, "fp8", "E4M3 / E5M2 with f32 scales per tensor or block (C++ fp8).");
    const fp8 d{};
    c.def(
         "__init__",
         [](fp8* self, minifloat format, scale_granularity granularity, std::uint32_t group) {
           new (self) fp8{format, granularity, group};
         },
         nb::arg("format") = d.format, nb::arg("granularity") = d.granularity,
         nb::arg("group") = d.group)
        .def_rw("format", &fp8::format)
        .def_rw("granularity", &fp8::granularity)
        .def_rw("group", &fp8::group);
    add_common(c, "fp8", {"format", "granularity", "group"});
  }
  {
    auto c = nb::class_<mxfp8>(m, "mxfp8", "OCP MXFP8, E4M3 elements (C++ mxfp8).");
    c.def(nb::init<>());
    add_common(c, "mxfp8", {});
    auto c5 = nb::class_<mxfp8_e5m2>(m, "mxfp8_e5m2", "OCP MXFP8, E5M2 elements (C++ mxfp8_e5m2).");
    c5.def(nb::init<>());
    add_common(c5, "mxfp8_e5m2", {});
    auto c4 = nb::class_<mxfp4>(m, "mxfp4", "OCP MXFP4, E2M1 elements (C++ mxfp4).");
    c4.def(nb::init<>());
    add_common(c4, "mxfp4", {});
    auto nv =
        nb::class_<nvfp4>(m, "nvfp4", "NVFP4: E2M1, UE4M3 per 16, f32 tensor scale (C++ nvfp4).");
    nv.def(nb::init<>());
    add_common(nv, "nvfp4", {});
  }
  {
    auto c = nb::class_<terngrad>(
        m, "terngrad",
        "TernGrad: stochastic ternary codes, f32 scale per tensor or block (C++ terngrad).");
    const terngrad d{};
    c.def(
         "__init__",
         [](terngrad* self, std::uint32_t block, float clip_sigmas) {
           new (self) terngrad{block, clip_sigmas};
         },
         nb::arg("block") = d.block, nb::arg("clip_sigmas") = d.clip_sigmas)
        .def_rw("block", &terngrad::block)
        .def_rw("clip_sigmas", &terngrad::clip_sigmas);
    add_common(c, "terngrad", {"block", "clip_sigmas"});
    auto n = nb::class_<natural>(
        m, "natural", "Natural compression: stochastic powers of two, 8-bit codes (C++ natural).");
    const natural nd{};
    n.def(
         "__init__", [](natural* self, std::uint32_t block) { new (self) natural{block}; },
         nb::arg("block") = nd.block)
        .def_rw("block", &natural::block);
    add_common(n, "natural", {"block"});
    bind_qsgd<8>(m, "qsgd8");
    bind_qsgd<4>(m, "qsgd4");
    bind_qsgd<2>(m, "qsgd2");
    bind_rotated<quantize>(m, "rotated_quantize");
    bind_rotated<sign>(m, "rotated_sign");
    bind_rotated<mxfp4>(m, "rotated_mxfp4");
  }

  // --- the layer policy ---------------------------------------------------------------------
  nb::enum_<layer_verdict>(m, "layer_verdict",
                           "A layer policy's verdict on one tensor (C++ layer_verdict).")
      .value("compress", layer_verdict::compress)
      .value("too_small", layer_verdict::too_small)
      .value("one_dimensional", layer_verdict::one_dimensional)
      .value("excluded", layer_verdict::excluded)
      .value("low_compression_rate", layer_verdict::low_compression_rate);
  {
    auto c = nb::class_<layer_policy>(
        m, "layer_policy",
        "Which tensors are compressed, the others sent plain (C++ layer_policy).");
    const layer_policy d{};
    c.def(
         "__init__",
         [](layer_policy* self, std::uint64_t min_elements, bool compress_1d,
            double min_compression_rate, std::vector<std::string> exclude) {
           new (self)
               layer_policy{min_elements, compress_1d, min_compression_rate, std::move(exclude)};
         },
         nb::arg("min_elements") = d.min_elements, nb::arg("compress_1d") = d.compress_1d,
         nb::arg("min_compression_rate") = d.min_compression_rate,
         nb::arg("exclude") = std::vector<std::string>{})
        .def_rw("min_elements", &layer_policy::min_elements)
        .def_rw("compress_1d", &layer_policy::compress_1d)
        .def_rw("min_compression_rate", &layer_policy::min_compression_rate)
        .def_rw("exclude", &layer_policy::exclude)
        .def(
            "decide",
            [](const layer_policy& p, const std::string& name, std::vector<std::uint64_t> shape,
               dtype element, std::uint64_t payload_bytes) {
              return p.decide(tensor_info{name, shape, element}, payload_bytes);
            },
            nb::arg("name"), nb::arg("shape"), nb::arg("element"), nb::arg("payload_bytes"),
            "The verdict on a tensor whose payload would take payload_bytes bytes.");
    add_common(c, "layer_policy",
               {"min_elements", "compress_1d", "min_compression_rate", "exclude"});
  }

  {
    auto c = nb::class_<powersgd>(m, "powersgd",
                                  "PowerSGD's settings (C++ powersgd): rank-r compression of a "
                                  "matrix by one step of subspace iteration per training step.");
    const powersgd d{};
    c.def(
         "__init__",
         [](powersgd* self, std::uint32_t rank, bool warm_start, float epsilon,
            std::uint64_t start_iter) {
           new (self) powersgd{rank, warm_start, epsilon, start_iter};
         },
         nb::arg("rank") = d.rank, nb::arg("warm_start") = d.warm_start,
         nb::arg("orthogonalization_epsilon") = d.orthogonalization_epsilon,
         nb::arg("start_iter") = d.start_iter)
        .def_rw("rank", &powersgd::rank)
        .def_rw("warm_start", &powersgd::warm_start)
        .def_rw("orthogonalization_epsilon", &powersgd::orthogonalization_epsilon)
        .def_rw("start_iter", &powersgd::start_iter)
        .def("message_floats", &powersgd::message_floats, nb::arg("rows"), nb::arg("columns"),
             "Floats one rank all-reduces per step: (rows + columns) * rank.")
        .def("compression_rate", &powersgd::compression_rate, nb::arg("rows"), nb::arg("columns"),
             "rows * columns over message_floats (PyTorch's measure).");
    add_common(c, "powersgd", {"rank", "warm_start", "orthogonalization_epsilon", "start_iter"});
  }

  // --- feedback policies and their states ----------------------------------------------------
  {
    auto c = nb::class_<none>(m, "none", "No error feedback (C++ none).");
    c.def(nb::init<>());
    add_common(c, "none", {});
    auto e = nb::class_<ef>(m, "ef", "Classic error feedback (C++ ef).");
    e.def(nb::init<>());
    add_common(e, "ef", {});
    auto e21 = nb::class_<ef21>(m, "ef21", "EF21: mirrored sender and receiver (C++ ef21).");
    e21.def(nb::init<>());
    add_common(e21, "ef21", {});
  }
  {
    auto s = nb::class_<no_state>(m, "no_state", "The state of a side that keeps nothing.");
    s.def(nb::init<>());
    add_checkpoint(s);
    add_common(s, "no_state", {});
  }
  {
    auto s = nb::class_<ef_state>(m, "ef_state", "The sender's EF residual (C++ ef_state).");
    s.def(nb::init<std::uint64_t>(), nb::arg("n"))
        .def_prop_ro("size", &ef_state::size)
        .def(
            "residual", [](ef_state& st) { return view_of(st.residual(), nb::find(&st)); },
            "The residual as a float32 NumPy view into the state.");
    add_checkpoint(s);
    add_common(s, "ef_state", {"size"});
  }
  {
    auto s = nb::class_<ef21_state>(m, "ef21_state", "An EF21 mirror (C++ ef21_state).");
    s.def(nb::init<std::uint64_t>(), nb::arg("n"))
        .def_prop_ro("size", &ef21_state::size)
        .def(
            "mirror", [](ef21_state& st) { return view_of(st.mirror(), nb::find(&st)); },
            "The mirror A as a float32 NumPy view into the state.");
    add_checkpoint(s);
    add_common(s, "ef21_state", {"size"});
  }
  {
    auto c = nb::class_<dgc>(m, "dgc",
                             "Deep Gradient Compression's sender (C++ dgc): momentum correction, "
                             "momentum factor masking, local gradient clipping. Apply the "
                             "decoded mean with plain SGD, without optimizer momentum.");
    const dgc d{};
    c.def(
         "__init__",
         [](dgc* self, float momentum, float clip_norm) {
           new (self) dgc{momentum, clip_norm};
         },
         nb::arg("momentum") = d.momentum, nb::arg("clip_norm") = d.clip_norm)
        .def_rw("momentum", &dgc::momentum)
        .def_rw("clip_norm", &dgc::clip_norm);
    add_common(c, "dgc", {"momentum", "clip_norm"});
    auto s = nb::class_<dgc_state>(m, "dgc_state", "DGC's momentum u and accumulation v.");
    s.def(nb::init<std::uint64_t>(), nb::arg("n"))
        .def_prop_ro("size", &dgc_state::size)
        .def(
            "momentum", [](dgc_state& st) { return view_of(st.momentum(), nb::find(&st)); },
            "u as a float32 NumPy view into the state.")
        .def(
            "velocity", [](dgc_state& st) { return view_of(st.velocity(), nb::find(&st)); },
            "v as a float32 NumPy view into the state.");
    add_checkpoint(s);
    add_common(s, "dgc_state", {"size"});
    auto w = nb::class_<dgc_warmup>(m, "dgc_warmup",
                                    "DGC's warm-up: the density of each epoch (C++ dgc_warmup).");
    const dgc_warmup dw{};
    w.def(
         "__init__",
         [](dgc_warmup* self, float initial, float final_density, float factor) {
           new (self) dgc_warmup{initial, final_density, factor};
         },
         nb::arg("initial") = dw.initial, nb::arg("final_density") = dw.final_density,
         nb::arg("factor") = dw.factor)
        .def_rw("initial", &dgc_warmup::initial)
        .def_rw("final_density", &dgc_warmup::final_density)
        .def_rw("factor", &dgc_warmup::factor)
        .def("density", &dgc_warmup::density, nb::arg("epoch"))
        .def("epochs", &dgc_warmup::epochs);
    add_common(w, "dgc_warmup", {"initial", "final_density", "factor"});
  }
  bind_storage<store_f32>(m);
  bind_storage<store_bf16>(m);
  bind_storage<store_int8>(m);
  bind_storage<store_int4>(m);

  m.def(
      "loco",
      [](float beta, std::uint64_t reset_every, storage_kind storage) {
        switch (storage) {
        case storage_kind::bf16:
          return make_loco<store_bf16>(beta, reset_every);
        case storage_kind::int8:
          return make_loco<store_int8>(beta, reset_every);
        case storage_kind::int4:
          return make_loco<store_int4>(beta, reset_every);
        default:
          return make_loco<store_f32>(beta, reset_every);
        }
      },
      nb::arg("beta") = loco<>{}.beta, nb::arg("reset_every") = loco<>{}.reset_every,
      nb::arg("storage") = storage_kind::f32,
      "LoCo feedback, C++ loco<Storage>{beta, reset_every}, with storage store_f32, store_bf16, "
      "store_int8 (store_int<8, 128>) or store_int4 (store_int<4, 128>).");
  m.def(
      "aq_sgd",
      [](std::uint64_t samples, std::uint64_t sample_size, std::uint64_t warmup,
         storage_kind storage) {
        switch (storage) {
        case storage_kind::bf16:
          return make_aq_sgd<store_bf16>(samples, sample_size, warmup);
        case storage_kind::int8:
          return make_aq_sgd<store_int8>(samples, sample_size, warmup);
        case storage_kind::int4:
          return make_aq_sgd<store_int4>(samples, sample_size, warmup);
        default:
          return make_aq_sgd<store_f32>(samples, sample_size, warmup);
        }
      },
      nb::arg("samples"), nb::arg("sample_size"), nb::arg("warmup_steps") = 0,
      nb::arg("storage") = storage_kind::f32,
      "AQ-SGD feedback, C++ aq_sgd<Storage>{samples, sample_size, warmup_steps}.");

  // --- optimizers ----------------------------------------------------------------------------
  {
    auto s = nb::class_<sgd_state>(m, "sgd_state", "Momentum buffer and step count of sgd.");
    s.def_ro("n", &sgd_state::n)
        .def_rw("step", &sgd_state::step)
        .def("momentum", [](sgd_state& st) { return view_of(st.momentum, nb::find(&st)); });
    add_checkpoint(s);
    add_common(s, "sgd_state", {"n", "step"});
    auto o = nb::class_<sgd>(m, "sgd", "torch.optim.SGD semantics (C++ sgd).");
    const sgd d{};
    o.def(
         "__init__",
         [](sgd* self, float lr, float momentum, float dampening, float weight_decay,
            bool nesterov) {
           new (self) sgd{lr, momentum, dampening, weight_decay, nesterov};
         },
         nb::arg("lr") = d.lr, nb::arg("momentum") = d.momentum, nb::arg("dampening") = d.dampening,
         nb::arg("weight_decay") = d.weight_decay, nb::arg("nesterov") = d.nesterov)
        .def_rw("lr", &sgd::lr)
        .def_rw("momentum", &sgd::momentum)
        .def_rw("dampening", &sgd::dampening)
        .def_rw("weight_decay", &sgd::weight_decay)
        .def_rw("nesterov", &sgd::nesterov)
        .def("can_implement", &sgd::can_implement, nb::arg("n"))
        .def("make_state", &sgd::make_state, nb::arg("n"))
        .def("step", &optimizer_step<sgd>, nb::arg("state"), nb::arg("params"), nb::arg("grads"),
             "One update of float32 `params` in place from `grads`.");
    add_common(o, "sgd", {"lr", "momentum", "dampening", "weight_decay", "nesterov"});
  }
  {
    auto s = nb::class_<adam_state>(m, "adam_state", "Moments and step count of adam / adamw.");
    s.def_ro("n", &adam_state::n)
        .def_rw("step", &adam_state::step)
        .def("exp_avg", [](adam_state& st) { return view_of(st.exp_avg, nb::find(&st)); })
        .def("exp_avg_sq", [](adam_state& st) { return view_of(st.exp_avg_sq, nb::find(&st)); });
    add_checkpoint(s);
    add_common(s, "adam_state", {"n", "step"});
  }
  const auto bind_adam = [&m]<bool Decoupled>(const char* name, const char* doc) {
    using A = basic_adam<Decoupled>;
    auto o = nb::class_<A>(m, name, doc);
    const A d{};
    o.def(
         "__init__",
         [](A* self, float lr, float beta1, float beta2, float eps, float weight_decay,
            bool bias_correction) {
           new (self) A{lr, beta1, beta2, eps, weight_decay, bias_correction};
         },
         nb::arg("lr") = d.lr, nb::arg("beta1") = d.beta1, nb::arg("beta2") = d.beta2,
         nb::arg("eps") = d.eps, nb::arg("weight_decay") = d.weight_decay,
         nb::arg("bias_correction") = d.bias_correction)
        .def_rw("lr", &A::lr)
        .def_rw("beta1", &A::beta1)
        .def_rw("beta2", &A::beta2)
        .def_rw("eps", &A::eps)
        .def_rw("weight_decay", &A::weight_decay)
        .def_rw("bias_correction", &A::bias_correction)
        .def("can_implement", &A::can_implement, nb::arg("n"))
        .def("make_state", &A::make_state, nb::arg("n"))
        .def("step", &optimizer_step<A>, nb::arg("state"), nb::arg("params"), nb::arg("grads"),
             "One update of float32 `params` in place from `grads`.");
    add_common(o, name, {"lr", "beta1", "beta2", "eps", "weight_decay", "bias_correction"});
  };
  bind_adam.template operator()<false>("adam", "torch.optim.Adam semantics (C++ adam).");
  bind_adam.template operator()<true>("adamw", "torch.optim.AdamW semantics (C++ adamw).");
  {
    auto o = nb::class_<onebit_adam_config>(m, "onebit_adam_config",
                                            "1-bit Adam hyperparameters (C++ onebit_adam_config).");
    const onebit_adam_config d{};
    o.def(
         "__init__",
         [](onebit_adam_config* self, float lr, float beta1, float beta2, float eps,
            float weight_decay, std::uint64_t freeze_step, bool bias_correction,
            bool mask_zero_variance, float variance_floor) {
           new (self) onebit_adam_config{lr,
                                         beta1,
                                         beta2,
                                         eps,
                                         weight_decay,
                                         freeze_step,
                                         bias_correction,
                                         mask_zero_variance,
                                         variance_floor};
         },
         nb::arg("lr") = d.lr, nb::arg("beta1") = d.beta1, nb::arg("beta2") = d.beta2,
         nb::arg("eps") = d.eps, nb::arg("weight_decay") = d.weight_decay,
         nb::arg("freeze_step") = d.freeze_step, nb::arg("bias_correction") = d.bias_correction,
         nb::arg("mask_zero_variance") = d.mask_zero_variance,
         nb::arg("variance_floor") = d.variance_floor)
        .def_rw("lr", &onebit_adam_config::lr)
        .def_rw("beta1", &onebit_adam_config::beta1)
        .def_rw("beta2", &onebit_adam_config::beta2)
        .def_rw("eps", &onebit_adam_config::eps)
        .def_rw("weight_decay", &onebit_adam_config::weight_decay)
        .def_rw("freeze_step", &onebit_adam_config::freeze_step)
        .def_rw("bias_correction", &onebit_adam_config::bias_correction)
        .def_rw("mask_zero_variance", &onebit_adam_config::mask_zero_variance)
        .def_rw("variance_floor", &onebit_adam_config::variance_floor)
        .def("warmup_optimizer", &onebit_adam_config::warmup_optimizer)
        .def("can_implement", &onebit_adam_config::can_implement, nb::arg("n"));
    add_common(o, "onebit_adam_config",
               {"lr", "beta1", "beta2", "eps", "weight_decay", "freeze_step", "bias_correction",
                "mask_zero_variance"});
  }
}

} // namespace commpress::py

NB_MODULE(_commpress, m) {
  m.doc() = "commpress: compression of what crosses the wire in distributed training (the C++ "
            "library's host and CUDA entry points over DLPack arrays).";
  commpress::py::bind_types(m);
  commpress::py::bind_api(m);
  commpress::py::bind_optim(m);
  commpress::py::bind_powersgd(m);
}
