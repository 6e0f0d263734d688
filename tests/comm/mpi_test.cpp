// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// An MPI program: run it with `mpiexec -np N` (N >= 1). Every rank runs the same doctest test
// cases in the same order; rank 0 reports in full, the others only report failures. The exit
// code is non-zero on every rank if any rank failed.
//
// A test case must never let one rank skip a collective the others enter: assertions here are
// CHECKs (they do not throw), and helpers that compare results across ranks are collectives
// that every rank calls.

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "conformance.hpp"

#include <commpress/comm/mpi.hpp>

#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstddef>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using commpress::mpi_communicator;

namespace {

/// Collective over `comm`, with raw MPI (independent of the code under test): true on every
/// rank iff every rank passed the same bytes.
bool same_on_all_ranks(MPI_Comm comm, std::span<const std::byte> bytes) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  long long len = static_cast<long long>(bytes.size());
  std::vector<long long> lens(static_cast<std::size_t>(size));
  MPI_Allgather(&len, 1, MPI_LONG_LONG, lens.data(), 1, MPI_LONG_LONG, comm);
  for (long long l : lens)
    if (l != len)
      return false;
  std::vector<std::byte> all(bytes.size() * static_cast<std::size_t>(size));
  MPI_Allgather(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, all.data(),
                static_cast<int>(bytes.size()), MPI_BYTE, comm);
  for (int r = 0; r < size; ++r)
    if (!bytes.empty() && std::memcmp(all.data() + static_cast<std::size_t>(r) * bytes.size(),
                                      bytes.data(), bytes.size()) != 0)
      return false;
  return true;
}

template <class T> bool same_on_all_ranks(MPI_Comm comm, const std::vector<T>& v) {
  return same_on_all_ranks(comm, std::as_bytes(std::span<const T>(v)));
}

/// True on every rank iff `ok` is true on every rank.
bool all_ranks(MPI_Comm comm, bool ok) {
  int mine = ok ? 1 : 0;
  int all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, comm);
  return all != 0;
}

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

/// Runs the shared conformance checks, reporting each failure with the rank it happened on.
void run_conformance(mpi_communicator& comm) {
  const auto failures = commpress::test::conformance(comm);
  for (const auto& f : failures)
    FAIL_CHECK("rank " << comm.rank() << ": " << f);
  CHECK(all_ranks(comm.native_handle(), failures.empty()));
}

} // namespace

static_assert(commpress::communicator<mpi_communicator>);
static_assert(commpress::communicator_f64<mpi_communicator>);

TEST_SUITE_BEGIN("comm");

TEST_CASE("mpi_communicator: wraps MPI_COMM_WORLD") {
  mpi_communicator comm(MPI_COMM_WORLD);
  int rank = -1;
  int size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CHECK(comm.rank() == rank);
  CHECK(comm.size() == size);
  CHECK(comm.native_handle() == MPI_COMM_WORLD);
  CHECK_THROWS_WITH_AS(mpi_communicator(MPI_COMM_NULL), "commpress: mpi: MPI_COMM_NULL",
                       std::runtime_error);
}

TEST_CASE("mpi_communicator: conformance of every operation on MPI_COMM_WORLD") {
  mpi_communicator comm(MPI_COMM_WORLD);
  run_conformance(comm);
}

TEST_CASE("mpi_communicator: conformance when counts above 7 take the INT_MAX paths") {
  // Blocks above 7 bytes use the derived block datatype, reductions above 7 elements are chunked:
  // the INT_MAX code paths, exercised with small buffers.
  mpi_communicator comm(MPI_COMM_WORLD, 7);
  run_conformance(comm);
}

TEST_CASE("mpi_communicator: conformance on a split communicator") {
  const int rank = world_rank();
  MPI_Comm half = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
  {
    mpi_communicator comm(half);
    run_conformance(comm);
  }
  MPI_Comm_free(&half);
}

TEST_CASE("mpi_communicator: byte-identical results on every rank") {
  mpi_communicator comm(MPI_COMM_WORLD);
  const MPI_Comm world = comm.native_handle();
  const int n = comm.size();
  const int me = comm.rank();
  constexpr std::size_t count = 10007;

  // all_gather: every rank ends with the same concatenation.
  std::vector<std::byte> mine(333);
  for (std::size_t i = 0; i < mine.size(); ++i)
    mine[i] = commpress::test::pattern(me, 0, i, 1);
  std::vector<std::byte> all(mine.size() * static_cast<std::size_t>(n));
  comm.all_gather(mine, all);
  CHECK(same_on_all_ranks(world, all));

  // MPI_Allreduce of floats whose sum depends on the order: MPI does not fix the order, but
  // Open MPI returns the same bits on every rank (the standard's advice to implementors).
  std::vector<float> f(count);
  std::vector<double> d(count);
  for (std::size_t i = 0; i < count; ++i) {
    f[i] = commpress::test::wide_value<float>(me, i, 3);
    d[i] = commpress::test::wide_value<double>(me, i, 3);
  }
  std::vector<float> f_ordered = f;
  std::vector<double> d_ordered = d;
  comm.all_reduce_sum(std::span<float>(f));
  comm.all_reduce_sum(std::span<double>(d));
  CHECK(same_on_all_ranks(world, f));
  CHECK(same_on_all_ranks(world, d));

  // all_reduce_sum_ordered equals x_0 + x_1 + ... bit for bit, on every rank.
  comm.all_reduce_sum_ordered(std::span<float>(f_ordered));
  comm.all_reduce_sum_ordered(std::span<double>(d_ordered), 1000);
  bool ordered_ok = true;
  for (std::size_t i = 0; i < count; ++i) {
    const float ef = commpress::test::rank_ordered_sum<float>(n, i, 3);
    const double ed = commpress::test::rank_ordered_sum<double>(n, i, 3);
    ordered_ok = ordered_ok && std::memcmp(&ef, &f_ordered[i], sizeof ef) == 0 &&
                 std::memcmp(&ed, &d_ordered[i], sizeof ed) == 0;
  }
  CHECK(ordered_ok);
  CHECK(same_on_all_ranks(world, f_ordered));
  CHECK(same_on_all_ranks(world, d_ordered));

  // The same ordered result again (run-to-run reproducible).
  std::vector<float> again(count);
  for (std::size_t i = 0; i < count; ++i)
    again[i] = commpress::test::wide_value<float>(me, i, 3);
  comm.all_reduce_sum_ordered(std::span<float>(again), 17);
  CHECK(commpress::test::same_bits<float>(again, f_ordered));
}

TEST_CASE("mpi_communicator: barrier waits for the last rank") {
  mpi_communicator comm(MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  if (comm.rank() == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  comm.barrier();
  const double waited = MPI_Wtime() - start;
  // Nobody leaves before rank 0 arrives, about 300 ms later (generous margin for loaded CI).
  if (comm.size() > 1)
    CHECK(waited >= 0.15);
}

TEST_CASE("mpi_communicator: derived block datatype describes exactly the block") {
  for (std::size_t bytes : {std::size_t{0}, std::size_t{7}, std::size_t{8}, std::size_t{14},
                            std::size_t{25}, std::size_t{1000}}) {
    CAPTURE(bytes);
    const commpress::detail::mpi_byte_block block(bytes, 7);
    CHECK(block.derived() == (bytes > 7));
    MPI_Count size = 0;
    MPI_Count lb = -1;
    MPI_Count extent = 0;
    MPI_Type_size_x(block.type(), &size);
    MPI_Type_get_extent_x(block.type(), &lb, &extent);
    CHECK(size * block.count() == static_cast<MPI_Count>(bytes));
    if (block.derived()) {
      CHECK(block.count() == 1);
      CHECK(lb == 0);
      CHECK(extent == static_cast<MPI_Count>(bytes));
    }
  }
  const commpress::detail::mpi_byte_block big(std::size_t{3} << 31); // 6 GiB, not allocated
  CHECK(big.derived());
  MPI_Count size = 0;
  MPI_Type_size_x(big.type(), &size);
  CHECK(size == (MPI_Count{3} << 31));
}

TEST_CASE("mpi_communicator: argument errors throw before communicating") {
  mpi_communicator comm(MPI_COMM_WORLD);
  const int n = comm.size();
  std::vector<std::byte> mine(4);
  std::vector<std::byte> all(4 * static_cast<std::size_t>(n) + 1);
  CHECK_THROWS_WITH_AS(comm.all_gather(mine, all),
                       "commpress: mpi: all_gather: all.size() != size() * mine.size()",
                       std::runtime_error);
  std::vector<std::byte> send(static_cast<std::size_t>(n) * 2 + (n > 1 ? 1 : 0));
  std::vector<std::byte> recv(send.size() + 1);
  CHECK_THROWS_WITH_AS(comm.all_to_all(send, recv),
                       "commpress: mpi: all_to_all: send.size() != recv.size()",
                       std::runtime_error);
  if (n > 1) {
    std::vector<std::byte> recv2(send.size());
    CHECK_THROWS_WITH_AS(comm.all_to_all(send, recv2),
                         "commpress: mpi: all_to_all: send.size() is not a multiple of size()",
                         std::runtime_error);
  }
  const std::string peer_error =
      "commpress: mpi: send: peer " + std::to_string(n) + " out of range";
  CHECK_THROWS_WITH_AS(comm.send(mine, n, 0), peer_error.c_str(), std::runtime_error);
  CHECK_THROWS_WITH_AS(comm.recv(mine, 0, -1),
                       "commpress: mpi: recv: tag -1 outside [0, MPI_TAG_UB]", std::runtime_error);
  int* tag_ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
  REQUIRE(flag);
  if (*tag_ub < INT_MAX) { // Open MPI's MPI_TAG_UB is INT_MAX, MPICH's is smaller
    const std::string tag_error =
        "commpress: mpi: send: tag " + std::to_string(*tag_ub + 1) + " outside [0, MPI_TAG_UB]";
    CHECK_THROWS_WITH_AS(comm.send(mine, 0, *tag_ub + 1), tag_error.c_str(), std::runtime_error);
  }
}

TEST_CASE("mpi_communicator: a short message and an MPI error code both throw") {
  // A duplicate with MPI_ERRORS_RETURN, so that MPI reports errors instead of aborting.
  MPI_Comm dup = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  {
    mpi_communicator comm(dup);
    const int n = comm.size();
    const int me = comm.rank();
    std::vector<std::byte> out(8, std::byte{1});
    std::vector<std::byte> in(16);
    // Shorter than the buffer: MPI succeeds, the wrapper reports the size mismatch.
    comm.send(std::span<const std::byte>(out).first(3), (me + 1) % n, 11);
    CHECK_THROWS_WITH_AS(comm.recv(in, (me + n - 1) % n, 11),
                         "commpress: mpi: recv: got 3 bytes, expected 16", std::runtime_error);
    // Longer than the buffer: MPI_ERR_TRUNCATE from MPI_Recv.
    comm.send(out, (me + 1) % n, 12);
    std::string what;
    try {
      comm.recv(std::span<std::byte>(in).first(4), (me + n - 1) % n, 12);
    } catch (const std::runtime_error& e) {
      what = e.what();
    }
    CHECK(what.rfind("commpress: mpi: MPI_Recv failed: ", 0) == 0);
    MESSAGE("truncation error: " << what);
    comm.barrier();
  }
  MPI_Comm_free(&dup);
}

TEST_SUITE_END();

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int result = 0;
  {
    doctest::Context context(argc, argv);
    if (rank != 0)
      context.setOption("minimal", true); // only failures from ranks > 0
    result = context.run();
    if (context.shouldExit()) {
      MPI_Finalize();
      return result;
    }
  }
  int worst = 0;
  MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
