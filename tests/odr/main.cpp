// The ODR test's program: both objects linked together. The x86-64 object runs on any x86-64 CPU; had it shared an
// attend symbol with the x86-64-v4 object, the linker could have given it the AVX-512 body (a crash on a CPU without
// AVX-512). The v4 object runs only where the CPU has x86-64-v4's instructions; both must then agree.
#include "attention.hpp"

#include <cmath>
#include <cstdio>

int main() {
  const float base = seed_attention_x86_64();
  std::printf("x86-64: %.8g\n", base);
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512vl") ||
      !__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512dq")) {
    std::printf("x86-64-v4: not run (no AVX-512 on this CPU)\n");
    return 0;
  }
  const float v4 = seed_attention_x86_64_v4();
  std::printf("x86-64-v4: %.8g\n", v4);
  return std::abs(v4 - base) <= 1e-5f * std::abs(base) ? 0 : 1;
}
