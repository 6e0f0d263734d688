// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

/// @file
/// PowerSGD (C++ collective/powersgd.hpp): its plan and state, and one step as a `powersgd_round`
/// whose three phases the caller separates by its own all-reduces, which is how
/// commpress.torch.CompressionHook drives it over a torch.distributed process group. Its
/// configuration, `powersgd`, is bound with the others in module.cpp.

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "commpress/collective/powersgd.hpp"
#include "module.hpp"

namespace commpress::py {
namespace {

using float_view = nb::ndarray<nb::numpy, float, nb::ndim<1>>;

/// A round with the input and workspace it reads from: the spans project() and back_project()
/// return live in them (or in the state), so the Python object keeps all of it alive.
struct py_round {
  std::vector<float> input;
  std::vector<std::byte> workspace;
  nb::object plan_owner, state_owner; // keep the plan and the state alive while the round lives
  std::unique_ptr<powersgd_round> round;
};

float_view view(std::span<float> v, nb::handle owner) {
  return float_view(v.data(), {v.size()}, owner);
}

/// A float32 array in host memory (PowerSGD's products run on the CPU).
std::span<float> host_floats(const array_info& a, const char* what) {
  COMMPRESS_EXPECTS(a.where == memory::host, errc::invalid_argument, "python",
                    std::string("powersgd: ") + what + " must be in host memory");
  return as_floats(a, what);
}

} // namespace

void bind_powersgd(nb::module_& m) {
  nb::class_<collective_result>(m, "collective_result",
                                "What one collective call did on this rank.")
      .def_ro("payload_bytes", &collective_result::payload_bytes)
      .def_ro("wire_bytes", &collective_result::wire_bytes)
      .def_ro("nonfinite", &collective_result::nonfinite)
      .def_ro("held", &collective_result::held);
  nb::class_<powersgd_state>(m, "powersgd_state",
                             "One rank's PowerSGD state of one tensor: the error and Q.")
      .def_prop_ro("rows", &powersgd_state::rows)
      .def_prop_ro("columns", &powersgd_state::columns)
      .def_prop_ro("rank", &powersgd_state::rank)
      .def_prop_ro("has_q", &powersgd_state::has_q)
      .def("residual", [](powersgd_state& st) { return view(st.residual(), nb::find(&st)); })
      .def("q", [](powersgd_state& st) { return view(st.q(), nb::find(&st)); })
      .def(
          "save",
          [](const powersgd_state& st, std::uint32_t tensor_id) {
            const std::vector<std::byte> b = st.save(tensor_id);
            return to_bytes(b);
          },
          nb::arg("tensor_id"))
      .def(
          "load",
          [](powersgd_state& st, nb::bytes blob, std::uint32_t tensor_id) {
            st.load(std::span(reinterpret_cast<const std::byte*>(blob.c_str()), blob.size()),
                    tensor_id);
          },
          nb::arg("blob"), nb::arg("tensor_id"));
  nb::class_<powersgd_plan>(m, "powersgd_plan",
                            "PowerSGD on one rows x columns tensor over `ranks` ranks (C++ "
                            "powersgd_plan, mean scaling).")
      .def(nb::init<const powersgd&, std::uint64_t, std::uint64_t, int>(), nb::arg("config"),
           nb::arg("rows"), nb::arg("columns"), nb::arg("ranks"))
      .def_prop_ro("rows", &powersgd_plan::rows)
      .def_prop_ro("columns", &powersgd_plan::columns)
      .def_prop_ro("rank", &powersgd_plan::rank)
      .def_prop_ro("config", &powersgd_plan::config)
      .def("message_floats", &powersgd_plan::message_floats, nb::arg("step"))
      .def("wire_bytes", &powersgd_plan::wire_bytes, nb::arg("step"))
      .def("make_state", &powersgd_plan::make_state);
  nb::class_<py_round>(m, "powersgd_round",
                       "One PowerSGD step on one rank (C++ powersgd_round): project(), sum the "
                       "array it returns across ranks in place; back_project(), sum that array; "
                       "finish(out).")
      .def(
          "__init__",
          [](py_round* self, nb::handle plan_obj, nb::handle state_obj, const context& ctx,
             const in_array& input) {
            const auto& plan = nb::cast<const powersgd_plan&>(plan_obj);
            auto& state = nb::cast<powersgd_state&>(state_obj);
            const std::span<float> in = host_floats(inspect(input, "input"), "input");
            // Everything that can throw runs before *self is constructed: a refused round must
            // not hold references to the plan and the state. Moving the vectors keeps the
            // buffers the round's spans point into.
            py_round r;
            r.input.assign(in.begin(), in.end()); // the caller may overwrite its gradient
            r.workspace.resize(plan.workspace_bytes());
            r.round = std::make_unique<powersgd_round>(plan, state, ctx, r.input, r.workspace);
            r.plan_owner = nb::borrow(plan_obj);
            r.state_owner = nb::borrow(state_obj);
            new (self) py_round(std::move(r));
          },
          nb::arg("plan"), nb::arg("state"), nb::arg("ctx"), nb::arg("input"))
      .def(
          "project", [](py_round& r) { return view(r.round->project(), nb::find(&r)); },
          "P (rows x rank, row-major), or the gradient while warming up: sum it across ranks "
          "in place.")
      .def(
          "back_project", [](py_round& r) { return view(r.round->back_project(), nb::find(&r)); },
          "Q (columns x rank, row-major) after P was summed, empty while warming up: sum it "
          "across ranks in place.")
      .def(
          "finish",
          [](py_round& r, const out_array& out) {
            return r.round->finish(host_floats(inspect(out, "out"), "out"));
          },
          nb::arg("out"), "Writes the mean to `out` (float32) and updates the error.");
}

} // namespace commpress::py
