// What the tests under mpirun share: this process's rank and the number of ranks of MPI_COMM_WORLD. Their main
// (mpi_main.cpp) starts MPI, runs the Catch2 session on every rank and fails when any rank's tests do.
#pragma once

#include <mpi.h>

inline int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

inline int world_size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}
