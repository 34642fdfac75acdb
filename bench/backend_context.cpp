// Adds the Eigen backend a benchmark program was built with to the context Google Benchmark prints before the runs
// (and writes into --benchmark_out), so that the output of bench_attention and bench_attention_blas say which is
// which, and the instruction-set level attend's kernels run on. Compiled into each program with that program's definitions.
#include <Eigen/Core>
#include <attend/isa.hpp>
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
    // attend's kernels run on the level chosen at run time, whatever the flags (ATTEND_ISA forces one)
    benchmark::AddCustomContext("attend_isa", attend::isa_name(attend::active_isa()));
  }
};

const BackendContext backend_context;  // registers before main() runs benchmark::Initialize

}  // namespace
