// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// nccl_communicator under nvcc. One process, one thread per visible GPU, one NCCL rank per
// thread (ncclCommInitRank with a shared ncclUniqueId). Skips at run time without a GPU.
// doctest's main is in nccl_host_test.cpp (a host TU; docs/cuda.md, "Toolchain pitfalls").

#include <doctest/doctest.h>

#include "conformance.hpp"

#include <commpress/comm/nccl.hpp>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

using commpress::nccl_communicator;

static_assert(commpress::communicator<nccl_communicator>);
static_assert(commpress::communicator_f64<nccl_communicator>);
static_assert(commpress::uses_device_buffers_v<nccl_communicator>);

namespace {

int visible_gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError(); // clear the sticky "no device"/"no driver" error
    return 0;
  }
  return n;
}

/// A device buffer of `T` with host staging helpers (synchronous on `stream`).
template <class T> class device_vector {
public:
  device_vector(std::size_t n, cudaStream_t stream) : n_(n), stream_(stream) {
    if (n > 0)
      commpress::detail::cuda_check(cudaMalloc(&ptr_, n * sizeof(T)), "cudaMalloc");
  }
  device_vector(const device_vector&) = delete;
  device_vector& operator=(const device_vector&) = delete;
  ~device_vector() {
    if (ptr_ != nullptr)
      (void)cudaFree(ptr_);
  }
  std::span<T> span() { return {static_cast<T*>(ptr_), n_}; }
  std::span<std::byte> bytes() { return std::as_writable_bytes(span()); }
  void upload(const std::vector<T>& host) {
    if (n_ == 0)
      return;
    commpress::detail::cuda_check(
        cudaMemcpyAsync(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice, stream_),
        "cudaMemcpyAsync");
    commpress::detail::cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  std::vector<T> download() {
    std::vector<T> host(n_);
    if (n_ == 0)
      return host;
    commpress::detail::cuda_check(
        cudaMemcpyAsync(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost, stream_),
        "cudaMemcpyAsync");
    commpress::detail::cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    return host;
  }

private:
  void* ptr_ = nullptr;
  std::size_t n_;
  cudaStream_t stream_;
};

struct rank_result {
  std::vector<std::string> failures;
  std::vector<float> wide_sum; ///< ncclAllReduce of order-sensitive data, compared across ranks
};

rank_result device_checks(nccl_communicator& c) {
  namespace t = commpress::test;
  rank_result out;
  const auto check = [&](bool ok, const std::string& what) {
    if (!ok)
      out.failures.push_back(what);
  };
  const int n = c.size();
  const int me = c.rank();
  const auto un = static_cast<std::size_t>(n);
  cudaStream_t s = c.stream();

  // all_gather (block 1000) and the empty no-op.
  {
    constexpr std::size_t block = 1000;
    std::vector<std::byte> mine(block);
    for (std::size_t i = 0; i < block; ++i)
      mine[i] = t::pattern(me, -1, i, block);
    device_vector<std::byte> d_mine(block, s), d_all(block * un, s);
    d_mine.upload(mine);
    c.all_gather(d_mine.bytes(), d_all.bytes());
    const auto all = d_all.download();
    bool ok = true;
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < block; ++i)
        ok = ok && all[static_cast<std::size_t>(r) * block + i] == t::pattern(r, -1, i, block);
    check(ok, "all_gather");
    c.all_gather({}, {});
  }
  // all_to_all (block 777).
  {
    constexpr std::size_t block = 777;
    std::vector<std::byte> send(block * un);
    for (int p = 0; p < n; ++p)
      for (std::size_t i = 0; i < block; ++i)
        send[static_cast<std::size_t>(p) * block + i] = t::pattern(me, p, i, 5);
    device_vector<std::byte> d_send(block * un, s), d_recv(block * un, s);
    d_send.upload(send);
    c.all_to_all(d_send.bytes(), d_recv.bytes());
    const auto recv = d_recv.download();
    bool ok = true;
    for (int p = 0; p < n; ++p)
      for (std::size_t i = 0; i < block; ++i)
        ok = ok && recv[static_cast<std::size_t>(p) * block + i] == t::pattern(p, me, i, 5);
    check(ok, "all_to_all");
  }
  // send/recv around the ring: ordered (rank 0 sends first), then fused in grouped().
  {
    constexpr std::size_t len = 4096;
    const int next = (me + 1) % n;
    const int prev = (me + n - 1) % n;
    std::vector<std::byte> msg(len);
    for (std::size_t i = 0; i < len; ++i)
      msg[i] = t::pattern(me, next, i, 9);
    device_vector<std::byte> d_out(len, s), d_in(len, s);
    d_out.upload(msg);
    for (int round = 0; round < 2; ++round) {
      if (round == 0 && n > 1) {
        if (me == 0) {
          c.send(d_out.bytes(), next, 0);
          c.recv(d_in.bytes(), prev, 0);
        } else {
          c.recv(d_in.bytes(), prev, 0);
          c.send(d_out.bytes(), next, 0);
        }
      } else {
        c.grouped([&] {
          c.send(d_out.bytes(), next, 0);
          c.recv(d_in.bytes(), prev, 0);
        });
      }
      const auto in = d_in.download();
      bool ok = true;
      for (std::size_t i = 0; i < len; ++i)
        ok = ok && in[i] == t::pattern(prev, me, i, 9);
      check(ok, "send/recv round " + std::to_string(round));
    }
  }
  // all_reduce_sum: exact data (float, double), then order-sensitive data for the cross-rank
  // comparison done by the caller.
  {
    constexpr std::size_t count = 10007;
    std::vector<float> f(count);
    std::vector<double> d(count);
    for (std::size_t i = 0; i < count; ++i) {
      f[i] = t::exact_value<float>(me, i);
      d[i] = t::exact_value<double>(me, i);
    }
    device_vector<float> d_f(count, s);
    device_vector<double> d_d(count, s);
    d_f.upload(f);
    d_d.upload(d);
    c.all_reduce_sum(d_f.span());
    c.all_reduce_sum(d_d.span());
    f = d_f.download();
    d = d_d.download();
    bool ok = true;
    for (std::size_t i = 0; i < count; ++i) {
      float ef = 0;
      double ed = 0;
      for (int r = 0; r < n; ++r) {
        ef += t::exact_value<float>(r, i);
        ed += t::exact_value<double>(r, i);
      }
      ok = ok && f[i] == ef && d[i] == ed;
    }
    check(ok, "all_reduce_sum exact");
    for (std::size_t i = 0; i < count; ++i)
      f[i] = t::wide_value<float>(me, i, 3);
    d_f.upload(f);
    c.all_reduce_sum(d_f.span());
    out.wide_sum = d_f.download();
  }
  c.barrier();
  c.barrier();
  c.synchronize();
  return out;
}

} // namespace

TEST_SUITE_BEGIN("comm");

TEST_CASE("nccl_communicator: every operation, one rank per visible GPU") {
  const int gpus = visible_gpus();
  if (gpus == 0) {
    MESSAGE("no CUDA device: NCCL device checks skipped");
    return;
  }
  const int n = std::min(gpus, 8);
  ncclUniqueId id{};
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  std::vector<rank_result> results(static_cast<std::size_t>(n));
  std::vector<std::string> setup_errors(static_cast<std::size_t>(n));
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        const auto ur = static_cast<std::size_t>(r);
        cudaStream_t stream = nullptr;
        ncclComm_t comm = nullptr;
        try {
          commpress::detail::cuda_check(cudaSetDevice(r), "cudaSetDevice");
          commpress::detail::cuda_check(cudaStreamCreate(&stream), "cudaStreamCreate");
          commpress::detail::nccl_check(ncclCommInitRank(&comm, n, id, r), nullptr,
                                        "ncclCommInitRank");
          nccl_communicator c(comm, stream);
          results[ur] = device_checks(c);
          if (c.rank() != r || c.size() != n || c.device() != r)
            results[ur].failures.push_back("rank/size/device");
        } catch (const std::exception& e) {
          setup_errors[ur] = e.what();
        }
        if (comm != nullptr)
          (void)ncclCommDestroy(comm);
        if (stream != nullptr)
          (void)cudaStreamDestroy(stream);
      });
    }
    for (auto& th : threads)
      th.join();
  }
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    const auto ur = static_cast<std::size_t>(r);
    CHECK(setup_errors[ur] == "");
    for (const auto& f : results[ur].failures)
      FAIL_CHECK(f);
    // ncclAllReduce gives the same bits on every rank.
    CHECK(commpress::test::same_bits<float>(results[ur].wide_sum, results[0].wide_sum));
  }
}

TEST_CASE("nccl_communicator: compiles under nvcc and links NCCL") {
  int version = 0;
  CHECK(ncclGetVersion(&version) == ncclSuccess);
  CHECK(version >= NCCL_VERSION(2, 7, 0));
  MESSAGE("NCCL " << version << ", visible GPUs: " << visible_gpus());
}

TEST_SUITE_END();
