// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

/// @file
/// 1-bit Adam (C++ onebit_adam<Comm, Pipeline>) over a communicator written in Python.
///
/// py_communicator models the C++ `communicator` concept (comm/communicator.hpp) by calling
/// the methods of a Python object (all_gather, all_to_all, send, recv, all_reduce_sum, barrier)
/// with NumPy views of the library's buffers; commpress.torch.TorchCommunicator is one over a
/// torch.distributed process group. The library's step runs without the GIL and takes it back
/// only inside those calls.

#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>

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

class onebit_iface {
public:
  virtual ~onebit_iface() = default;
  virtual data_parallel_result step(const context& ctx, adam_state& st, nb::handle worker_error,
                                    std::span<float> params, std::span<const float> grads) = 0;
  [[nodiscard]] virtual nb::object make_state() const = 0;
  [[nodiscard]] virtual nb::object make_feedback_state() const = 0;
  [[nodiscard]] virtual bool compressing(const adam_state& st) const = 0;
  [[nodiscard]] virtual std::vector<float> last_average() const = 0;
};

template <class P> class onebit_impl final : public onebit_iface {
public:
  onebit_impl(nb::object comm, const P& pipe, const onebit_adam_config& cfg, std::uint64_t n)
      : comm_(std::move(comm)), opt_(comm_, pipe, cfg, n) {}
  data_parallel_result step(const context& ctx, adam_state& st, nb::handle worker_error,
                            std::span<float> params, std::span<const float> grads) override {
    using state_t = typename onebit_adam<py_communicator, P>::feedback_state;
    if (!nb::isinstance<state_t>(worker_error))
      detail::throw_error(errc::invalid_argument, "python",
                          "worker_error is not this pipeline's feedback state (make it with "
                          "make_feedback_state())");
    auto& fb = nb::cast<state_t&>(worker_error);
    nb::gil_scoped_release nogil;
    return opt_.step(cpu::seq, ctx, st, fb, params, grads);
  }
  [[nodiscard]] nb::object make_state() const override { return nb::cast(opt_.make_state()); }
  [[nodiscard]] nb::object make_feedback_state() const override {
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
  onebit_adam<py_communicator, P> opt_;
};

struct py_onebit {
  std::unique_ptr<onebit_iface> impl;
};

} // namespace

void bind_optim(nb::module_& m) {
  nb::class_<data_parallel_result>(m, "data_parallel_result")
      .def_ro("payload_bytes", &data_parallel_result::payload_bytes)
      .def_ro("nonfinite", &data_parallel_result::nonfinite);
  nb::class_<py_onebit>(
      m, "onebit_adam",
      "C++ onebit_adam<Comm, Pipeline> over a Python communicator: an object with rank(), "
      "size(), all_gather(mine, all), all_to_all(send, recv), send(buf, peer, tag), "
      "recv(buf, peer, tag), all_reduce_sum(floats) and barrier() working in place on NumPy "
      "arrays (commpress.torch.TorchCommunicator). The pipeline's feedback is none or ef.")
      .def(
          "__init__",
          [](py_onebit* self, nb::object comm, const any_pipeline& pipe,
             const onebit_adam_config& cfg, std::uint64_t n) {
            auto impl = std::visit(
                [&](const auto& f, const auto& c) -> std::unique_ptr<onebit_iface> {
                  using F = std::decay_t<decltype(f)>;
                  if constexpr (F::id == feedback_id::none || F::id == feedback_id::ef) {
                    return std::make_unique<onebit_impl<pipeline<F, std::decay_t<decltype(c)>>>>(
                        comm, concrete(f, c), cfg, n);
                  } else {
                    detail::throw_error(errc::invalid_argument, "python",
                                        "onebit_adam takes a pipeline with feedback none or ef");
                  }
                },
                pipe.feedback, pipe.codec);
            new (self) py_onebit{std::move(impl)};
          },
          nb::arg("comm"), nb::arg("pipe"), nb::arg("config"), nb::arg("n"))
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
