// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// An in-process `communicator`: N simulated workers run as N `std::thread`s that share one
/// `loopback_world`. Used by tests (and for single-process experiments) before a real
/// transport such as MPI or NCCL is wired in.

#include <commpress/comm/communicator.hpp>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace commpress {

class loopback_communicator;

/// @brief Thrown in the other workers of a `loopback_world` once one worker failed, timed out or
/// `abort()` was called, so that no worker stays blocked in a collective or a `recv`.
class loopback_aborted : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// @brief Shared state of N simulated workers: a reusable barrier, one posting slot per rank for
/// collectives, and a FIFO queue of messages per (source, destination, tag).
///
/// Collectives follow "post, barrier, copy, barrier": each rank posts its input buffer, waits for
/// everyone, reads the other ranks' inputs directly, and waits again so that no input buffer is
/// released or modified while a peer still reads it. Argument errors are detected collectively
/// (every rank sees every rank's arguments), so all ranks throw the same error instead of leaving
/// peers blocked.
///
/// Thread safety: each `loopback_communicator` is used by one thread at a time; different
/// communicators of one world are used concurrently.
/// @throws std::runtime_error ("commpress: loopback: ...") from operations on argument errors,
/// collective mismatches and timeouts; `loopback_aborted` once the world is aborted.
class loopback_world {
public:
  /// @brief A world of `size >= 1` workers.
  /// @param timeout how long a blocked collective or `recv` waits before it aborts the world
  ///        with an error; zero (the default) waits forever.
  explicit loopback_world(int size,
                          std::chrono::milliseconds timeout = std::chrono::milliseconds::zero())
      : size_(size), timeout_(timeout) {
    if (size < 1)
      detail::comm_fail("loopback", "world size must be >= 1");
    slots_.resize(static_cast<std::size_t>(size));
  }

  loopback_world(const loopback_world&) = delete;
  loopback_world& operator=(const loopback_world&) = delete;

  /// @brief Number of workers.
  [[nodiscard]] int size() const noexcept { return size_; }

  /// @brief The communicator of worker `rank`, for callers that start their own threads.
  [[nodiscard]] loopback_communicator communicator(int rank);

  /// @brief Runs `fn(loopback_communicator&)` once per rank, each on its own thread, and joins.
  ///
  /// Resets the world first (no other thread may be using it). If a worker throws, the world is
  /// aborted so the others stop waiting, and the first exception that is not a
  /// `loopback_aborted` is rethrown here. `fn` is shared by all threads and must tolerate
  /// concurrent calls.
  template <class F>
  requires std::invocable<F&, loopback_communicator&>
  void run(F&& fn);

  /// @brief Wakes every blocked worker; they and all later operations throw `loopback_aborted`
  /// until `reset()`.
  void abort() noexcept {
    const std::lock_guard lock(mutex_);
    aborted_ = true;
    cv_.notify_all();
  }

  /// @brief Clears the abort flag, the barrier and undelivered messages. No worker may be inside
  /// an operation.
  void reset() {
    const std::lock_guard lock(mutex_);
    aborted_ = false;
    arrived_ = 0;
    ++generation_;
    queues_.clear();
  }

  /// @brief Messages sent but not yet received (over all queues).
  [[nodiscard]] std::size_t pending_messages() const {
    const std::lock_guard lock(mutex_);
    std::size_t n = 0;
    for (const auto& [key, queue] : queues_)
      n += queue.size();
    return n;
  }

private:
  friend class loopback_communicator;

  enum class op_kind : unsigned char { all_gather, all_to_all, sum_f32, sum_f64, barrier };

  static constexpr const char* op_name(op_kind k) noexcept {
    switch (k) {
    case op_kind::all_gather:
      return "all_gather";
    case op_kind::all_to_all:
      return "all_to_all";
    case op_kind::sum_f32:
      return "all_reduce_sum(float)";
    case op_kind::sum_f64:
      return "all_reduce_sum(double)";
    case op_kind::barrier:
      return "barrier";
    }
    return "?";
  }

  /// What one rank posted for the current collective.
  struct slot {
    op_kind kind = op_kind::barrier;
    const std::byte* in = nullptr;
    std::size_t bytes = 0;             ///< size of `in`
    const char* local_error = nullptr; ///< a precondition this rank's own arguments violate
  };

  using queue_key = std::tuple<int, int, int>; // source, destination, tag

  /// Blocks until `ready()` holds; throws if the world aborts or the timeout expires.
  template <class Pred>
  void wait(std::unique_lock<std::mutex>& lock, const char* what, Pred ready) {
    const auto done = [&] { return aborted_ || ready(); };
    if (timeout_.count() == 0) {
      cv_.wait(lock, done);
    } else if (!cv_.wait_for(lock, timeout_, done)) {
      aborted_ = true;
      cv_.notify_all();
      detail::comm_fail("loopback", std::string(what) + ": timed out (deadlock or missing peer)");
    }
    if (!ready())
      throw loopback_aborted("commpress: loopback: world aborted");
  }

  /// Reusable generation barrier; caller holds `mutex_`.
  void arrive_and_wait(std::unique_lock<std::mutex>& lock, const char* what) {
    if (aborted_)
      throw loopback_aborted("commpress: loopback: world aborted");
    const std::uint64_t gen = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    wait(lock, what, [&] { return generation_ != gen; });
  }

  /// Runs one collective for `rank`: post `mine`, barrier, validate, `body(view)`, barrier,
  /// then `after()`. `body` reads peers' posted buffers; `after` may write buffers that peers
  /// read in `body`.
  template <class Body, class After>
  void collective(int rank, slot mine, Body&& body, After&& after) {
    const char* what = op_name(mine.kind);
    std::vector<slot> view;
    std::string error;
    {
      std::unique_lock lock(mutex_);
      slots_[static_cast<std::size_t>(rank)] = mine;
      arrive_and_wait(lock, what);
      view = slots_;
    }
    for (int r = 0; r < size_ && error.empty(); ++r) {
      const slot& s = view[static_cast<std::size_t>(r)];
      if (s.kind != mine.kind) {
        error = std::string("collective mismatch: rank ") + std::to_string(rank) + " called " +
                what + ", rank " + std::to_string(r) + " called " + op_name(s.kind);
      } else if (s.local_error != nullptr) {
        error = std::string(what) + ": rank " + std::to_string(r) + ": " + s.local_error;
      } else if (s.bytes != view[0].bytes) {
        error = std::string(what) +
                ": ranks pass different sizes (rank 0: " + std::to_string(view[0].bytes) +
                " bytes, rank " + std::to_string(r) + ": " + std::to_string(s.bytes) + " bytes)";
      }
    }
    std::exception_ptr failure;
    if (error.empty()) {
      try {
        body(view);
      } catch (...) {
        failure = std::current_exception();
      }
    }
    {
      std::unique_lock lock(mutex_);
      arrive_and_wait(lock, what);
    }
    if (!error.empty())
      detail::comm_fail("loopback", error);
    if (failure)
      std::rethrow_exception(failure);
    after();
  }

  void send(int src, std::span<const std::byte> buf, int peer, int tag) {
    if (peer < 0 || peer >= size_)
      detail::comm_fail("loopback", "send: peer out of range");
    if (tag < 0)
      detail::comm_fail("loopback", "send: tag must be >= 0");
    std::vector<std::byte> message(buf.begin(), buf.end());
    const std::lock_guard lock(mutex_);
    if (aborted_)
      throw loopback_aborted("commpress: loopback: world aborted");
    queues_[queue_key{src, peer, tag}].push_back(std::move(message));
    cv_.notify_all();
  }

  void recv(int dst, std::span<std::byte> buf, int peer, int tag) {
    if (peer < 0 || peer >= size_)
      detail::comm_fail("loopback", "recv: peer out of range");
    if (tag < 0)
      detail::comm_fail("loopback", "recv: tag must be >= 0");
    std::vector<std::byte> message;
    {
      std::unique_lock lock(mutex_);
      auto& queue = queues_[queue_key{peer, dst, tag}];
      wait(lock, "recv", [&] { return !queue.empty(); });
      message = std::move(queue.front());
      queue.pop_front();
    }
    if (message.size() != buf.size()) {
      detail::comm_fail("loopback", "recv: message of " + std::to_string(message.size()) +
                                        " bytes from rank " + std::to_string(peer) +
                                        " does not match the buffer of " +
                                        std::to_string(buf.size()) + " bytes");
    }
    if (!message.empty())
      std::memcpy(buf.data(), message.data(), message.size());
  }

  int size_;
  std::chrono::milliseconds timeout_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  bool aborted_ = false;
  std::vector<slot> slots_;
  std::map<queue_key, std::deque<std::vector<std::byte>>> queues_;
};

/// @brief The `communicator` of one worker of a `loopback_world` (a non-owning handle).
///
/// Send is eager: it copies the message into the world's queue and returns at once, so
/// send-before-recv on both sides of a pair never deadlocks (unlike a rendezvous MPI_Send).
/// `all_reduce_sum` adds in fixed rank order, `x_0 + x_1 + ... + x_{n-1}` left to right, so
/// results are deterministic and bitwise identical on every rank.
class loopback_communicator {
public:
  /// @brief The communicator of `rank` in `world` (which must outlive it).
  loopback_communicator(loopback_world& world, int rank) : world_(&world), rank_(rank) {
    if (rank < 0 || rank >= world.size())
      detail::comm_fail("loopback", "rank out of range");
  }

  /// @brief This worker's rank in `[0, size())`.
  [[nodiscard]] int rank() const noexcept { return rank_; }
  /// @brief Number of workers in the world.
  [[nodiscard]] int size() const noexcept { return world_->size(); }
  /// @brief The shared world.
  [[nodiscard]] loopback_world& world() const noexcept { return *world_; }

  /// @brief Block `r` of `all` receives rank `r`'s `mine`; `all.size() == size() * mine.size()`.
  void all_gather(std::span<const std::byte> mine, std::span<std::byte> all) {
    const std::size_t n = mine.size();
    const bool ok = all.size() == n * static_cast<std::size_t>(size());
    world_->collective(
        rank_,
        {loopback_world::op_kind::all_gather, mine.data(), n,
         ok ? nullptr : "all.size() != size() * mine.size()"},
        [&](const std::vector<loopback_world::slot>& view) {
          if (n == 0)
            return;
          for (std::size_t r = 0; r < view.size(); ++r)
            std::memcpy(all.data() + r * n, view[r].in, n);
        },
        [] {});
  }

  /// @brief Block `p` of `send` goes to rank `p`; block `p` of `recv` comes from rank `p`.
  /// `send.size() == recv.size()`, a multiple of `size()`.
  void all_to_all(std::span<const std::byte> send, std::span<std::byte> recv) {
    const auto p = static_cast<std::size_t>(size());
    const char* local_error = nullptr;
    if (send.size() != recv.size())
      local_error = "send.size() != recv.size()";
    else if (send.size() % p != 0)
      local_error = "send.size() is not a multiple of size()";
    const std::size_t block = send.size() / p;
    const auto me = static_cast<std::size_t>(rank_);
    world_->collective(
        rank_, {loopback_world::op_kind::all_to_all, send.data(), send.size(), local_error},
        [&](const std::vector<loopback_world::slot>& view) {
          if (block == 0)
            return;
          for (std::size_t r = 0; r < p; ++r)
            std::memcpy(recv.data() + r * block, view[r].in + me * block, block);
        },
        [] {});
  }

  /// @brief Queues a copy of `buf` for rank `peer` under `tag >= 0`; never blocks.
  void send(std::span<const std::byte> buf, int peer, int tag) {
    world_->send(rank_, buf, peer, tag);
  }

  /// @brief Receives the oldest message from `peer` under `tag`; it must be `buf.size()` bytes.
  void recv(std::span<std::byte> buf, int peer, int tag) { world_->recv(rank_, buf, peer, tag); }

  /// @brief In-place element-wise sum over ranks, added in rank order (bitwise reproducible).
  void all_reduce_sum(std::span<float> inout) { reduce(inout, loopback_world::op_kind::sum_f32); }
  /// @brief In-place element-wise sum over ranks, added in rank order (bitwise reproducible).
  void all_reduce_sum(std::span<double> inout) { reduce(inout, loopback_world::op_kind::sum_f64); }

  /// @brief Same as `all_reduce_sum`, which is already rank ordered here; provided so code
  /// written against `mpi_communicator::all_reduce_sum_ordered` runs on the loopback too.
  void all_reduce_sum_ordered(std::span<float> inout) { all_reduce_sum(inout); }
  /// @brief Same as `all_reduce_sum` (already rank ordered).
  void all_reduce_sum_ordered(std::span<double> inout) { all_reduce_sum(inout); }

  /// @brief Returns once every worker has entered the barrier.
  void barrier() {
    world_->collective(
        rank_, {loopback_world::op_kind::barrier, nullptr, 0, nullptr},
        [](const std::vector<loopback_world::slot>&) {}, [] {});
  }

private:
  template <class T> void reduce(std::span<T> inout, loopback_world::op_kind kind) {
    std::vector<T> sum;
    world_->collective(
        rank_,
        {kind, reinterpret_cast<const std::byte*>(inout.data()), inout.size_bytes(), nullptr},
        [&](const std::vector<loopback_world::slot>& view) {
          // Peers read `inout` during this phase, so the result goes to a private buffer and is
          // written back only after the second barrier.
          sum.resize(inout.size());
          for (std::size_t i = 0; i < sum.size(); ++i) {
            T acc = reinterpret_cast<const T*>(view[0].in)[i];
            for (std::size_t r = 1; r < view.size(); ++r)
              acc += reinterpret_cast<const T*>(view[r].in)[i];
            sum[i] = acc;
          }
        },
        [&] {
          if (!sum.empty())
            std::memcpy(inout.data(), sum.data(), sum.size() * sizeof(T));
        });
  }

  loopback_world* world_;
  int rank_;
};

inline loopback_communicator loopback_world::communicator(int rank) {
  return loopback_communicator(*this, rank);
}

template <class F>
requires std::invocable<F&, loopback_communicator&>
void loopback_world::run(F&& fn) {
  reset();
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size_));
  {
    std::vector<std::thread> workers;
    workers.reserve(static_cast<std::size_t>(size_));
    for (int r = 0; r < size_; ++r) {
      workers.emplace_back([this, r, &fn, &errors] {
        try {
          loopback_communicator comm(*this, r);
          std::invoke(fn, comm);
        } catch (...) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
          abort();
        }
      });
    }
    for (auto& w : workers)
      w.join();
  }
  std::exception_ptr first_abort;
  for (const auto& e : errors) {
    if (!e)
      continue;
    try {
      std::rethrow_exception(e);
    } catch (const loopback_aborted&) {
      if (!first_abort)
        first_abort = e;
    } catch (...) {
      throw;
    }
  }
  if (first_abort)
    std::rethrow_exception(first_abort);
}

static_assert(communicator<loopback_communicator>);
static_assert(communicator_f64<loopback_communicator>);
static_assert(!uses_device_buffers_v<loopback_communicator>);

} // namespace commpress
