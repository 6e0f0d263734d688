// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// A consumer of an installed commpress::mpi: the README's compressed all-reduce over MPI, on
// however many ranks it is started with (one without mpirun). Every rank's mean must keep
// exactly k of the n elements, each the ranks' shared value.

#include <mpi.h>

#include <commpress/comm/mpi.hpp>
#include <commpress/commpress.hpp>

#include <cstddef>
#include <cstdio>
#include <span>
#include <vector>

namespace cp = commpress;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int failed = 0;
  {
    constexpr std::size_t n = 1000;
    cp::mpi_communicator comm(MPI_COMM_WORLD);
    const cp::pipeline<cp::ef, cp::random_k> pipe{{}, {.fraction = 0.01f}};
    cp::all_reduce_plan plan(pipe, n, comm.size());
    auto residual = plan.make_state();
    std::vector<std::byte> ws(plan.workspace_bytes());
    const std::vector<float> grad(n, 0.5f); // every rank the same gradient
    std::vector<float> mean(n, -1.0f);
    cp::all_reduce_compressed(comm, cp::cpu::seq, plan, residual, {.seed = 7, .step = 0},
                              std::span<const float>(grad), std::span(mean), std::span(ws));
    std::size_t kept = 0;
    for (const float v : mean) {
      kept += v != 0.0f ? 1u : 0u;
      failed |= v != 0.0f && v != 0.5f ? 1 : 0;
    }
    failed |= kept != 10 ? 1 : 0; // k = 1% of 1000
    std::printf("rank %d of %d: %zu of %zu elements kept\n", comm.rank(), comm.size(), kept, n);
  }
  MPI_Finalize();
  return failed;
}
