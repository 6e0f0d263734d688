// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// The compressed collectives and stage channels over real MPI processes: run with
// `mpiexec -np N` (ctest runs N = 2, 3, 4). Every rank runs the same test cases in the same
// order; rank 0 reports in full, the others only failures; the exit code is non-zero on every
// rank if any rank failed. Checks are collectives that every rank enters (collective_checks.hpp).

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "collective_checks.hpp"

#include <commpress/comm/mpi.hpp>

#include <mpi.h>

#include <span>
#include <string>

namespace cp = commpress;
using cp::test::failures;

namespace {

/// True on every rank iff `ok` is true on every rank (raw MPI, independent of the code tested).
bool all_ranks(bool ok) {
  int mine = ok ? 1 : 0;
  int all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  return all != 0;
}

void report(const failures& f) {
  for (const auto& s : f)
    FAIL_CHECK(s);
  CHECK(all_ranks(f.empty()));
}

} // namespace

TEST_SUITE_BEGIN("collective");

TEST_CASE("all_reduce_compressed over MPI: identity equals MPI_Allreduce and the ordered sum") {
  cp::mpi_communicator comm(MPI_COMM_WORLD);
  // The reference is MPI_Allreduce itself, called here directly.
  report(cp::test::check_identity_all_reduce(comm, [](std::span<float> x) {
    MPI_Allreduce(MPI_IN_PLACE, x.data(), static_cast<int>(x.size()), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
  }));
}

TEST_CASE("all_reduce_compressed over MPI: random_k with a shared seed equals the replay") {
  cp::mpi_communicator comm(MPI_COMM_WORLD);
  report(cp::test::check_random_k_all_reduce(comm));
}

TEST_CASE("all_gather_compressed over MPI: top_k, sign, quantize, cast, QSGD Elias equal the "
          "replay") {
  cp::mpi_communicator comm(MPI_COMM_WORLD);
  report(cp::test::check_all_gather(comm));
}

TEST_CASE("sharded_all_reduce_compressed over MPI: replay-exact, byte-identical, E8") {
  cp::mpi_communicator comm(MPI_COMM_WORLD);
  report(cp::test::check_sharded(comm));
}

TEST_CASE("variable-length payloads over MPI: a bad peer length is errc::corrupt") {
  cp::mpi_communicator comm(MPI_COMM_WORLD);
  report(cp::test::check_corrupt_length(comm));
}

TEST_CASE("data_parallel over MPI: a layer policy's tensors equal the one-process replay") {
  cp::mpi_communicator comm(MPI_COMM_WORLD);
  report(cp::test::check_data_parallel_layers(comm));
}

TEST_CASE("data_parallel and onebit_adam over MPI: QSGD Elias payloads at their length, "
          "replay-exact, fixed codecs unchanged") {
  cp::mpi_communicator comm(MPI_COMM_WORLD);
  report(cp::test::check_optim_variable(comm));
}

TEST_CASE("data_parallel and onebit_adam over MPI: a bad peer length is errc::corrupt") {
  cp::mpi_communicator comm(MPI_COMM_WORLD);
  report(cp::test::check_optim_corrupt_length(comm));
}

TEST_CASE("stage_sender over MPI: 3 stages on 3 ranks reproduce the single-process channels") {
  cp::mpi_communicator comm(MPI_COMM_WORLD);
  report(cp::test::check_stage_pipeline(comm));
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
      context.setOption("minimal", true);
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
