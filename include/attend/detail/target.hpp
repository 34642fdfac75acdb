// attend/detail/target.hpp — compile the functions between two macros for another instruction set.
//
//   ATTEND_TARGET_AVX2_BEGIN  ... functions ...  ATTEND_TARGET_END
//
// gives every function defined in between (templates included) GCC's or Clang's target attribute, so that their
// intrinsics compile, and their code is generated, for AVX2 + FMA (ATTEND_TARGET_AVX512_BEGIN: AVX-512 F/DQ/BW/VL;
// ATTEND_TARGET_AVX512_BF16_BEGIN: those and AVX512-BF16) while the rest of the translation unit keeps its own flags.
// Such a function may call the ordinary inline functions of the file (they are inlined into it), but is called itself
// only through the dispatch of detail/kernels.hpp or detail/bf16_products.hpp, once active_isa() has checked that
// the CPU can run it. Lambdas are not covered by Clang's pragma: the code between the macros defines none.
#pragma once

#include <attend/isa.hpp>

#ifdef ATTEND_X86_DISPATCH
#include <immintrin.h>

#if defined(__clang__)
#define ATTEND_TARGET_AVX2_BEGIN \
  _Pragma("clang attribute push(__attribute__((target(\"avx2,fma,f16c\"))), apply_to = function)")
// (_Pragma takes one string literal, not a concatenation: the line is long.)
#define ATTEND_TARGET_AVX512_BEGIN \
  _Pragma("clang attribute push(__attribute__((target(\"avx2,fma,f16c,avx512f,avx512dq,avx512bw,avx512vl\"))), apply_to = function)")
#define ATTEND_TARGET_AVX512_BF16_BEGIN \
  _Pragma("clang attribute push(__attribute__((target(\"avx2,fma,f16c,avx512f,avx512dq,avx512bw,avx512vl,avx512bf16\"))), apply_to = function)")
#define ATTEND_TARGET_END _Pragma("clang attribute pop")
#else
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_ps() through, which its -Wmaybe-uninitialized reports as used
// uninitialized wherever they are inlined (GCC bug 105593, fixed in GCC 13): silenced between the macros.
#define ATTEND_TARGET_AVX2_BEGIN                                                                                      \
  _Pragma("GCC diagnostic push") _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma,f16c\")")
#define ATTEND_TARGET_AVX512_BEGIN                                                                                    \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")                             \
      _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"") _Pragma("GCC push_options")                     \
          _Pragma("GCC target(\"avx2,fma,f16c,avx512f,avx512dq,avx512bw,avx512vl\")")
#define ATTEND_TARGET_AVX512_BF16_BEGIN                                                                               \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")                             \
      _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"") _Pragma("GCC push_options")                     \
          _Pragma("GCC target(\"avx2,fma,f16c,avx512f,avx512dq,avx512bw,avx512vl,avx512bf16\")")
#define ATTEND_TARGET_END _Pragma("GCC pop_options") _Pragma("GCC diagnostic pop")
#endif
#endif
