// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// What the two nanobind translation units share: the array checks that turn DLPack arrays into
/// the plain views of binding.hpp, and the registration functions each one defines.
///
/// Every check here throws commpress::error (so Python sees commpress.Error with its errc)
/// before the library is called, hence before anything is written.

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "binding.hpp"

namespace nb = nanobind;

namespace commpress::py {

/// Any array (read-only ones too): inputs and payloads.
using in_array = nb::ndarray<nb::ro>;
/// A writable array: outputs, accumulators, workspaces.
using out_array = nb::ndarray<>;

/// Where an array lives, as DLPack says.
enum class memory : std::uint8_t { host, cuda };

/// The checked facts about one array.
struct array_info {
  void* data = nullptr;
  std::uint64_t count = 0; ///< elements
  nb::dlpack::dtype type{};
  memory where = memory::host;
  int device = 0;
};

/// Checks that `a` is C-contiguous and in host or CUDA memory.
array_info inspect(const in_array& a, const char* what);
array_info inspect(const out_array& a, const char* what);

/// A float32, float16 or bfloat16 tensor.
tensor_ref as_tensor(const array_info& a, const char* what);
/// A float32 array.
std::span<float> as_floats(const array_info& a, const char* what);
/// A uint8 or int8 array as bytes.
bytes as_bytes(const array_info& a, const char* what);
/// Sample ids: a uint64 or int64 array (torch has no uint64), read as uint64.
ids_span as_ids(const array_info& a, const char* what);

/// The policy of a call: `policy` when given, else cpu::seq for host arrays and
/// cuda::par.on(stream) for device arrays; every array must be in the policy's memory.
policy_ref resolve_policy(const nb::object& policy, const nb::object& stream,
                          std::initializer_list<const array_info*> arrays);

/// A new one-dimensional NumPy array that owns `v`.
template <class T> nb::ndarray<nb::numpy, T, nb::ndim<1>> to_numpy(std::vector<T>&& v) {
  auto* heap = new std::vector<T>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T, nb::ndim<1>>(heap->data(), {heap->size()}, owner);
}

/// Python bytes holding a copy of `b`.
inline nb::bytes to_bytes(std::span<const std::byte> b) {
  return nb::bytes(reinterpret_cast<const char*>(b.data()), b.size());
}

/// Registers the enums, configurations, results, states and optimizers (module.cpp).
void bind_types(nb::module_& m);
/// Registers 1-bit Adam over a Python communicator (optim.cpp).
void bind_optim(nb::module_& m);
/// Registers PowerSGD's configuration, plan, state and round (powersgd.cpp).
void bind_powersgd(nb::module_& m);
/// Registers encode / decode / decode_accumulate / roundtrip, sizes, channels and layout
/// helpers (api.cpp).
void bind_api(nb::module_& m);

} // namespace commpress::py
