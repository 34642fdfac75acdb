// run_or_abort under mpirun: rank 1 throws while every other rank waits in a barrier it will never reach. The job must
// end within the test's timeout, with rank 1's message on standard error (tests/CMakeLists.txt matches it).
#include <mpi.h>

#include <attend/distributed.hpp>
#include <stdexcept>

int main(int argc, char* argv[]) {
  MPI_Init(&argc, &argv);
  attend::run_or_abort(MPI_COMM_WORLD, [] {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 1) throw std::runtime_error("a deliberate failure outside any collective call");
    MPI_Barrier(MPI_COMM_WORLD);
  });
  MPI_Finalize();
  return 0;
}
