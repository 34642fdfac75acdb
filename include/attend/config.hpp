// attend/config.hpp — the namespace every attend symbol lives in, named after the instruction set it is compiled for.
//
// attend is header-only: each translation unit compiles its own copy of every inline function. A program whose files
// are compiled with different -m flags (one with -march=x86-64-v4, another with the default -march=x86-64) would
// otherwise emit two bodies of the same function under one symbol; the linker keeps one of them, and a CPU without
// AVX-512 may then run the AVX-512 body (SIGILL). So everything attend defines lives in
//
//   namespace attend { inline namespace ATTEND_ABI { ... } }
//
// where ATTEND_ABI spells out the instruction-set macros the compiler defines (isa, isa_avx2_fma, ...): two builds
// with different flags share no attend symbol, and users still write attend::MultiHeadAttention. (The same device as
// Highway's HWY_NAMESPACE and libc++'s ABI tags.) Such a program holds one attend per set of flags: each has its own
// default_generator() and its own workspaces; the instruction set chosen at run time (attend/isa.hpp) is one for the
// process.
#pragma once

#define ATTEND_ABI_CAT_(a, b) a##b
#define ATTEND_ABI_CAT(a, b) ATTEND_ABI_CAT_(a, b)

#ifdef __SSE3__
#define ATTEND_ABI_SSE3 _sse3
#else
#define ATTEND_ABI_SSE3
#endif
#ifdef __SSSE3__
#define ATTEND_ABI_SSSE3 _ssse3
#else
#define ATTEND_ABI_SSSE3
#endif
#ifdef __SSE4_1__
#define ATTEND_ABI_SSE4_1 _sse41
#else
#define ATTEND_ABI_SSE4_1
#endif
#ifdef __SSE4_2__
#define ATTEND_ABI_SSE4_2 _sse42
#else
#define ATTEND_ABI_SSE4_2
#endif
#ifdef __AVX__
#define ATTEND_ABI_AVX _avx
#else
#define ATTEND_ABI_AVX
#endif
#ifdef __AVX2__
#define ATTEND_ABI_AVX2 _avx2
#else
#define ATTEND_ABI_AVX2
#endif
#ifdef __FMA__
#define ATTEND_ABI_FMA _fma
#else
#define ATTEND_ABI_FMA
#endif
#ifdef __F16C__
#define ATTEND_ABI_F16C _f16c
#else
#define ATTEND_ABI_F16C
#endif
#ifdef __AVX512F__
#define ATTEND_ABI_AVX512F _avx512f
#else
#define ATTEND_ABI_AVX512F
#endif
#ifdef __AVX512DQ__
#define ATTEND_ABI_AVX512DQ _dq
#else
#define ATTEND_ABI_AVX512DQ
#endif
#ifdef __AVX512BW__
#define ATTEND_ABI_AVX512BW _bw
#else
#define ATTEND_ABI_AVX512BW
#endif
#ifdef __AVX512VL__
#define ATTEND_ABI_AVX512VL _vl
#else
#define ATTEND_ABI_AVX512VL
#endif
#if defined(__ARM_NEON) || defined(__ARM_NEON__)
#define ATTEND_ABI_NEON _neon
#else
#define ATTEND_ABI_NEON
#endif

// isa, then one suffix per instruction-set macro defined: isa (x86-64's baseline), isa_sse3_ssse3_sse41_sse42_avx_
// avx2_fma_f16c (x86-64-v3), ..._avx512f_dq_bw_vl (x86-64-v4).
#define ATTEND_ABI                                                                                                    \
  ATTEND_ABI_CAT(                                                                                                     \
      ATTEND_ABI_CAT(                                                                                                 \
          ATTEND_ABI_CAT(                                                                                             \
              ATTEND_ABI_CAT(                                                                                         \
                  ATTEND_ABI_CAT(                                                                                     \
                      ATTEND_ABI_CAT(                                                                                 \
                          ATTEND_ABI_CAT(                                                                             \
                              ATTEND_ABI_CAT(                                                                         \
                                  ATTEND_ABI_CAT(                                                                     \
                                      ATTEND_ABI_CAT(                                                                 \
                                          ATTEND_ABI_CAT(ATTEND_ABI_CAT(ATTEND_ABI_CAT(isa, ATTEND_ABI_SSE3),         \
                                                                        ATTEND_ABI_SSSE3),                            \
                                                         ATTEND_ABI_SSE4_1),                                          \
                                          ATTEND_ABI_SSE4_2),                                                         \
                                      ATTEND_ABI_AVX),                                                                \
                                  ATTEND_ABI_AVX2),                                                                   \
                              ATTEND_ABI_FMA),                                                                        \
                          ATTEND_ABI_F16C),                                                                           \
                      ATTEND_ABI_AVX512F),                                                                            \
                  ATTEND_ABI_AVX512DQ),                                                                               \
              ATTEND_ABI_AVX512BW),                                                                                   \
          ATTEND_ABI_AVX512VL),                                                                                       \
      ATTEND_ABI_NEON)
