// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The `communicator` concept: the few collective and point-to-point operations compression
/// algorithms need from the training engine's existing network layer, over caller-provided
/// buffers. commpress never implements its own transport; adapters (loopback.hpp, mpi.hpp,
/// nccl.hpp) map these operations onto an engine's primitives.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace commpress {

namespace detail {

/// @brief Throws the exception every communicator adapter raises:
/// `std::runtime_error("commpress: <component>: <what>")`.
/// @note Single switch point to the core error type: once include/commpress/core/error.hpp is
/// final, make the body `detail::throw_error(code, component, what)` (commpress::error derives
/// from std::runtime_error, so callers catching std::runtime_error keep working). That needs an
/// `errc` parameter here (invalid_argument / size_mismatch for preconditions, and a new code
/// for transport failures, which errc lacks today) and appends " (<errc>)" to messages.
[[noreturn]] inline void comm_fail(const char* component, const std::string& what) {
  throw std::runtime_error(std::string("commpress: ") + component + ": " + what);
}

} // namespace detail

/// @brief The operations a compression algorithm needs from a group of `size()` workers.
///
/// Every operation is over raw caller-provided buffers and is called by all ranks of the group
/// in the same order (collectives) or by a matching sender/receiver pair (point-to-point).
/// Buffers are host memory unless the adapter declares `static constexpr bool device_buffers =
/// true` (see `uses_device_buffers_v`), in which case they are device memory and the operations
/// may be asynchronous.
///
/// Semantics each model must provide:
/// - `rank()` in `[0, size())`, `size() >= 1`, both constant for the object's lifetime.
/// - `all_gather(mine, all)`: every rank contributes a block of the same `mine.size()` bytes;
///   `all.size() == size() * mine.size()`; block `r` of `all` receives rank `r`'s `mine`.
/// - `all_to_all(send, recv)`: `send.size() == recv.size()`, divisible by `size()`; block `p`
///   of `send` goes to rank `p`, and block `p` of `recv` comes from rank `p`.
/// - `send(buf, peer, tag)` / `recv(buf, peer, tag)`: a message of exactly `buf.size()` bytes;
///   messages between one (sender, receiver, tag) triple are received in the order sent.
///   `tag >= 0`.
/// - `all_reduce_sum(inout)`: element-wise sum over ranks, in place; every rank passes the same
///   element count. Whether the result is bitwise reproducible depends on the adapter (see each
///   adapter, and `all_reduce_sum_ordered` below).
/// - `barrier()`: returns once every rank has entered it.
///
/// Sizes that violate a precondition make the adapter throw `std::runtime_error` whose message
/// starts with `commpress: <adapter>: `.
template <class C>
concept communicator = requires(C& c, const C& cc, std::span<const std::byte> in,
                                std::span<std::byte> out, std::span<float> f, int peer, int tag) {
  { cc.rank() } -> std::convertible_to<int>;
  { cc.size() } -> std::convertible_to<int>;
  c.all_gather(in, out);
  c.all_to_all(in, out);
  c.send(in, peer, tag);
  c.recv(out, peer, tag);
  c.all_reduce_sum(f);
  c.barrier();
};

/// @brief A `communicator` that can also sum `double` buffers in place.
template <class C>
concept communicator_f64 = communicator<C> && requires(C& c, std::span<double> d) {
  c.all_reduce_sum(d);
};

/// @brief True when `C` declares `static constexpr bool device_buffers = true`: its operations
/// take device pointers (wrapped in spans that must not be dereferenced on the host).
template <class C> inline constexpr bool uses_device_buffers_v = requires {
  requires C::device_buffers;
};

namespace detail {

/// @brief Rank-ordered sum of `size` gathered blocks of `n` elements into `out`:
/// `out[i] = g[0][i] + g[1][i] + ... + g[size-1][i]`, left to right. Starting from rank 0's value
/// (not from 0) keeps the result bitwise equal to that expression, including signed zeros.
template <class T> void sum_in_rank_order(const T* gathered, std::size_t n, int size, T* out) {
  for (std::size_t i = 0; i < n; ++i) {
    T acc = gathered[i];
    for (int r = 1; r < size; ++r)
      acc += gathered[static_cast<std::size_t>(r) * n + i];
    out[i] = acc;
  }
}

} // namespace detail

/// @brief Bitwise-reproducible all-reduce: `inout[i] = x_0[i] + x_1[i] + ... + x_{size-1}[i]`
/// summed left to right in rank order, identical on every rank and on every run, whatever the
/// transport's own reduction algorithm.
///
/// Implemented with `all_gather` in chunks of at most `chunk_elems` elements per rank, so it
/// needs `size() * chunk_elems` elements of scratch and moves `size()` times more data than a
/// ring all-reduce. Host communicators only.
/// @param comm a host communicator; every rank calls this with the same count and chunk.
/// @param inout this rank's addend on entry, the sum on return.
/// @param chunk_elems elements per rank gathered per round; must be > 0.
/// @throws std::runtime_error when `chunk_elems == 0`, or whatever `comm.all_gather` throws.
template <communicator C, class T>
requires(!uses_device_buffers_v<C> &&
         (std::same_as<T, float> ||
          std::same_as<T, double>)) void all_reduce_sum_ordered(C& comm, std::span<T> inout,
                                                                std::size_t chunk_elems = 1u
                                                                                          << 20) {
  if (chunk_elems == 0)
    detail::comm_fail("comm", "all_reduce_sum_ordered: chunk_elems must be > 0");
  const int size = static_cast<int>(comm.size());
  // Equal counts on every rank are a precondition, so every rank takes the same early exit
  // and performs the same number of all_gathers. One rank: the sum is its own buffer.
  if (size == 1 || inout.empty())
    return;
  const std::size_t chunk = std::min(chunk_elems, inout.size());
  std::vector<T> gathered(chunk * static_cast<std::size_t>(size));
  for (std::size_t off = 0; off < inout.size(); off += chunk) {
    const std::size_t n = std::min(chunk, inout.size() - off);
    const std::span<T> part = inout.subspan(off, n);
    comm.all_gather(std::as_bytes(part),
                    std::as_writable_bytes(std::span<T>(gathered.data(), n * size)));
    detail::sum_in_rank_order(gathered.data(), n, size, part.data());
  }
}

} // namespace commpress
