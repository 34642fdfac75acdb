// attend/detail/avx512/simd.hpp — the kernels' operations (see detail/generic/simd.hpp) on AVX-512 registers: 16
// floats or 8 doubles a packet, 32 registers; loads and stores of a row's last lanes under a mask register.
//
// exp of floats as 2^t, t = x log2(e), carried in two floats: t_hi = x log2(e) rounded, and t_lo, the rounding
// error of that product (exact, by one fma) plus x times the rounding error of log2(e) as a float. With
// f = t_hi - floor(t_hi) in [0, 1) (vreduceps, exact), 2^t = p(f + t_lo) 2^floor(t_hi), p of degree 6 — the
// relative-error minimax (Remez) fit of 2^f on [0, 1], error 1.9e-9, rounded to float — and the power of two applied
// exactly by vscalefps, whose zero mask also flushes the lanes where t_hi is under exp2_underflow: 13 instructions a
// packet, within 0.75 float epsilon of exp(x) over [exp_underflow, 0] (tests/test_masked_softmax.cpp). Without t_lo the
// rounding of t alone would cost up to |x| / 2 ulp, 44 ulp near the underflow. exp of doubles: Cephes' rational
// function as in detail/avx2/simd.hpp, 2^m by vscalefpd.
#pragma once

#include <attend/detail/avx2/simd.hpp>
#include <attend/detail/generic/simd.hpp>
#include <attend/detail/target.hpp>

#ifdef ATTEND_X86_DISPATCH

ATTEND_TARGET_AVX512_BEGIN
namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

// Below this, 2^t is under the smallest normal float.
constexpr float exp2_underflow = -126.0f;

namespace avx512 {

// 2^(t + tail) for a packet of t <= 0 and |tail| <= ulp(t), flushed to 0 where t < exp2_underflow (a NaN stays NaN);
// see the top of this file.
inline __m512 flushed_exp2(__m512 t, __m512 tail) {
  const __mmask16 kept = _mm512_cmp_ps_mask(t, _mm512_set1_ps(exp2_underflow), _CMP_NLT_UQ);
  __m512 f = _mm512_reduce_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);  // t - floor(t), in [0, 1)
  f = _mm512_add_ps(f, tail);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(2.1702256344724447e-4f), f, _mm512_set1_ps(1.243968727067113e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.678840637207031e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5483341217041016e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.24022983014583588f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931470036506653f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(kept, p, t);  // p 2^floor(t)
}

// log2(e) - log2_e: the part of log2(e) that the float log2_e leaves out.
constexpr float log2_e_tail = 1.925963e-8f;

template <class Scalar>
struct Simd;

template <>
struct Simd<float> {
  using Packet = __m512;
  static constexpr Index size = 16;
  static constexpr int registers = 32;
  static constexpr Index tile = 8;  // transposes in 8 x 8 tiles, as avx2's

  static Packet zero() { return _mm512_setzero_ps(); }
  static Packet set1(float s) { return _mm512_set1_ps(s); }
  static Packet load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, Packet v) { _mm512_storeu_ps(p, v); }
  static Packet add(Packet a, Packet b) { return _mm512_add_ps(a, b); }
  static Packet sub(Packet a, Packet b) { return _mm512_sub_ps(a, b); }
  static Packet mul(Packet a, Packet b) { return _mm512_mul_ps(a, b); }
  static Packet div(Packet a, Packet b) { return _mm512_div_ps(a, b); }
  static Packet max(Packet a, Packet b) { return _mm512_max_ps(a, b); }
  static Packet madd(Packet a, Packet b, Packet c) { return _mm512_fmadd_ps(a, b, c); }

  // lanes j + (j + 8), then avx2's order on the 8 sums
  static float reduce_add(Packet v) {
    return avx2::Simd<float>::reduce_add(
        _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
  }
  static float reduce_max(Packet v) {
    return avx2::Simd<float>::reduce_max(
        _mm256_max_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
  }

  static __mmask16 first_lanes(Index n) { return static_cast<__mmask16>((1u << n) - 1u); }
  static Packet load_first(const float* p, Index n) { return _mm512_maskz_loadu_ps(first_lanes(n), p); }
  static Packet zero_where_zero(Packet p, Packet v) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(p, zero(), _CMP_NEQ_UQ), v);
  }
  static void store_first(float* p, Packet v, Index n) { _mm512_mask_storeu_ps(p, first_lanes(n), v); }

  static Packet exp(Packet x) {
    const Packet t = mul(x, set1(log2_e));                     // x log2(e), rounded
    Packet tail = _mm512_fmsub_ps(x, set1(log2_e), t);         // that rounding's error, exactly
    tail = _mm512_fmadd_ps(x, set1(log2_e_tail), tail);        // and log2_e's own, times x
    return flushed_exp2(t, tail);
  }

  static void transpose_tile(const float* A, Index lda, float* B, Index ldb) {
    avx2::Simd<float>::transpose_tile(A, lda, B, ldb);
  }

  // 16 rows at a time as a transposed tree, in reduce_add's order: 15 adds and 31 shuffles where 16 reductions take
  // 128 instructions and their latencies.
  static void reduce_add_rows(const float* partial, Index rows, float* sums) {
    Index r = 0;
    for (; r + 16 <= rows; r += 16) {
      const float* p = partial + r * 16;
      __m512 half[8], quarter[4], eighth[2];
      for (int k = 0; k < 8; ++k) {  // rows 2k, 2k + 1: lanes j + (j + 8), j < 8, in 256-bit halves
        const __m512 a = _mm512_loadu_ps(p + 32 * k), b = _mm512_loadu_ps(p + 32 * k + 16);
        half[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                                _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
      }
      for (int k = 0; k < 4; ++k)  // rows 4k .. 4k + 3, one per 128-bit lane: j + (j + 4), j < 4
        quarter[k] = _mm512_add_ps(_mm512_shuffle_f32x4(half[2 * k], half[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(half[2 * k], half[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
      for (int k = 0; k < 2; ++k)  // lane c: rows 8k + c and 8k + c + 4, two entries each: j + (j + 2), j < 2
        eighth[k] = _mm512_add_ps(_mm512_shuffle_ps(quarter[2 * k], quarter[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_ps(quarter[2 * k], quarter[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
      // element 4c + q: row c + 4q (0 + 1); the permutation puts row i at element i
      const __m512 sum = _mm512_add_ps(_mm512_shuffle_ps(eighth[0], eighth[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_ps(eighth[0], eighth[1], _MM_SHUFFLE(3, 1, 3, 1)));
      const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
      _mm512_storeu_ps(sums + r, _mm512_permutexvar_ps(order, sum));
    }
    for (; r < rows; ++r) sums[r] = reduce_add(load(partial + r * size));
  }
};

template <>
struct Simd<double> {
  using Packet = __m512d;
  static constexpr Index size = 8;
  static constexpr int registers = 32;
  static constexpr Index tile = 4;

  static Packet zero() { return _mm512_setzero_pd(); }
  static Packet set1(double s) { return _mm512_set1_pd(s); }
  static Packet load(const double* p) { return _mm512_loadu_pd(p); }
  static void store(double* p, Packet v) { _mm512_storeu_pd(p, v); }
  static Packet add(Packet a, Packet b) { return _mm512_add_pd(a, b); }
  static Packet sub(Packet a, Packet b) { return _mm512_sub_pd(a, b); }
  static Packet mul(Packet a, Packet b) { return _mm512_mul_pd(a, b); }
  static Packet div(Packet a, Packet b) { return _mm512_div_pd(a, b); }
  static Packet max(Packet a, Packet b) { return _mm512_max_pd(a, b); }
  static Packet madd(Packet a, Packet b, Packet c) { return _mm512_fmadd_pd(a, b, c); }

  static double reduce_add(Packet v) {
    return avx2::Simd<double>::reduce_add(_mm256_add_pd(_mm512_castpd512_pd256(v), _mm512_extractf64x4_pd(v, 1)));
  }
  static double reduce_max(Packet v) {
    return avx2::Simd<double>::reduce_max(_mm256_max_pd(_mm512_castpd512_pd256(v), _mm512_extractf64x4_pd(v, 1)));
  }

  static __mmask8 first_lanes(Index n) { return static_cast<__mmask8>((1u << n) - 1u); }
  static Packet load_first(const double* p, Index n) { return _mm512_maskz_loadu_pd(first_lanes(n), p); }
  static Packet zero_where_zero(Packet p, Packet v) {
    return _mm512_maskz_mov_pd(_mm512_cmp_pd_mask(p, zero(), _CMP_NEQ_UQ), v);
  }
  static void store_first(double* p, Packet v, Index n) { _mm512_mask_storeu_pd(p, first_lanes(n), v); }

  static Packet exp(Packet x) {
    const __mmask8 kept = _mm512_cmp_pd_mask(x, set1(exp_underflow<double>()), _CMP_NLT_UQ);
    const Packet m = _mm512_roundscale_pd(madd(x, set1(1.4426950408889634073599), set1(0.5)),
                                          _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    Packet r = _mm512_fnmadd_pd(m, set1(0.693145751953125), x);
    r = _mm512_fnmadd_pd(m, set1(1.42860682030941723212e-6), r);
    const Packet r2 = mul(r, r);
    Packet p = madd(set1(1.26177193074810590878e-4), r2, set1(3.02994407707441961300e-2));
    p = mul(madd(p, r2, set1(9.99999999999999999910e-1)), r);
    Packet q = madd(set1(3.00198505138664455042e-6), r2, set1(2.52448340349684104192e-3));
    q = madd(q, r2, set1(2.27265548208155028766e-1));
    q = madd(q, r2, set1(2.00000000000000000009e0));
    const Packet y = madd(set1(2.0), _mm512_div_pd(p, sub(q, p)), set1(1.0));
    return _mm512_maskz_scalef_pd(kept, y, m);
  }

  static void transpose_tile(const double* A, Index lda, double* B, Index ldb) {
    avx2::Simd<double>::transpose_tile(A, lda, B, ldb);
  }

  static void reduce_add_rows(const double* partial, Index rows, double* sums) {
    for (Index r = 0; r < rows; ++r) sums[r] = reduce_add(load(partial + r * size));
  }
};

}  // namespace avx512
}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
ATTEND_TARGET_END

#endif  // ATTEND_X86_DISPATCH
