// Adds the Eigen backend a benchmark program was built with to the context Google Benchmark prints before the runs
// (and writes into --benchmark_out), so that the output of bench_attention and bench_attention_blas say which is
// which. Compiled into each program with that program's definitions.
#include <Eigen/Core>
#include <benchmark/benchmark.h>

namespace {

struct BackendContext {
  BackendContext() {
#ifdef EIGEN_USE_BLAS
    benchmark::AddCustomContext("eigen_backend", "EIGEN_USE_BLAS (large products call the BLAS library's sgemm/dgemm)");
#else
    benchmark::AddCustomContext("eigen_backend", "Eigen's own GEMM kernels");
#endif
    benchmark::AddCustomContext("eigen_simd", Eigen::SimdInstructionSetsInUse());
  }
};

const BackendContext backend_context;  // registers before main() runs benchmark::Initialize

}  // namespace
