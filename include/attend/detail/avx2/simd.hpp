// attend/detail/avx2/simd.hpp — the kernels' operations (see detail/generic/simd.hpp) on AVX2 + FMA registers: 8
// floats or 4 doubles a packet, 16 registers.
//
// exp: x = m ln 2 + r with m = floor(x log2(e) + 1/2), |r| <= ln(2) / 2, ln 2 subtracted in two parts (Cody and
// Waite) so that r is exact to float's precision; exp(r) by Cephes' polynomials (S. Moshier): for float 1 + r + r^2
// p(r), p of degree 5; for double the rational 1 + 2 r P(r^2) / (Q(r^2) - r P(r^2)); then 2^m built in the exponent
// field (m >= -126, resp. -1022, once the lanes below exp_underflow are flushed: always a normal number).
#pragma once

#include <attend/detail/generic/simd.hpp>
#include <attend/detail/target.hpp>

#ifdef ATTEND_X86_DISPATCH

ATTEND_TARGET_AVX2_BEGIN
namespace attend {
inline namespace ATTEND_ABI {
namespace detail {
namespace avx2 {

template <class Scalar>
struct Simd;

template <>
struct Simd<float> {
  using Packet = __m256;
  static constexpr Index size = 8;
  static constexpr int registers = 16;
  static constexpr Index tile = 8;

  static Packet zero() { return _mm256_setzero_ps(); }
  static Packet set1(float s) { return _mm256_set1_ps(s); }
  static Packet load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, Packet v) { _mm256_storeu_ps(p, v); }
  static Packet add(Packet a, Packet b) { return _mm256_add_ps(a, b); }
  static Packet sub(Packet a, Packet b) { return _mm256_sub_ps(a, b); }
  static Packet mul(Packet a, Packet b) { return _mm256_mul_ps(a, b); }
  static Packet div(Packet a, Packet b) { return _mm256_div_ps(a, b); }
  static Packet max(Packet a, Packet b) { return _mm256_max_ps(a, b); }
  static Packet madd(Packet a, Packet b, Packet c) { return _mm256_fmadd_ps(a, b, c); }

  // lanes j + (j + 4), then j + (j + 2), then j + (j + 1): Eigen's order for its AVX packets
  static float reduce_add(Packet v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
  }
  static float reduce_max(Packet v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_shuffle_ps(s, s, 1)));
  }

  static __m256i first_lanes(Index n) {  // all ones in lanes [0, n)
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static Packet load_first(const float* p, Index n) { return _mm256_maskload_ps(p, first_lanes(n)); }
  static Packet zero_where_zero(Packet p, Packet v) {
    return _mm256_andnot_ps(_mm256_cmp_ps(p, zero(), _CMP_EQ_OQ), v);  // ~(p == 0) & v
  }
  static void store_first(float* p, Packet v, Index n) { _mm256_maskstore_ps(p, first_lanes(n), v); }

  static Packet exp(Packet x) {
    const Packet flushed = _mm256_cmp_ps(x, set1(exp_underflow<float>()), _CMP_LT_OQ);  // NaN: not flushed
    const Packet m = _mm256_floor_ps(madd(x, set1(log2_e), set1(0.5f)));
    Packet r = madd(m, set1(-0.693359375f), x);
    r = madd(m, set1(2.12194440e-4f), r);
    const Packet r2 = mul(r, r), r3 = mul(r2, r);
    Packet y = madd(set1(1.9875691500E-4f), r, set1(1.3981999507E-3f));
    Packet y1 = madd(set1(4.1665795894E-2f), r, set1(1.6666665459E-1f));
    const Packet y2 = add(r, set1(1.0f));
    y = madd(y, r, set1(8.3334519073E-3f));
    y1 = madd(y1, r, set1(5.0000001201E-1f));
    y = madd(y, r3, y1);
    y = madd(y, r2, y2);
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(m), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(flushed, mul(y, _mm256_castsi256_ps(e)));
  }

  static void transpose_tile(const float* A, Index lda, float* B, Index ldb) {
    __m256 r[8], t[8];
    for (int i = 0; i < 8; ++i) r[i] = load(A + i * lda);
    for (int i = 0; i < 8; i += 2) {
      t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4)
      for (int k = 0; k < 2; ++k) {
        r[i + k] = _mm256_shuffle_ps(t[i + k], t[i + k + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + k + 2] = _mm256_shuffle_ps(t[i + k], t[i + k + 2], _MM_SHUFFLE(3, 2, 3, 2));
      }
    // r[k] holds columns c and c + 4 of rows 0-3 (one per 128-bit half), r[k + 4] those of rows 4-7
    for (int c = 0; c < 4; ++c) {
      const int k = c == 0 ? 0 : c == 1 ? 2 : c == 2 ? 1 : 3;
      store(B + c * ldb, _mm256_permute2f128_ps(r[k], r[k + 4], 0x20));
      store(B + (c + 4) * ldb, _mm256_permute2f128_ps(r[k], r[k + 4], 0x31));
    }
  }

  static void reduce_add_rows(const float* partial, Index rows, float* sums) {
    for (Index r = 0; r < rows; ++r) sums[r] = reduce_add(load(partial + r * size));
  }
};

template <>
struct Simd<double> {
  using Packet = __m256d;
  static constexpr Index size = 4;
  static constexpr int registers = 16;
  static constexpr Index tile = 4;

  static Packet zero() { return _mm256_setzero_pd(); }
  static Packet set1(double s) { return _mm256_set1_pd(s); }
  static Packet load(const double* p) { return _mm256_loadu_pd(p); }
  static void store(double* p, Packet v) { _mm256_storeu_pd(p, v); }
  static Packet add(Packet a, Packet b) { return _mm256_add_pd(a, b); }
  static Packet sub(Packet a, Packet b) { return _mm256_sub_pd(a, b); }
  static Packet mul(Packet a, Packet b) { return _mm256_mul_pd(a, b); }
  static Packet div(Packet a, Packet b) { return _mm256_div_pd(a, b); }
  static Packet max(Packet a, Packet b) { return _mm256_max_pd(a, b); }
  static Packet madd(Packet a, Packet b, Packet c) { return _mm256_fmadd_pd(a, b, c); }

  static double reduce_add(Packet v) {  // j + (j + 2), then j + (j + 1)
    const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
  }
  static double reduce_max(Packet v) {
    const __m128d s = _mm_max_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_max_sd(s, _mm_unpackhi_pd(s, s)));
  }

  static __m256i first_lanes(Index n) {
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3));
  }
  static Packet load_first(const double* p, Index n) { return _mm256_maskload_pd(p, first_lanes(n)); }
  static Packet zero_where_zero(Packet p, Packet v) {
    return _mm256_andnot_pd(_mm256_cmp_pd(p, zero(), _CMP_EQ_OQ), v);  // ~(p == 0) & v
  }
  static void store_first(double* p, Packet v, Index n) { _mm256_maskstore_pd(p, first_lanes(n), v); }

  static Packet exp(Packet x) {
    const Packet flushed = _mm256_cmp_pd(x, set1(exp_underflow<double>()), _CMP_LT_OQ);
    const Packet m = _mm256_floor_pd(madd(x, set1(1.4426950408889634073599), set1(0.5)));
    Packet r = _mm256_fnmadd_pd(m, set1(0.693145751953125), x);
    r = _mm256_fnmadd_pd(m, set1(1.42860682030941723212e-6), r);
    const Packet r2 = mul(r, r);
    Packet p = madd(set1(1.26177193074810590878e-4), r2, set1(3.02994407707441961300e-2));
    p = mul(madd(p, r2, set1(9.99999999999999999910e-1)), r);
    Packet q = madd(set1(3.00198505138664455042e-6), r2, set1(2.52448340349684104192e-3));
    q = madd(q, r2, set1(2.27265548208155028766e-1));
    q = madd(q, r2, set1(2.00000000000000000009e0));
    const Packet y = madd(set1(2.0), _mm256_div_pd(p, sub(q, p)), set1(1.0));
    // 2^m: m + 2^52 + 2^51 holds m in its low bits (exact for |m| < 2^51); add the bias, shift into the exponent
    const Packet shifter = set1(6755399441055744.0);
    const __m256i bits = _mm256_sub_epi64(_mm256_castpd_si256(_mm256_add_pd(m, shifter)), _mm256_castpd_si256(shifter));
    const __m256i e = _mm256_slli_epi64(_mm256_add_epi64(bits, _mm256_set1_epi64x(1023)), 52);
    return _mm256_andnot_pd(flushed, mul(y, _mm256_castsi256_pd(e)));
  }

  static void transpose_tile(const double* A, Index lda, double* B, Index ldb) {
    const __m256d r0 = load(A), r1 = load(A + lda), r2 = load(A + 2 * lda), r3 = load(A + 3 * lda);
    const __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1);  // (00 10 02 12), (01 11 03 13)
    const __m256d t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);  // (20 30 22 32), (21 31 23 33)
    store(B, _mm256_permute2f128_pd(t0, t2, 0x20));
    store(B + ldb, _mm256_permute2f128_pd(t1, t3, 0x20));
    store(B + 2 * ldb, _mm256_permute2f128_pd(t0, t2, 0x31));
    store(B + 3 * ldb, _mm256_permute2f128_pd(t1, t3, 0x31));
  }

  static void reduce_add_rows(const double* partial, Index rows, double* sums) {
    for (Index r = 0; r < rows; ++r) sums[r] = reduce_add(load(partial + r * size));
  }
};

}  // namespace avx2
}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
ATTEND_TARGET_END

#endif  // ATTEND_X86_DISPATCH
