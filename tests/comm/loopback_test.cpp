// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "conformance.hpp"

#include <commpress/comm/loopback.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using commpress::loopback_communicator;
using commpress::loopback_world;

namespace {

/// A world that fails a test after 20 s instead of hanging it on a deadlock.
constexpr auto test_timeout = std::chrono::milliseconds(20000);

/// Runs `fn` on every rank and returns what each rank produced, for checks on the main thread.
template <class R, class F> std::vector<R> per_rank(loopback_world& world, F fn) {
  std::vector<R> out(static_cast<std::size_t>(world.size()));
  world.run([&](loopback_communicator& c) { out[static_cast<std::size_t>(c.rank())] = fn(c); });
  return out;
}

/// Runs `fn` on every rank and returns the message of the exception `world.run` rethrows.
template <class F> std::string run_error(loopback_world& world, F fn) {
  try {
    world.run(fn);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

struct no_barrier {
  int rank() const { return 0; }
  int size() const { return 1; }
  void all_gather(std::span<const std::byte>, std::span<std::byte>) {}
  void all_to_all(std::span<const std::byte>, std::span<std::byte>) {}
  void send(std::span<const std::byte>, int, int) {}
  void recv(std::span<std::byte>, int, int) {}
  void all_reduce_sum(std::span<float>) {}
};

struct with_barrier : no_barrier {
  void barrier() {}
};

} // namespace

static_assert(commpress::communicator<loopback_communicator>);
static_assert(!commpress::communicator<no_barrier>);
static_assert(commpress::communicator<with_barrier>);
static_assert(!commpress::communicator_f64<with_barrier>);
static_assert(!commpress::uses_device_buffers_v<with_barrier>);

TEST_SUITE_BEGIN("comm");

TEST_CASE("loopback_communicator: world and communicator basics") {
  CHECK_THROWS_AS(loopback_world(0), std::runtime_error);
  loopback_world world(3);
  CHECK(world.size() == 3);
  CHECK(world.communicator(2).rank() == 2);
  CHECK(world.communicator(2).size() == 3);
  CHECK_THROWS_WITH_AS((void)world.communicator(3), "commpress: loopback: rank out of range",
                       std::runtime_error);
  CHECK_THROWS_AS((void)world.communicator(-1), std::runtime_error);
}

TEST_CASE("loopback_communicator: conformance of every operation, N = 1..4") {
  for (int n = 1; n <= 4; ++n) {
    CAPTURE(n);
    loopback_world world(n, test_timeout);
    const auto results = per_rank<std::vector<std::string>>(
        world, [](loopback_communicator& c) { return commpress::test::conformance(c); });
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      for (const auto& failure : results[static_cast<std::size_t>(r)])
        FAIL_CHECK(failure);
      CHECK(results[static_cast<std::size_t>(r)].empty());
    }
    CHECK(world.pending_messages() == 0);
  }
}

TEST_CASE("loopback_communicator: all_reduce_sum adds in rank order, the same bits on every rank") {
  for (int n = 1; n <= 4; ++n) {
    CAPTURE(n);
    loopback_world world(n, test_timeout);
    constexpr std::size_t count = 4096;
    const auto reduce_float = [&](loopback_communicator& c) {
      std::vector<float> v(count);
      for (std::size_t i = 0; i < count; ++i)
        v[i] = commpress::test::wide_value<float>(c.rank(), i, 99);
      c.all_reduce_sum(std::span<float>(v));
      return v;
    };
    const auto reduce_double = [&](loopback_communicator& c) {
      std::vector<double> v(count);
      for (std::size_t i = 0; i < count; ++i)
        v[i] = commpress::test::wide_value<double>(c.rank(), i, 99);
      c.all_reduce_sum(std::span<double>(v));
      return v;
    };
    const auto floats = per_rank<std::vector<float>>(world, reduce_float);
    const auto again = per_rank<std::vector<float>>(world, reduce_float);
    const auto doubles = per_rank<std::vector<double>>(world, reduce_double);
    std::vector<float> expected_f(count);
    std::vector<double> expected_d(count);
    for (std::size_t i = 0; i < count; ++i) {
      expected_f[i] = commpress::test::rank_ordered_sum<float>(n, i, 99);
      expected_d[i] = commpress::test::rank_ordered_sum<double>(n, i, 99);
    }
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      const auto ur = static_cast<std::size_t>(r);
      CHECK(commpress::test::same_bits<float>(floats[ur], expected_f));
      CHECK(commpress::test::same_bits<float>(again[ur], expected_f));
      CHECK(commpress::test::same_bits<double>(doubles[ur], expected_d));
    }
    if (n >= 3) {
      // The data is chosen so that the order matters: some other order differs somewhere.
      bool order_matters = false;
      for (std::size_t i = 0; i < count && !order_matters; ++i) {
        float reversed = commpress::test::wide_value<float>(n - 1, i, 99);
        for (int r = n - 2; r >= 0; --r)
          reversed += commpress::test::wide_value<float>(r, i, 99);
        order_matters = reversed != expected_f[i];
      }
      CHECK(order_matters);
    }
  }
}

TEST_CASE("loopback_communicator: barrier orders the phases of every rank") {
  for (int n = 1; n <= 4; ++n) {
    CAPTURE(n);
    loopback_world world(n, test_timeout);
    constexpr int rounds = 50;
    std::array<std::atomic<int>, rounds> arrived{};
    std::atomic<int> violations{0};
    world.run([&](loopback_communicator& c) {
      for (int k = 0; k < rounds; ++k) {
        if ((k + c.rank()) % 3 == 0)
          std::this_thread::sleep_for(100us);
        arrived[static_cast<std::size_t>(k)].fetch_add(1);
        c.barrier();
        if (arrived[static_cast<std::size_t>(k)].load() != c.size())
          violations.fetch_add(1);
      }
    });
    CHECK(violations.load() == 0);
  }
}

TEST_CASE("loopback_communicator: send is eager, recv waits for the matching message") {
  loopback_world world(2, test_timeout);
  std::atomic<bool> sent{false};
  std::atomic<bool> received_after_send{false};
  world.run([&](loopback_communicator& c) {
    std::array<std::byte, 4> buf{};
    if (c.rank() == 0) {
      std::this_thread::sleep_for(20ms);
      sent = true;
      c.send(std::as_bytes(std::span(buf)), 1, 0);
      // Eager: both ranks may send before receiving without deadlock.
      c.send(std::as_bytes(std::span(buf)), 1, 1);
      c.recv(std::as_writable_bytes(std::span(buf)), 1, 1);
    } else {
      c.recv(std::as_writable_bytes(std::span(buf)), 0, 0);
      received_after_send = sent.load();
      c.send(std::as_bytes(std::span(buf)), 0, 1);
      c.recv(std::as_writable_bytes(std::span(buf)), 0, 1);
    }
  });
  CHECK(received_after_send.load());
  CHECK(world.pending_messages() == 0);
}

TEST_CASE("loopback_communicator: send to self") {
  loopback_world one(1, test_timeout);
  one.run([](loopback_communicator& c) {
    const std::array<std::byte, 3> out{std::byte{1}, std::byte{2}, std::byte{3}};
    std::array<std::byte, 3> in{};
    c.send(out, 0, 9);
    c.recv(in, 0, 9);
    CHECK(in == out);
  });
}

/// Runs `op` on every rank of worlds of 2..4 workers; checks that every rank threw a
/// "commpress: loopback: " error, and passes (n, rethrown message) to `check`.
template <class Op, class Check> void expect_collective_error(Op op, Check check) {
  for (int n = 2; n <= 4; ++n) {
    CAPTURE(n);
    loopback_world world(n, test_timeout);
    std::atomic<int> thrown{0};
    const auto msg = run_error(world, [&](loopback_communicator& c) {
      try {
        op(c);
      } catch (const std::runtime_error& e) {
        if (starts_with(e.what(), "commpress: loopback: "))
          thrown.fetch_add(1);
        throw;
      }
    });
    check(n, msg);
    CHECK(thrown.load() == n);
    // The world stays usable after a collective error.
    const auto sums = per_rank<float>(world, [](loopback_communicator& c) {
      float v = 1.0f;
      c.all_reduce_sum(std::span<float>(&v, 1));
      return v;
    });
    for (float s : sums)
      CHECK(s == static_cast<float>(n));
  }
}

TEST_CASE("loopback_communicator: argument errors throw on every rank instead of hanging") {
  SUBCASE("block sizes differ between ranks") {
    expect_collective_error(
        [](loopback_communicator& c) {
          std::vector<std::byte> mine(c.rank() == 1 ? 5 : 4);
          std::vector<std::byte> all(mine.size() * static_cast<std::size_t>(c.size()));
          c.all_gather(mine, all);
        },
        [](int, const std::string& msg) {
          CHECK(starts_with(msg, "commpress: loopback: all_gather: ranks pass different sizes"));
        });
  }
  SUBCASE("one rank's output buffer is too small") {
    expect_collective_error(
        [](loopback_communicator& c) {
          std::vector<std::byte> mine(4);
          const auto n = static_cast<std::size_t>(c.size());
          std::vector<std::byte> all(c.rank() == c.size() - 1 ? 1 : 4 * n);
          c.all_gather(mine, all);
        },
        [](int n, const std::string& msg) {
          CHECK(msg == "commpress: loopback: all_gather: rank " + std::to_string(n - 1) +
                           ": all.size() != size() * mine.size()");
        });
  }
  SUBCASE("all_to_all sizes") {
    expect_collective_error(
        [](loopback_communicator& c) {
          std::vector<std::byte> send(static_cast<std::size_t>(c.size()) * 2 + 1);
          std::vector<std::byte> recv(send.size());
          c.all_to_all(send, recv);
        },
        [](int, const std::string& msg) {
          CHECK(msg.find("all_to_all: rank 0: send.size() is not a multiple of size()") !=
                std::string::npos);
        });
  }
  SUBCASE("reduction counts differ") {
    expect_collective_error(
        [](loopback_communicator& c) {
          std::vector<double> v(static_cast<std::size_t>(c.rank()) + 1);
          c.all_reduce_sum(std::span<double>(v));
        },
        [](int, const std::string& msg) {
          CHECK(starts_with(msg, "commpress: loopback: all_reduce_sum(double): ranks pass"));
        });
  }
  SUBCASE("ranks call different collectives") {
    expect_collective_error(
        [](loopback_communicator& c) {
          if (c.rank() == 0) {
            c.barrier();
          } else {
            std::vector<float> v(2);
            c.all_reduce_sum(std::span<float>(v));
          }
        },
        [](int, const std::string& msg) {
          CHECK(msg.find("collective mismatch") != std::string::npos);
        });
  }
}

TEST_CASE("loopback_communicator: point-to-point errors") {
  loopback_world world(2, test_timeout);
  SUBCASE("peer and tag out of range") {
    auto c = world.communicator(0);
    std::array<std::byte, 1> b{};
    CHECK_THROWS_WITH_AS(c.send(b, 2, 0), "commpress: loopback: send: peer out of range",
                         std::runtime_error);
    CHECK_THROWS_WITH_AS(c.send(b, -1, 0), "commpress: loopback: send: peer out of range",
                         std::runtime_error);
    CHECK_THROWS_WITH_AS(c.send(b, 1, -1), "commpress: loopback: send: tag must be >= 0",
                         std::runtime_error);
    CHECK_THROWS_WITH_AS(c.recv(b, 1, -1), "commpress: loopback: recv: tag must be >= 0",
                         std::runtime_error);
  }
  SUBCASE("message size differs from the receive buffer") {
    const auto msg = run_error(world, [](loopback_communicator& c) {
      std::array<std::byte, 8> b{};
      if (c.rank() == 0)
        c.send(std::span(b).first(3), 1, 0);
      else
        c.recv(b, 0, 0);
    });
    CHECK(msg == "commpress: loopback: recv: message of 3 bytes from rank 0 does not match the "
                 "buffer of 8 bytes");
  }
}

TEST_CASE("loopback_communicator: failures and deadlocks do not hang the other workers") {
  SUBCASE("an exception in one worker aborts the others and is rethrown") {
    loopback_world world(4, test_timeout);
    std::atomic<int> aborted{0};
    const auto msg = run_error(world, [&](loopback_communicator& c) {
      if (c.rank() == 2)
        throw std::runtime_error("worker 2 failed");
      try {
        c.barrier();
      } catch (const commpress::loopback_aborted&) {
        aborted.fetch_add(1);
        throw;
      }
    });
    CHECK(msg == "worker 2 failed");
    CHECK(aborted.load() == 3);
  }
  SUBCASE("a recv without a sender times out") {
    loopback_world world(2, 200ms);
    const auto start = std::chrono::steady_clock::now();
    const auto msg = run_error(world, [](loopback_communicator& c) {
      std::array<std::byte, 1> b{};
      if (c.rank() == 0)
        c.recv(b, 1, 0); // rank 1 never sends
    });
    CHECK(msg == "commpress: loopback: recv: timed out (deadlock or missing peer)");
    CHECK(std::chrono::steady_clock::now() - start < 10s);
  }
  SUBCASE("a missing rank in a collective times out") {
    loopback_world world(3, 200ms);
    const auto msg = run_error(world, [](loopback_communicator& c) {
      if (c.rank() != 1)
        c.barrier();
    });
    CHECK(msg == "commpress: loopback: barrier: timed out (deadlock or missing peer)");
  }
  SUBCASE("abort() wakes a blocked worker") {
    loopback_world world(2, test_timeout);
    std::thread waker([&] {
      std::this_thread::sleep_for(50ms);
      world.abort();
    });
    const auto msg = run_error(world, [](loopback_communicator& c) {
      std::array<std::byte, 1> b{};
      c.recv(b, 1 - c.rank(), 0);
    });
    waker.join();
    CHECK(msg == "commpress: loopback: world aborted");
  }
}

TEST_CASE("loopback_communicator: user-managed threads with world.communicator()") {
  loopback_world world(3, test_timeout);
  std::vector<std::vector<std::byte>> gathered(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      auto c = world.communicator(r);
      const std::array<std::byte, 2> mine{std::byte(r), std::byte(10 + r)};
      gathered[static_cast<std::size_t>(r)].resize(6);
      c.all_gather(mine, gathered[static_cast<std::size_t>(r)]);
    });
  }
  for (auto& t : threads)
    t.join();
  const std::vector<std::byte> expected{std::byte{0},  std::byte{10}, std::byte{1},
                                        std::byte{11}, std::byte{2},  std::byte{12}};
  for (const auto& g : gathered)
    CHECK(g == expected);
}

TEST_SUITE_END();
