// attend/isa.hpp — which instruction set attend's kernels run on, chosen once per process at run time.
//
// attend's kernels (the products, the softmax passes, the tiled attention) are compiled inside the headers once per
// level below, each in a namespace of its own with its instruction set enabled for those functions alone
// (detail/target.hpp), so a program built with the compiler's default flags and no -m option still runs them at the
// width of the CPU it runs on:
//   Isa::avx512_bf16  avx512 and AVX512-BF16's dot products of bfloat16 pairs (Cooper Lake, Sapphire Rapids and
//                 later Xeons, Zen 4 and later): bfloat16 products take them; float and double run avx512's kernels
//   Isa::avx512   AVX-512 F, DQ, BW and VL (Skylake-SP and later Xeons, Zen 4 and later), 16 floats a packet
//   Isa::avx2     AVX2 and FMA (Haswell and later, Zen), 8 floats a packet
//   Isa::generic  Eigen's packets at the flags the including file was compiled with: SSE2 on x86-64 by default,
//                 NEON on AArch64; the only level on other CPUs and compilers
// The first kernel call takes the best level this CPU has (CPUID, and XGETBV for the operating system's support of
// the wider registers), or the one the environment variable ATTEND_ISA names (avx512_bf16, avx512, avx2 or
// generic); set_isa() overrides both. Results are deterministic within a level and agree across levels within
// rounding (the tests run every level against the same double-precision fixtures).
#pragma once

#include <attend/config.hpp>

#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define ATTEND_X86_DISPATCH 1  // the avx2 and avx512 levels are compiled (detail/target.hpp)
#endif

namespace attend {

// The one process-wide record of the chosen level (an int, so that a program whose files are built with different
// flags, and so hold one attend each — config.hpp — still shares it): -1 until the first kernel call chooses.
namespace process {
inline std::atomic<int> chosen_isa{-1};
}  // namespace process

inline namespace ATTEND_ABI {

enum class Isa { generic = 0, avx2 = 1, avx512 = 2, avx512_bf16 = 3 };

// "generic", "avx2", "avx512", "avx512_bf16": the names ATTEND_ISA and set_isa(name) take; "unknown" for a value
// outside the enum (Isa(7)), which names no level.
inline const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::avx512_bf16: return "avx512_bf16";
    case Isa::avx512: return "avx512";
    case Isa::avx2: return "avx2";
    case Isa::generic: return "generic";
  }
  return "unknown";
}

namespace detail {

// True when `isa` is one of the enum's levels, not another value cast to Isa.
inline bool is_isa(Isa isa) {
  return isa == Isa::generic || isa == Isa::avx2 || isa == Isa::avx512 || isa == Isa::avx512_bf16;
}

// Every level, best first.
inline constexpr Isa all_isas[] = {Isa::avx512_bf16, Isa::avx512, Isa::avx2, Isa::generic};

// The level whose kernels float and double run on at `isa`: the levels above avx512 add bfloat16 products only.
inline Isa float_level(Isa isa) { return isa == Isa::avx512_bf16 ? Isa::avx512 : isa; }

#ifdef ATTEND_X86_DISPATCH
// XCR0, the register state the operating system saves on a context switch (0 when it does not support XSAVE).
inline unsigned long long xcr0() {
  unsigned int a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE)) return 0;
  unsigned int low = 0, high = 0;
  __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
  return (static_cast<unsigned long long>(high) << 32) | low;
}
#endif

// True when this CPU, and its operating system, can run level `isa`; false for a value outside the enum.
inline bool cpu_has(Isa isa) {
  if (isa == Isa::generic) return true;
  if (!is_isa(isa)) return false;
#ifdef ATTEND_X86_DISPATCH
  unsigned int a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool fma = (c & bit_FMA) != 0;
  const unsigned long long state = xcr0();
  const bool ymm = (state & 0x6) == 0x6;             // SSE and AVX state
  const bool zmm = (state & 0xe6) == 0xe6;           // and AVX-512's opmask and upper registers
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool avx2 = (b & bit_AVX2) != 0 && fma && ymm;
  if (isa == Isa::avx2) return avx2;
  const bool avx512 =
      avx2 && zmm && (b & bit_AVX512F) && (b & bit_AVX512DQ) && (b & bit_AVX512BW) && (b & bit_AVX512VL);
  if (isa == Isa::avx512) return avx512;
  // AVX512_BF16: CPUID leaf 7, subleaf 1, EAX bit 5.
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
  return avx512 && (a & (1u << 5)) != 0;
#else
  return false;
#endif
}

// "avx512, avx2, generic": the levels this CPU offers, best first, for messages.
inline std::string offered_isas();

// The level a name stands for; throws std::invalid_argument naming `what`, the value and the levels offered when
// the name is unknown or the CPU lacks that level.
inline Isa isa_from_name(const std::string& name, const char* what) {
  for (Isa isa : all_isas) {
    if (name != isa_name(isa)) continue;
    if (!cpu_has(isa))
      throw std::invalid_argument(std::string(what) + ": this CPU cannot run \"" + name + "\"; it offers " +
                                  offered_isas());
    return isa;
  }
  throw std::invalid_argument(std::string(what) + ": unknown instruction set \"" + name +
                              "\"; expected one of avx512_bf16, avx512, avx2, generic (this CPU offers " +
                              offered_isas() + ")");
}

}  // namespace detail

// The levels this CPU can run, best first; Isa::generic is always among them.
inline std::vector<Isa> available_isas() {
  std::vector<Isa> levels;
  for (Isa isa : detail::all_isas)
    if (detail::cpu_has(isa)) levels.push_back(isa);
  return levels;
}

inline std::string detail::offered_isas() {
  std::string names;
  for (Isa isa : available_isas()) names += (names.empty() ? "" : ", ") + std::string(isa_name(isa));
  return names;
}

// The best level this CPU can run.
inline Isa best_isa() { return available_isas().front(); }

// Makes every later kernel call of the process run on `isa`; std::invalid_argument when `isa` is not one of the
// enum's levels (Isa(7)) or this CPU cannot run it. Call it between calls, not while another thread is inside attend.
inline void set_isa(Isa isa) {
  if (!detail::is_isa(isa))
    throw std::invalid_argument(
        "set_isa: isa must be Isa::generic, Isa::avx2, Isa::avx512 or Isa::avx512_bf16, got Isa(" +
        std::to_string(static_cast<int>(isa)) + ")");
  if (!detail::cpu_has(isa))
    throw std::invalid_argument(std::string("set_isa: this CPU cannot run \"") + isa_name(isa) + "\"; it offers " +
                                detail::offered_isas());
  process::chosen_isa.store(static_cast<int>(isa), std::memory_order_relaxed);
}

// The same by name: "avx512_bf16", "avx512", "avx2" or "generic" (ATTEND_ISA's values), or "best" for best_isa().
inline void set_isa(const std::string& name) {
  set_isa(name == "best" ? best_isa() : detail::isa_from_name(name, "set_isa"));
}

// The level the kernels run on: the one set_isa() chose, else the one ATTEND_ISA names, else best_isa(). The first
// call makes the choice; a bad ATTEND_ISA (unknown, or a level this CPU lacks) throws std::invalid_argument from every
// call until set_isa() chooses.
inline Isa active_isa() {
  const int chosen = process::chosen_isa.load(std::memory_order_relaxed);
  if (chosen >= 0) return static_cast<Isa>(chosen);
  const char* forced = std::getenv("ATTEND_ISA");
  const Isa isa = forced != nullptr && *forced != '\0' ? detail::isa_from_name(forced, "ATTEND_ISA") : best_isa();
  process::chosen_isa.store(static_cast<int>(isa), std::memory_order_relaxed);
  return isa;
}

}  // namespace ATTEND_ABI
}  // namespace attend
