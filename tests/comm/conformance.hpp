// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Transport-independent conformance checks for host `communicator` models, shared by the
/// loopback and MPI tests. Every rank can compute every rank's inputs (they are a function of
/// rank and index), so each rank checks its own outputs locally and returns its failures as
/// strings; the caller asserts on them (on the main thread for the loopback).

#include <commpress/comm/communicator.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace commpress::test {

/// @brief splitmix64: a tiny, portable, deterministic mixer.
inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// @brief Byte `i` that rank `src` contributes for a message to `dst` in round `salt`.
inline std::byte pattern(int src, int dst, std::size_t i, std::uint64_t salt) {
  const std::uint64_t h = mix(salt * 1000003u + static_cast<std::uint64_t>(src) * 7919u +
                              static_cast<std::uint64_t>(dst) * 104729u + i);
  return static_cast<std::byte>(h & 0xFFu);
}

/// @brief A finite value of rank `rank` at index `i` whose magnitude spans 2^-20..2^20, with
/// either sign, so that the order of additions changes the rounded result.
template <class T> T wide_value(int rank, std::size_t i, std::uint64_t salt) {
  const std::uint64_t h = mix(salt ^ (static_cast<std::uint64_t>(rank) << 40) ^ i);
  const double mantissa = 1.0 + static_cast<double>(h & 0xFFFFFFu) / 16777216.0;
  const int exponent = static_cast<int>((h >> 24) % 41) - 20;
  double v = mantissa;
  for (int e = 0; e < exponent; ++e)
    v *= 2.0;
  for (int e = 0; e > exponent; --e)
    v *= 0.5;
  if ((h >> 32) & 1u)
    v = -v;
  return static_cast<T>(v);
}

/// @brief An integer-valued input whose sum over any number of ranks is exact in float.
template <class T> T exact_value(int rank, std::size_t i) {
  return static_cast<T>(static_cast<int>((i * 37u + static_cast<std::size_t>(rank) * 11u) % 997u) -
                        400);
}

/// @brief `x_0 + x_1 + ... + x_{n-1}` left to right, the reference for ordered sums.
template <class T> T rank_ordered_sum(int size, std::size_t i, std::uint64_t salt) {
  T acc = wide_value<T>(0, i, salt);
  for (int r = 1; r < size; ++r)
    acc += wide_value<T>(r, i, salt);
  return acc;
}

/// @brief Collects failure messages.
struct failures {
  std::vector<std::string> list;
  void check(bool ok, const std::string& what) {
    if (!ok)
      list.push_back(what);
  }
};

template <class T> bool same_bits(std::span<const T> a, std::span<const T> b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size_bytes()) == 0);
}

/// @brief all_gather with blocks of each size in `blocks`.
template <communicator C>
void check_all_gather(C& comm, failures& f, const std::vector<std::size_t>& blocks) {
  const int n = comm.size();
  const int me = comm.rank();
  for (std::size_t block : blocks) {
    std::vector<std::byte> mine(block);
    for (std::size_t i = 0; i < block; ++i)
      mine[i] = pattern(me, -1, i, block);
    std::vector<std::byte> all(block * static_cast<std::size_t>(n), std::byte{0xEE});
    comm.all_gather(std::span<const std::byte>(mine), std::span<std::byte>(all));
    bool ok = true;
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < block; ++i)
        ok = ok && all[static_cast<std::size_t>(r) * block + i] == pattern(r, -1, i, block);
    f.check(ok, "all_gather block " + std::to_string(block));
  }
}

/// @brief all_to_all with blocks of each size in `blocks`.
template <communicator C>
void check_all_to_all(C& comm, failures& f, const std::vector<std::size_t>& blocks) {
  const int n = comm.size();
  const int me = comm.rank();
  for (std::size_t block : blocks) {
    const std::size_t total = block * static_cast<std::size_t>(n);
    std::vector<std::byte> send(total);
    std::vector<std::byte> recv(total, std::byte{0xEE});
    for (int p = 0; p < n; ++p)
      for (std::size_t i = 0; i < block; ++i)
        send[static_cast<std::size_t>(p) * block + i] = pattern(me, p, i, block + 77);
    comm.all_to_all(std::span<const std::byte>(send), std::span<std::byte>(recv));
    bool ok = true;
    for (int p = 0; p < n; ++p)
      for (std::size_t i = 0; i < block; ++i)
        ok = ok && recv[static_cast<std::size_t>(p) * block + i] == pattern(p, me, i, block + 77);
    f.check(ok, "all_to_all block " + std::to_string(block));
  }
}

/// @brief Ring send/recv (rank r -> r+1) for each message size, ordered so that blocking
/// (rendezvous) sends cannot deadlock: rank 0 sends first, every other rank receives first.
/// Then per-tag matching and FIFO order: tags 7, 3, 7 sent, received as 3, 7, 7 (small messages,
/// which every MPI sends eagerly).
template <communicator C>
void check_send_recv(C& comm, failures& f, const std::vector<std::size_t>& sizes) {
  const int n = comm.size();
  const int me = comm.rank();
  const int next = (me + 1) % n;
  const int prev = (me + n - 1) % n;
  for (std::size_t len : sizes) {
    std::vector<std::byte> out(len);
    for (std::size_t i = 0; i < len; ++i)
      out[i] = pattern(me, next, i, len + 5);
    std::vector<std::byte> in(len, std::byte{0xEE});
    if (me == 0) {
      comm.send(std::span<const std::byte>(out), next, 1);
      comm.recv(std::span<std::byte>(in), prev, 1);
    } else {
      comm.recv(std::span<std::byte>(in), prev, 1);
      comm.send(std::span<const std::byte>(out), next, 1);
    }
    bool ok = true;
    for (std::size_t i = 0; i < len; ++i)
      ok = ok && in[i] == pattern(prev, me, i, len + 5);
    f.check(ok, "send/recv ring, " + std::to_string(len) + " bytes");
  }

  const auto msg = [&](int src, int k) {
    std::vector<std::byte> m(8);
    for (std::size_t i = 0; i < m.size(); ++i)
      m[i] = pattern(src, k, i, 4242);
    return m;
  };
  const auto send_three = [&] {
    const auto a = msg(me, 0), b = msg(me, 1), c = msg(me, 2);
    comm.send(std::span<const std::byte>(a), next, 7);
    comm.send(std::span<const std::byte>(b), next, 3);
    comm.send(std::span<const std::byte>(c), next, 7);
  };
  std::vector<std::byte> r1(8), r2(8), r3(8);
  const auto recv_three = [&] {
    comm.recv(std::span<std::byte>(r1), prev, 3);
    comm.recv(std::span<std::byte>(r2), prev, 7);
    comm.recv(std::span<std::byte>(r3), prev, 7);
  };
  if (me == 0) {
    send_three();
    recv_three();
  } else {
    recv_three();
    send_three();
  }
  f.check(r1 == msg(prev, 1) && r2 == msg(prev, 0) && r3 == msg(prev, 2),
          "send/recv tag matching and FIFO order");
}

/// @brief all_reduce_sum on integer-valued data, whose sum is exact whatever the order.
template <class T, communicator C>
void check_all_reduce_exact(C& comm, failures& f, const std::vector<std::size_t>& counts) {
  const int n = comm.size();
  for (std::size_t count : counts) {
    std::vector<T> v(count);
    for (std::size_t i = 0; i < count; ++i)
      v[i] = exact_value<T>(comm.rank(), i);
    comm.all_reduce_sum(std::span<T>(v));
    bool ok = true;
    for (std::size_t i = 0; i < count; ++i) {
      T expected = 0;
      for (int r = 0; r < n; ++r)
        expected += exact_value<T>(r, i);
      ok = ok && v[i] == expected;
    }
    f.check(ok, std::string("all_reduce_sum exact, ") + (sizeof(T) == 4 ? "float" : "double") +
                    ", " + std::to_string(count) + " elements");
  }
}

/// @brief `all_reduce_sum_ordered` (the generic free function, and the member when `C` has one)
/// matches the rank-ordered sum bit for bit, for each count and chunk size; also signed zeros.
template <class T, communicator C>
void check_all_reduce_ordered(C& comm, failures& f, const std::vector<std::size_t>& counts,
                              const std::vector<std::size_t>& chunks) {
  const int n = comm.size();
  const int me = comm.rank();
  for (std::size_t count : counts) {
    std::vector<T> expected(count);
    for (std::size_t i = 0; i < count; ++i)
      expected[i] = rank_ordered_sum<T>(n, i, count);
    for (std::size_t chunk : chunks) {
      std::vector<T> v(count);
      for (std::size_t i = 0; i < count; ++i)
        v[i] = wide_value<T>(me, i, count);
      commpress::all_reduce_sum_ordered(comm, std::span<T>(v), chunk);
      f.check(same_bits<T>(v, expected), "all_reduce_sum_ordered (free), " + std::to_string(count) +
                                             " elements, chunk " + std::to_string(chunk));
    }
    if constexpr (requires { comm.all_reduce_sum_ordered(std::span<T>()); }) {
      std::vector<T> v(count);
      for (std::size_t i = 0; i < count; ++i)
        v[i] = wide_value<T>(me, i, count);
      comm.all_reduce_sum_ordered(std::span<T>(v));
      f.check(same_bits<T>(v, expected),
              "all_reduce_sum_ordered (member), " + std::to_string(count) + " elements");
    }
  }
  // -0 + -0 + ... stays -0 only if the sum starts from rank 0's value, not from +0.
  std::vector<T> zeros(3, static_cast<T>(-0.0));
  commpress::all_reduce_sum_ordered(comm, std::span<T>(zeros), 2);
  const std::vector<T> negative_zeros(3, static_cast<T>(-0.0));
  f.check(same_bits<T>(zeros, negative_zeros), "all_reduce_sum_ordered keeps -0");
}

/// @brief Every operation of the `communicator` concept, on host buffers.
template <communicator_f64 C> std::vector<std::string> conformance(C& comm) {
  failures f;
  f.check(comm.size() >= 1 && comm.rank() >= 0 && comm.rank() < comm.size(), "rank/size");
  const std::vector<std::size_t> blocks = {0, 1, 3, 8, 29, 1000};
  check_all_gather(comm, f, blocks);
  comm.barrier();
  check_all_to_all(comm, f, blocks);
  comm.barrier();
  // A rank that sends to itself with a blocking MPI_Send needs eager (small) messages.
  check_send_recv(comm, f,
                  comm.size() == 1 ? std::vector<std::size_t>{0, 1, 17, 64}
                                   : std::vector<std::size_t>{0, 1, 17, 64, 100000});
  comm.barrier();
  check_all_reduce_exact<float>(comm, f, {0, 1, 7, 100});
  check_all_reduce_exact<double>(comm, f, {0, 1, 7, 100});
  check_all_reduce_ordered<float>(comm, f, {0, 1, 7, 100}, {1, 3, std::size_t{1} << 20});
  check_all_reduce_ordered<double>(comm, f, {0, 1, 7, 100}, {1, 3, std::size_t{1} << 20});
  comm.barrier();
  return f.list;
}

} // namespace commpress::test
