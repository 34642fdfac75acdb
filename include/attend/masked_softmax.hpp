// attend/masked_softmax.hpp — softmax over the last axis after d2l's masking.
//
// masked_softmax(X, mask): X (batch, queries, keys) -> weights (batch, queries, keys).
// The mask is a Mask or anything that converts to one (a ValidLens); see mask.hpp for its parts and rules.
// Scores of masked keys are *replaced* by -1e6 before the softmax (d2l's sequence_mask(..., value=-1e6)), so a query
// that sees no key gets uniform weights 1/keys, exactly as the seed's code (FullyMasked::uniform), or a row of
// zeros (FullyMasked::zero).
#pragma once

#include <algorithm>
#include <attend/mask.hpp>
#include <attend/tensor.hpp>
#include <attend/valid_lens.hpp>
#include <cstdint>
#include <limits>
#include <tuple>
#include <type_traits>

namespace attend {
namespace detail {

// The value d2l writes over masked scores.
template <class Scalar>
constexpr Scalar masked_score() {
  return Scalar(-1e6);
}

// Below this, exp(x) is under the smallest normal number of Scalar; Eigen's vectorised exp clamps such x and
// returns a tiny positive value, where the exact result rounds to 0 or a subnormal. We return 0, so that a masked
// key's weight is exactly 0 (as in PyTorch), at an absolute cost below 1.2e-38 (float) or 2.3e-308 (double).
template <class Scalar>
constexpr Scalar exp_underflow() {
  return std::is_same<Scalar, float>::value ? Scalar(-87.33654) : Scalar(-708.3964185322641);
}

// log2(e), rounded to float: the exponentials' change of base.
constexpr float log2_e = 1.44269504088896341f;

// exp(x) for a packet of x <= 0, flushed to 0 in the lanes where x < exp_underflow (a NaN stays NaN): Eigen's pexp,
// then a select. For AVX-512 floats, Eigen's own AVX-512 pexp less the steps that change nothing on that range — the
// clamp of x to [-88.38, 88.38] and the final max with x — with 2^m applied by one vscalefps instead of built from
// exponent bits and multiplied (exact either way: 2^m is a normal number for m >= -126): the same bits as Eigen's pexp
// for every lane kept, in 15 instructions instead of 21 (tests/test_masked_softmax.cpp compares the two over the whole
// range); and the flush done by that vscalefps's zero mask, one compare into a mask register, where g++ made three
// instructions of the select. The polynomial is Cephes' expf (S. Moshier), as in Eigen.
template <class Packet>
Packet flushed_exp_packet(const Packet& x) {
  namespace ei = Eigen::internal;
  using Scalar = typename ei::unpacket_traits<Packet>::type;
#ifdef EIGEN_VECTORIZE_AVX512
  if constexpr (std::is_same<Scalar, float>::value && ei::unpacket_traits<Packet>::size == 16) {  // Packet16f
    const __mmask16 kept = _mm512_cmp_ps_mask(x, ei::pset1<Packet>(exp_underflow<float>()), _CMP_NLT_UQ);
    // x = m ln 2 + r, m = floor(x log2(e) + 1/2), |r| <= ln(2) / 2; exp(x) = 2^m exp(r)
    const Packet m = ei::pfloor(ei::pmadd(x, ei::pset1<Packet>(log2_e), ei::pset1<Packet>(0.5f)));
    const Packet r = _mm512_fmadd_ps(m, ei::pset1<Packet>(-0.6931471805599453f), x);
    const Packet r2 = ei::pmul(r, r), r3 = ei::pmul(r2, r);
    // exp(r) = 1 + r + r^2 (p5 + p4 r + ... + p0 r^5), two chains for instruction-level parallelism
    Packet y = ei::pmadd(ei::pset1<Packet>(1.9875691500E-4f), r, ei::pset1<Packet>(1.3981999507E-3f));
    Packet y1 = ei::pmadd(ei::pset1<Packet>(4.1665795894E-2f), r, ei::pset1<Packet>(1.6666665459E-1f));
    const Packet y2 = ei::padd(r, ei::pset1<Packet>(1.0f));
    y = ei::pmadd(y, r, ei::pset1<Packet>(8.3334519073E-3f));
    y1 = ei::pmadd(y1, r, ei::pset1<Packet>(5.0000001201E-1f));
    y = ei::pmadd(y, r3, y1);
    y = ei::pmadd(y, r2, y2);
    return _mm512_maskz_scalef_ps(kept, y, m);
  }
#endif
  const Packet underflow = ei::pset1<Packet>(exp_underflow<Scalar>());
  return ei::pselect(ei::pcmp_lt(x, underflow), ei::pset1<Packet>(Scalar(0)), ei::pexp(x));
}

// Whether exp_shifted can take exp(x) as 2^(x log2 e) (flushed_exp2_packet): floats with AVX-512 DQ, whose vreduceps
// and vscalefps split 2^t into a polynomial on [0, 1) and an exact power of two, in 10 instructions a packet against
// flushed_exp_packet's 15. The product x log2(e) is rounded, which adds a relative error of up to |x| / 2 ulp to
// exp(x): more than Eigen's exp far from 0; but in a softmax, where x = s - max <= 0 and the largest entry is 1, an
// entry's error is then under |x| exp(x) / 2 ulp of 1, at most 0.19 ulp, and the sum keeps float's accuracy.
template <class Scalar>
constexpr bool exp_via_exp2 =
#ifdef EIGEN_VECTORIZE_AVX512DQ  // vreduceps is AVX-512 DQ's (every AVX-512 CPU since Skylake-SP has it)
    std::is_same<Scalar, float>::value;
#else
    false;
#endif

// Below this, 2^t is under the smallest normal float.
constexpr float exp2_underflow = -126.0f;

#ifdef EIGEN_VECTORIZE_AVX512DQ
// 2^t for a packet of 16 floats t <= 0, flushed to 0 in the lanes where t < exp2_underflow (a NaN stays NaN), so
// never a subnormal: with f = t - floor(t) in [0, 1) (vreduceps, exact), 2^t = p(f) 2^floor(t), p a degree-6
// polynomial for 2^f and the power of two applied by vscalefps, exactly. p's coefficients: the relative-error minimax
// (Remez) fit of 2^f on [0, 1], error 1.9e-9, rounded to float; evaluated in float, a relative error within 0.71
// float epsilon of 2^t over the whole range (tests/test_masked_softmax.cpp measures it).
inline Eigen::internal::Packet16f flushed_exp2_packet(const Eigen::internal::Packet16f& t) {
  namespace ei = Eigen::internal;
  using Packet = ei::Packet16f;
  const __mmask16 kept = _mm512_cmp_ps_mask(t, ei::pset1<Packet>(exp2_underflow), _CMP_NLT_UQ);
  const Packet f = _mm512_reduce_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);  // t - floor(t), in [0, 1)
  Packet p = ei::pmadd(ei::pset1<Packet>(2.1702256344724447e-4f), f, ei::pset1<Packet>(1.243968727067113e-3f));
  p = ei::pmadd(p, f, ei::pset1<Packet>(9.678840637207031e-3f));
  p = ei::pmadd(p, f, ei::pset1<Packet>(5.5483341217041016e-2f));
  p = ei::pmadd(p, f, ei::pset1<Packet>(0.24022983014583588f));
  p = ei::pmadd(p, f, ei::pset1<Packet>(0.6931470036506653f));
  p = ei::pmadd(p, f, ei::pset1<Packet>(1.0f));
  return _mm512_maskz_scalef_ps(kept, p, t);  // p 2^floor(t)
}
#endif

// exp(x) for a packet of x <= 0, flushed to 0 near exp_underflow: flushed_exp_packet, or with ViaExp2 (only where
// exp_via_exp2 holds) 2^(x log2 e), flushed where x log2(e) < exp2_underflow.
template <bool ViaExp2, class Packet>
Packet flushed_exp_packet_by(const Packet& x) {
#ifdef EIGEN_VECTORIZE_AVX512DQ
  if constexpr (ViaExp2) {
    namespace ei = Eigen::internal;
    return flushed_exp2_packet(ei::pmul(x, ei::pset1<Packet>(log2_e)));  // t = x log2(e)
  }
#endif
  return flushed_exp_packet(x);
}

// max_j row[j] over n >= 1 entries, contiguous: two chains of packets, then the last n % size entries one by one.
// Exact, so the same value as Eigen's maxCoeff; but that ran the last steps of a row segment as a scalar chain through
// the stack (a fifth of the tiled kernel's own time at heads of 32). A NaN entry is skipped or kept as Eigen's pmax
// does (it keeps a NaN of the running maximum, skips one of the new packet); either way it makes its own exp NaN, and
// so the row's sum and output. Entries all NaN or -inf may give -inf: callers check for it.
template <class Scalar>
Scalar row_max(const Scalar* row, Index n) {
  namespace ei = Eigen::internal;
  using Packet = typename ei::packet_traits<Scalar>::type;
  constexpr Index size = ei::packet_traits<Scalar>::size;
  Scalar largest = -std::numeric_limits<Scalar>::infinity();
  Index j = 0;
  if (n >= size) {
    Packet max0 = ei::ploadu<Packet>(row), max1 = max0;
    for (j = size; j + 2 * size <= n; j += 2 * size) {
      max0 = ei::pmax(max0, ei::ploadu<Packet>(row + j));
      max1 = ei::pmax(max1, ei::ploadu<Packet>(row + j + size));
    }
    if (j + size <= n) {
      max0 = ei::pmax(max0, ei::ploadu<Packet>(row + j));
      j += size;
    }
    largest = ei::predux_max(ei::pmax(max0, max1));
  }
  for (; j < n; ++j) largest = largest < row[j] ? row[j] : largest;
  return largest;
}

// exp_shifted's pass over whole packets: row[j] = exp(row[j] - m) for j < n, n a multiple of the packet size, shift
// a packet of m. Returns the packet of partial sums: lane t the sum of the new row[j] over j = t mod size, in order.
template <bool ViaExp2, class Scalar, class Packet>
Packet exp_shifted_packets(Scalar* row, Index n, const Packet& shift) {
  namespace ei = Eigen::internal;
  constexpr Index size = ei::unpacket_traits<Packet>::size;
  Packet sum = ei::pset1<Packet>(Scalar(0));
  for (Index j = 0; j < n; j += size) {
    const Packet e = flushed_exp_packet_by<ViaExp2>(ei::psub(ei::ploadu<Packet>(row + j), shift));
    ei::pstoreu(row + j, e);
    sum = ei::padd(sum, e);
  }
  return sum;
}

// row[j] = exp(row[j] - m), flushed to 0 where row[j] - m < exp_underflow; returns the sum of the new row[j].
// row: (n), contiguous. One pass over Eigen's packets (its vectorised exp), the last one partial: a short row (the
// seed's have 4 keys) costs one packet exp, not n calls of std::exp. Eigen 3.4's select() has no packet path, so the
// same expression written with arrays would call std::exp element by element, several times slower.
// With ViaExp2 (where exp_via_exp2<Scalar> holds), each exp as 2^((row[j] - m) log2 e): see exp_via_exp2.
template <class Scalar, bool ViaExp2 = false>
Scalar exp_shifted(Scalar* row, Index n, Scalar m) {
  static_assert(!ViaExp2 || exp_via_exp2<Scalar>, "exp through exp2 needs AVX-512 floats");
  namespace ei = Eigen::internal;
  using Packet = typename ei::packet_traits<Scalar>::type;
  constexpr Index size = ei::packet_traits<Scalar>::size;
  const Packet shift = ei::pset1<Packet>(m);
  const Index j = n / size * size;
  Scalar total = ei::predux(exp_shifted_packets<ViaExp2>(row, j, shift));
  if (j < n) {  // the last n - j < size entries, through one packet of which the lanes past n are ignored
    const Index tail = n - j;
    Scalar lanes[size];
    // Eigen 3.4 loads and stores float packets of 8 (AVX) and 16 (AVX-512) under a mask of lanes
    if constexpr (std::is_same<Scalar, float>::value && (size == 8 || size == 16)) {
      using Lanes = std::conditional_t<size == 16, std::uint16_t, std::uint8_t>;
      const auto used = static_cast<Lanes>((1u << tail) - 1u);
      const Packet e = flushed_exp_packet_by<ViaExp2>(ei::psub(ei::ploadu<Packet>(row + j, used), shift));
      ei::pstoreu(row + j, e, used);
      ei::pstoreu(lanes, e);
    } else {  // a loop, not std::copy, which calls memmove: at the seed's rows of 4 keys the call cost more than the rest
      for (Index t = 0; t < size; ++t) lanes[t] = t < tail ? row[j + t] : Scalar(0);
      ei::pstoreu(lanes, flushed_exp_packet_by<ViaExp2>(ei::psub(ei::ploadu<Packet>(lanes), shift)));
      for (Index t = 0; t < tail; ++t) row[j + t] = lanes[t];
    }
    for (Index t = 0; t < tail; ++t) total += lanes[t];
  }
  return total;
}

// Step 0 of masked_softmax_row below, in place: keys >= prefix are replaced by -1e6; with a keep row, so are the keys
// j < prefix where keep[j] is false. Returns false when no key is left and rule is FullyMasked::zero: the row then
// needs no softmax (it is to be 0).
template <class Scalar>
bool mask_scores_row(Scalar* row, Index num_keys, Index prefix, const bool* keep, FullyMasked rule) {
  Eigen::Map<Eigen::Array<Scalar, 1, Eigen::Dynamic>> r(row, num_keys);
  if (prefix < num_keys) r.tail(num_keys - prefix).setConstant(masked_score<Scalar>());
  bool sees_a_key = prefix > 0;
  if (keep != nullptr) {
    sees_a_key = false;
    for (Index j = 0; j < std::min(prefix, num_keys); ++j) {
      if (keep[j]) {
        sees_a_key = true;
      } else {
        row[j] = masked_score<Scalar>();
      }
    }
  }
  return sees_a_key || rule != FullyMasked::zero;
}

// One row of scores, in place:
//   0. keys >= prefix are replaced by -1e6; with a keep row, so are the keys j < prefix where keep[j] is false;
//      if no key is left and rule is FullyMasked::zero, the row becomes 0 and we stop;
//   1. m = max_j row[j]          2. row[j] = exp(row[j] - m)          3. row[j] /= sum_j row[j]
// row: (num_keys), contiguous; prefix: may exceed num_keys (masks nothing); keep: (num_keys) or null.
template <class Scalar>
void masked_softmax_row(Scalar* row, Index num_keys, Index prefix, const bool* keep = nullptr,
                        FullyMasked rule = FullyMasked::uniform) {
  if (num_keys == 0) return;
  Eigen::Map<Eigen::Array<Scalar, 1, Eigen::Dynamic>> r(row, num_keys);
  if (!mask_scores_row(row, num_keys, prefix, keep, rule)) {
    r.setZero();
    return;
  }
  r *= Scalar(1) / exp_shifted(row, num_keys, row_max(row, num_keys));
}

// Every row of a (queries, keys) block of scores, in place; the block belongs to batch row b of the mask.
// The mask's shape is checked by the caller (Mask::require_shape).
// Rows shorter than a packet (the seed's have 4 keys), when the block is contiguous, go through steps 0 and 1 of
// masked_softmax_row row by row, storing row[j] - m in place, then step 2 as one pass of packets over the whole block,
// then step 3 row by row: one exp for every packet of the block, not one per row, each a chain of dependent
// instructions. The same bits as masked_softmax_row, NaNs aside (any NaN stays NaN, its sign and payload may differ):
// each exp is of the same row[j] - m, each sum over the row in order from 0, as exp_shifted sums a row shorter than a
// packet. A row that the FullyMasked::zero rule empties is
// filled with -inf, whose exp is 0, and keeps that 0 (every other row's sum is at least exp(0) = 1, or NaN).
template <class Derived>
void masked_softmax_block(Eigen::MatrixBase<Derived>& scores, const Mask& mask, Index b) {
  using Scalar = typename Derived::Scalar;
  static_assert(static_cast<int>(Derived::IsRowMajor) == 1, "scores must be row-major");
  const Index num_queries = scores.rows(), num_keys = scores.cols();
  if (num_keys == 0) return;  // nothing to normalise (and no row to point into)
  const auto masking = [&](Index q) {
    return std::make_tuple(mask.visible_prefix(b, q, num_queries, num_keys), mask.keep_row(b, q), mask.fully_masked());
  };
  constexpr Index size = Eigen::internal::packet_traits<Scalar>::size;
  if (num_keys >= size || num_queries <= 1 || scores.derived().outerStride() != num_keys) {  // 0 rows: no data
    for (Index q = 0; q < num_queries; ++q) {
      const auto [prefix, keep, rule] = masking(q);
      masked_softmax_row<Scalar>(&scores.derived().coeffRef(q, 0), num_keys, prefix, keep, rule);
    }
    return;
  }
  Scalar* all = &scores.derived().coeffRef(0, 0);  // (queries, keys), contiguous
  for (Index q = 0; q < num_queries; ++q) {
    Scalar* row = all + q * num_keys;
    const auto [prefix, keep, rule] = masking(q);
    if (!mask_scores_row(row, num_keys, prefix, keep, rule)) {
      std::fill(row, row + num_keys, -std::numeric_limits<Scalar>::infinity());
      continue;
    }
    const Scalar m = row_max(row, num_keys);
    for (Index j = 0; j < num_keys; ++j) row[j] -= m;
  }
  exp_shifted(all, num_queries * num_keys, Scalar(0));
  for (Index q = 0; q < num_queries; ++q) {
    Scalar* row = all + q * num_keys;
    Scalar sum = Scalar(0);
    for (Index j = 0; j < num_keys; ++j) sum += row[j];
    if (sum == Scalar(0)) continue;  // emptied by the rule: already 0
    const Scalar inverse = Scalar(1) / sum;
    for (Index j = 0; j < num_keys; ++j) row[j] *= inverse;
  }
}

}  // namespace detail

// X: (batch, queries, keys) -> (batch, queries, keys)
// mask: none; a ValidLens (batch,) or (batch, queries); or any Mask (see mask.hpp), keep tensor (batch or 1, queries,
// keys).
template <class Scalar>
Tensor3<Scalar> masked_softmax(const Tensor3<Scalar>& X, const Mask& mask = {}) {
  mask.require_shape(X.dimension(0), X.dimension(1), X.dimension(2), "masked_softmax");
  Tensor3<Scalar> weights = X;  // (batch, queries, keys)
  for (Index b = 0; b < X.dimension(0); ++b) {
    auto block = detail::slice(weights, b);  // (queries, keys)
    detail::masked_softmax_block(block, mask, b);
  }
  return weights;
}

}  // namespace attend
