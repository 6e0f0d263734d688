// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

/// @file
/// 1-bit Adam (C++ onebit_adam<Comm, Pipeline, Exchange>) over a communicator written in Python.
///
/// py_communicator models the C++ `communicator` concept (comm/communicator.hpp) by calling
/// the methods of a Python object (all_gather, all_to_all, send, recv, all_reduce_sum, barrier)
/// with NumPy views of the library's buffers; commpress.torch.TorchCommunicator is one over a
/// torch.distributed process group. The library's step runs without the GIL and takes it back
/// only inside those calls.

#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>

#include "codec_impl.hpp"
#include "commpress/backend/cpu/identity.hpp"
#include "commpress/optim/onebit_adam.hpp"
#include "module.hpp"

namespace commpress::py {
namespace {

/// The communicator concept over a Python object's methods.
class py_communicator {
public:
  explicit py_communicator(nb::object impl)
      : impl_(std::move(impl)), rank_(nb::cast<int>(impl_.attr("rank")())),
        size_(nb::cast<int>(impl_.attr("size")())) {}

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return size_; }

  void all_gather(std::span<const std::byte> in, std::span<std::byte> out) {
    nb::gil_scoped_acquire gil;
    impl_.attr("all_gather")(view(in), view(out));
  }
  void all_to_all(std::span<const std::byte> in, std::span<std::byte> out) {
    nb::gil_scoped_acquire gil;
    impl_.attr("all_to_all")(view(in), view(out));
  }
  void send(std::span<const std::byte> in, int peer, int tag) {
    nb::gil_scoped_acquire gil;
    impl_.attr("send")(view(in), peer, tag);
  }
  void recv(std::span<std::byte> out, int peer, int tag) {
    nb::gil_scoped_acquire gil;
    impl_.attr("recv")(view(out), peer, tag);
  }
  void all_reduce_sum(std::span<float> v) {
    nb::gil_scoped_acquire gil;
    impl_.attr("all_reduce_sum")(
        nb::cast(nb::ndarray<nb::numpy, float, nb::ndim<1>>(v.data(), {v.size()}, nb::handle()),
                 nb::rv_policy::reference));
  }
  void barrier() {
    nb::gil_scoped_acquire gil;
    impl_.attr("barrier")();
  }

private:
  /// A NumPy view of a library buffer (made with the GIL held), valid during the call only:
  /// rv_policy::reference, since an ndarray without an owner would otherwise be copied.
  static nb::object view(std::span<const std::byte> b) {
    return nb::cast(nb::ndarray<nb::numpy, std::uint8_t, nb::ndim<1>>(
                        reinterpret_cast<std::uint8_t*>(const_cast<std::byte*>(b.data())),
                        {b.size()}, nb::handle()),
                    nb::rv_policy::reference);
  }

  nb::object impl_;
  int rank_;
  int size_;
};

static_assert(communicator<py_communicator>);

/// The sharded exchange's errors (a worker error per chunk and the server error), whose C++
/// type depends on the pipeline: Python holds them through this interface.
class sharded_errors {
public:
  virtual ~sharded_errors() = default;
  /// One blob per worker error, then the server error's.
  [[nodiscard]] virtual std::vector<std::vector<std::byte>> save() const = 0;
  /// Restores save()'s blobs; a wrong count, kind or size throws and changes nothing.
  virtual void load(const std::vector<std::vector<std::byte>>& blobs) = 0;
};

template <class State> class sharded_errors_of final : public sharded_errors {
public:
  explicit sharded_errors_of(State s) : state(std::move(s)) {}
  [[nodiscard]] std::vector<std::vector<std::byte>> save() const override {
    std::vector<std::vector<std::byte>> blobs;
    for (const auto& w : state.worker)
      blobs.push_back(w.save(0));
    blobs.push_back(state.server.save(0));
    return blobs;
  }
  void load(const std::vector<std::vector<std::byte>>& blobs) override {
    COMMPRESS_EXPECTS(blobs.size() == state.worker.size() + 1, errc::size_mismatch, "python",
                      "onebit_adam: the checkpoint holds " + std::to_string(blobs.size()) +
                          " errors, this state " + std::to_string(state.worker.size() + 1));
    State fresh = state;
    for (std::size_t i = 0; i < fresh.worker.size(); ++i)
      fresh.worker[i].load(blobs[i], 0);
    fresh.server.load(blobs.back(), 0);
    state = std::move(fresh);
  }
  State state;
};

class onebit_iface {
public:
  virtual ~onebit_iface() = default;
  virtual onebit_adam_result step(const context& ctx, adam_state& st, nb::handle worker_error,
                                  std::span<float> params, std::span<const float> grads) = 0;
  [[nodiscard]] virtual nb::object make_state() const = 0;
  [[nodiscard]] virtual nb::object make_feedback_state() const = 0;
  [[nodiscard]] virtual bool compressing(const adam_state& st) const = 0;
  [[nodiscard]] virtual std::vector<float> last_average() const = 0;
};

template <class P, class E> class onebit_impl final : public onebit_iface {
  using opt_t = onebit_adam<py_communicator, P, E>;
  using state_t = typename opt_t::feedback_state;
  static constexpr bool sharded = std::same_as<E, sharded_exchange>;

public:
  onebit_impl(nb::object comm, const P& pipe, const onebit_adam_config& cfg, std::uint64_t n)
      : comm_(std::move(comm)), opt_(comm_, pipe, cfg, n, E{}) {}
  onebit_adam_result step(const context& ctx, adam_state& st, nb::handle worker_error,
                          std::span<float> params, std::span<const float> grads) override {
    state_t* fb = nullptr;
    if constexpr (sharded) {
      if (nb::isinstance<sharded_errors>(worker_error)) {
        auto* held =
            dynamic_cast<sharded_errors_of<state_t>*>(&nb::cast<sharded_errors&>(worker_error));
        fb = held != nullptr ? &held->state : nullptr;
      }
    } else if (nb::isinstance<state_t>(worker_error)) {
      fb = &nb::cast<state_t&>(worker_error);
    }
    if (fb == nullptr)
      detail::throw_error(errc::invalid_argument, "python",
                          "worker_error is not this optimizer's feedback state (make it with "
                          "make_feedback_state())");
    nb::gil_scoped_release nogil;
    return opt_.step(cpu::seq, ctx, st, *fb, params, grads);
  }
  [[nodiscard]] nb::object make_state() const override { return nb::cast(opt_.make_state()); }
  [[nodiscard]] nb::object make_feedback_state() const override {
    if constexpr (sharded)
      return nb::cast(std::unique_ptr<sharded_errors>(
          std::make_unique<sharded_errors_of<state_t>>(opt_.make_feedback_state())));
    else
      return nb::cast(opt_.make_feedback_state());
  }
  [[nodiscard]] bool compressing(const adam_state& st) const override {
    return opt_.compressing(st);
  }
  [[nodiscard]] std::vector<float> last_average() const override {
    const auto a = opt_.last_average();
    return {a.begin(), a.end()};
  }

private:
  py_communicator comm_;
  opt_t opt_;
};

struct py_onebit {
  std::unique_ptr<onebit_iface> impl;
};

} // namespace

void bind_optim(nb::module_& m) {
  nb::class_<data_parallel_result>(m, "data_parallel_result")
      .def_ro("payload_bytes", &data_parallel_result::payload_bytes)
      .def_ro("nonfinite", &data_parallel_result::nonfinite);
  nb::class_<onebit_adam_result, data_parallel_result>(m, "onebit_adam_result")
      .def_ro("wire_bytes", &onebit_adam_result::wire_bytes,
              "bytes this rank sent in the step's exchange");
  nb::class_<sharded_errors>(m, "onebit_sharded_errors",
                             "The worker errors (one per chunk) and the server error of "
                             "onebit_adam(exchange='sharded'); make it with make_feedback_state().")
      .def(
          "save",
          [](const sharded_errors& e) {
            std::vector<nb::bytes> out;
            for (const auto& b : e.save())
              out.push_back(to_bytes(b));
            return out;
          },
          "One checkpoint blob per worker error, then the server error's.")
      .def(
          "load",
          [](sharded_errors& e, const std::vector<nb::bytes>& blobs) {
            std::vector<std::vector<std::byte>> raw;
            for (const auto& b : blobs) {
              const auto* p = reinterpret_cast<const std::byte*>(b.c_str());
              raw.emplace_back(p, p + b.size());
            }
            e.load(raw);
          },
          nb::arg("blobs"),
          "Restores save()'s blobs; raises commpress.Error and changes nothing for a wrong "
          "count, kind or size.");
  nb::class_<py_onebit>(
      m, "onebit_adam",
      "C++ onebit_adam<Comm, Pipeline, Exchange> over a Python communicator: an object with "
      "rank(), "
      "size(), all_gather(mine, all), all_to_all(send, recv), send(buf, peer, tag), "
      "recv(buf, peer, tag), all_reduce_sum(floats) and barrier() working in place on NumPy "
      "arrays (commpress.torch.TorchCommunicator). The pipeline's feedback is none or ef. "
      "exchange='gather' all-gathers the compressed momenta (one error point, N - 1 payloads "
      "per rank); 'sharded' is DeepSpeed's compressed_allreduce (worker and server errors, "
      "about two payloads per rank whatever N).")
      .def(
          "__init__",
          [](py_onebit* self, nb::object comm, const any_pipeline& pipe,
             const onebit_adam_config& cfg, std::uint64_t n, const std::string& exchange) {
            COMMPRESS_EXPECTS(
                exchange == "gather" || exchange == "sharded", errc::invalid_argument, "python",
                "onebit_adam: exchange is 'gather' or 'sharded', not '" + exchange + "'");
            auto impl = std::visit(
                [&](const auto& f, const auto& c) -> std::unique_ptr<onebit_iface> {
                  using F = std::decay_t<decltype(f)>;
                  if constexpr (F::id == feedback_id::none || F::id == feedback_id::ef) {
                    using P = pipeline<F, std::decay_t<decltype(c)>>;
                    if (exchange == "sharded")
                      return std::make_unique<onebit_impl<P, sharded_exchange>>(
                          comm, concrete(f, c), cfg, n);
                    return std::make_unique<onebit_impl<P, gather_exchange>>(comm, concrete(f, c),
                                                                             cfg, n);
                  } else {
                    detail::throw_error(errc::invalid_argument, "python",
                                        "onebit_adam takes a pipeline with feedback none or ef");
                  }
                },
                pipe.feedback, pipe.codec);
            new (self) py_onebit{std::move(impl)};
          },
          nb::arg("comm"), nb::arg("pipe"), nb::arg("config"), nb::arg("n"),
          nb::arg("exchange") = "gather")
      .def(
          "make_state", [](const py_onebit& o) { return o.impl->make_state(); },
          "Zeroed moments and step count (an adam_state).")
      .def(
          "make_feedback_state", [](const py_onebit& o) { return o.impl->make_feedback_state(); },
          "A zeroed worker error (the pipeline's feedback state).")
      .def(
          "compressing",
          [](const py_onebit& o, const adam_state& st) { return o.impl->compressing(st); },
          nb::arg("state"))
      .def(
          "last_average", [](const py_onebit& o) { return to_numpy(o.impl->last_average()); },
          "The gradient (warm-up) or momentum (compression stage) average of the last step.")
      .def(
          "step",
          [](py_onebit& o, const context& ctx, adam_state& st, nb::handle worker_error,
             const out_array& params, const in_array& grads) {
            const array_info p = inspect(params, "params");
            const array_info g = inspect(grads, "grads");
            COMMPRESS_EXPECTS(p.where == memory::host && g.where == memory::host,
                              errc::invalid_argument, "python",
                              "wrong device: onebit_adam runs on host memory (cpu::seq)");
            const std::span<float> ps = as_floats(p, "params");
            const std::span<float> gs = as_floats(g, "grads");
            return o.impl->step(ctx, st, worker_error, ps, gs);
          },
          nb::arg("ctx"), nb::arg("state"), nb::arg("worker_error"), nb::arg("params"),
          nb::arg("grads"),
          "One step on every rank: exchanges (lossless during warm-up, compressed after) and "
          "updates float32 `params` in place.");
}

} // namespace commpress::py
