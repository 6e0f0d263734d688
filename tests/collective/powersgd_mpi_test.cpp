// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// PowerSGD's two all-reduces over real MPI processes: run with `mpiexec -np N`. Every rank runs
// the checks of powersgd_checks.hpp; rank 0 reports in full, the others only failures; the exit
// code is non-zero on every rank if any rank failed.

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <mpi.h>

#include "commpress/comm/mpi.hpp"
#include "powersgd_checks.hpp"

namespace cp = commpress;

TEST_CASE("all_reduce_powersgd over MPI: exact for a rank-r mean, the same on every rank, the "
          "one-process replay") {
  cp::mpi_communicator comm(MPI_COMM_WORLD);
  const cp::test::failures f = cp::test::check_powersgd(comm);
  for (const auto& s : f)
    FAIL_CHECK(s);
  int mine = f.empty() ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  CHECK(all != 0);
}

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
  }
  int worst = 0;
  MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
