// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// `nccl_communicator`: the `communicator` concept over an existing NCCL communicator and CUDA
/// stream, on device buffers. Compiles as CUDA (nvcc) or as plain C++; link `commpress::nccl`.

#include <commpress/comm/communicator.hpp>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <span>
#include <string>
#include <utility>

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 7, 0)
#error "commpress: nccl.hpp needs NCCL >= 2.7 (ncclSend/ncclRecv)"
#endif

namespace commpress {

namespace detail {

/// @brief Throws `commpress: nccl: <what> failed: <error> (<last NCCL error>)` on a failure.
///
/// `ncclInProgress` (non-blocking communicators) is waited out by polling
/// `ncclCommGetAsyncError`, so every call returns with its operation enqueued on the stream.
inline void nccl_check(ncclResult_t rc, ncclComm_t comm, const char* what) {
  if (rc == ncclInProgress && comm != nullptr) {
    do {
      if (ncclCommGetAsyncError(comm, &rc) != ncclSuccess)
        break;
    } while (rc == ncclInProgress);
  }
  if (rc == ncclSuccess)
    return;
  std::string msg = std::string(what) + " failed: " + ncclGetErrorString(rc);
  const char* last = comm != nullptr ? ncclGetLastError(comm) : nullptr;
  if (last != nullptr && *last != '\0')
    msg += std::string(" (") + last + ")";
  comm_fail("nccl", msg);
}

/// @brief Throws `commpress: nccl: <what> failed: <CUDA error>` unless `rc == cudaSuccess`.
inline void cuda_check(cudaError_t rc, const char* what) {
  if (rc == cudaSuccess)
    return;
  comm_fail("nccl",
            std::string(what) + " failed: " + cudaGetErrorName(rc) + ": " + cudaGetErrorString(rc));
}

} // namespace detail

/// @brief The `communicator` concept over an NCCL communicator and a CUDA stream, neither owned.
///
/// - All spans refer to **device memory** on the communicator's GPU (never dereference them on
///   the host); `device_buffers` is true, see `uses_device_buffers_v`.
/// - Every operation except `barrier()` and `synchronize()` is asynchronous: it is enqueued on
///   `stream()` and the host returns at once. Buffers must stay valid, and must not be reused
///   by other streams, until the stream reaches that point. Argument checks happen on the host.
/// - Sizes are `size_t` in NCCL, so there is no `INT_MAX` limit. Zero-size operations are
///   skipped on the host (all ranks pass equal sizes, so all skip).
/// - NCCL has no tags: `tag` is validated (`>= 0`) and otherwise ignored; messages between one
///   pair are matched in issue order. Each `send`/`recv` outside a group is a blocking
///   rendezvous on the GPU, so a pair that sends to each other first deadlocks: order them
///   (e.g. even ranks send first) or issue both inside `grouped()`.
/// - `all_reduce_sum` is ncclAllReduce(ncclSum): NCCL's algorithms (ring, tree, NVLS) finish by
///   broadcasting each reduced chunk, so in practice every rank gets the same bits, but the
///   addition order depends on algorithm, protocol and topology; pin `NCCL_ALGO`/`NCCL_PROTO`
///   for run-to-run reproducibility. No rank-ordered variant is provided (it needs a device
///   kernel).
/// - Do not call `barrier()` inside `grouped()` or an enclosing ncclGroupStart/ncclGroupEnd.
/// @note The operations keep the concept's names although they only enqueue (the house style
/// would call them `*_async`), so that generic code over `communicator` runs unchanged.
/// @throws std::runtime_error ("commpress: nccl: ...") on argument errors and on failed NCCL or
/// CUDA calls; failures on the stream surface later (synchronize(), barrier()).
class nccl_communicator {
public:
  /// @brief Operations take device pointers.
  static constexpr bool device_buffers = true;

  /// @brief Wraps `comm` and `stream`; both must outlive this object, and `stream` must belong
  /// to the communicator's device.
  nccl_communicator(ncclComm_t comm, cudaStream_t stream) : comm_(comm), stream_(stream) {
    if (comm == nullptr)
      detail::comm_fail("nccl", "null ncclComm_t");
    detail::nccl_check(ncclCommUserRank(comm, &rank_), comm, "ncclCommUserRank");
    detail::nccl_check(ncclCommCount(comm, &size_), comm, "ncclCommCount");
  }

  /// @brief Rank of this process in the communicator.
  [[nodiscard]] int rank() const noexcept { return rank_; }
  /// @brief Number of ranks in the communicator.
  [[nodiscard]] int size() const noexcept { return size_; }
  /// @brief The wrapped NCCL communicator.
  [[nodiscard]] ncclComm_t native_handle() const noexcept { return comm_; }
  /// @brief The stream every operation is enqueued on.
  [[nodiscard]] cudaStream_t stream() const noexcept { return stream_; }
  /// @brief The CUDA device of the communicator.
  [[nodiscard]] int device() const {
    int dev = -1;
    detail::nccl_check(ncclCommCuDevice(comm_, &dev), comm_, "ncclCommCuDevice");
    return dev;
  }

  /// @brief ncclAllGather of one `mine.size()`-byte block per rank into `all`
  /// (`all.size() == size() * mine.size()`; in place allowed when `mine` is block `rank()`).
  void all_gather(std::span<const std::byte> mine, std::span<std::byte> all) {
    if (all.size() != mine.size() * static_cast<std::size_t>(size_))
      detail::comm_fail("nccl", "all_gather: all.size() != size() * mine.size()");
    if (mine.empty())
      return;
    detail::nccl_check(
        ncclAllGather(mine.data(), all.data(), mine.size(), ncclUint8, comm_, stream_), comm_,
        "ncclAllGather");
  }

  /// @brief All-to-all of `send.size() / size()` bytes per peer: ncclSend/ncclRecv to every
  /// peer (itself included) inside one ncclGroupStart/ncclGroupEnd. The buffers must not overlap.
  void all_to_all(std::span<const std::byte> send, std::span<std::byte> recv) {
    if (send.size() != recv.size())
      detail::comm_fail("nccl", "all_to_all: send.size() != recv.size()");
    if (send.size() % static_cast<std::size_t>(size_) != 0)
      detail::comm_fail("nccl", "all_to_all: send.size() is not a multiple of size()");
    const std::size_t block = send.size() / static_cast<std::size_t>(size_);
    if (block == 0)
      return;
    grouped([&] {
      for (int p = 0; p < size_; ++p) {
        const std::size_t off = static_cast<std::size_t>(p) * block;
        detail::nccl_check(ncclSend(send.data() + off, block, ncclUint8, p, comm_, stream_), comm_,
                           "ncclSend");
        detail::nccl_check(ncclRecv(recv.data() + off, block, ncclUint8, p, comm_, stream_), comm_,
                           "ncclRecv");
      }
    });
  }

  /// @brief ncclSend of `buf` to `peer`; `tag >= 0` is ignored (see the class notes).
  void send(std::span<const std::byte> buf, int peer, int tag) {
    check_peer_tag(peer, tag, "send");
    if (buf.empty())
      return;
    detail::nccl_check(ncclSend(buf.data(), buf.size(), ncclUint8, peer, comm_, stream_), comm_,
                       "ncclSend");
  }

  /// @brief ncclRecv of exactly `buf.size()` bytes from `peer`; `tag >= 0` is ignored.
  /// The sender must send the same size (NCCL does not report a mismatch).
  void recv(std::span<std::byte> buf, int peer, int tag) {
    check_peer_tag(peer, tag, "recv");
    if (buf.empty())
      return;
    detail::nccl_check(ncclRecv(buf.data(), buf.size(), ncclUint8, peer, comm_, stream_), comm_,
                       "ncclRecv");
  }

  /// @brief In-place ncclAllReduce(ncclSum) of floats on the stream.
  void all_reduce_sum(std::span<float> inout) { reduce(inout.data(), inout.size(), ncclFloat32); }
  /// @brief In-place ncclAllReduce(ncclSum) of doubles on the stream.
  void all_reduce_sum(std::span<double> inout) { reduce(inout.data(), inout.size(), ncclFloat64); }

  /// @brief Host-blocking barrier: a one-element ncclAllReduce on the stream (stream-ordered
  /// 4-byte scratch from cudaMallocAsync), then cudaStreamSynchronize. On return, every rank
  /// has reached the barrier and all work previously enqueued on `stream()` has completed.
  void barrier() {
    void* scratch = nullptr;
    detail::cuda_check(cudaMallocAsync(&scratch, sizeof(float), stream_), "cudaMallocAsync");
    try {
      detail::cuda_check(cudaMemsetAsync(scratch, 0, sizeof(float), stream_), "cudaMemsetAsync");
      // nccl_check waits out ncclInProgress, so the reduction is enqueued before the free.
      detail::nccl_check(ncclAllReduce(scratch, scratch, 1, ncclFloat32, ncclSum, comm_, stream_),
                         comm_, "barrier: ncclAllReduce");
    } catch (...) {
      (void)cudaFreeAsync(scratch, stream_);
      throw;
    }
    detail::cuda_check(cudaFreeAsync(scratch, stream_), "cudaFreeAsync");
    synchronize();
  }

  /// @brief Blocks the host until all work enqueued on `stream()` has completed.
  void synchronize() {
    detail::cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  /// @brief Runs `fn()` between ncclGroupStart and ncclGroupEnd, so the NCCL calls it makes
  /// (through this or other communicators) are fused and cannot deadlock on each other, e.g.
  /// a send and a recv exchanged between two ranks. ncclGroupEnd is called even if `fn` throws.
  template <class F> void grouped(F&& fn) {
    detail::nccl_check(ncclGroupStart(), nullptr, "ncclGroupStart");
    try {
      std::forward<F>(fn)();
    } catch (...) {
      (void)ncclGroupEnd();
      throw;
    }
    detail::nccl_check(ncclGroupEnd(), comm_, "ncclGroupEnd");
  }

private:
  void reduce(void* data, std::size_t n, ncclDataType_t type) {
    if (n == 0)
      return;
    detail::nccl_check(ncclAllReduce(data, data, n, type, ncclSum, comm_, stream_), comm_,
                       "ncclAllReduce");
  }

  void check_peer_tag(int peer, int tag, const char* what) const {
    if (peer < 0 || peer >= size_)
      detail::comm_fail("nccl",
                        std::string(what) + ": peer " + std::to_string(peer) + " out of range");
    if (tag < 0)
      detail::comm_fail("nccl", std::string(what) + ": tag must be >= 0");
  }

  ncclComm_t comm_;
  cudaStream_t stream_;
  int rank_ = 0;
  int size_ = 1;
};

static_assert(communicator<nccl_communicator>);
static_assert(communicator_f64<nccl_communicator>);
static_assert(uses_device_buffers_v<nccl_communicator>);

} // namespace commpress
