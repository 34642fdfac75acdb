// attend/detail/generic/simd.hpp — the operations attend's kernels are written in, on Eigen's packets.
//
// The generic level (attend/isa.hpp): Eigen's packet of Scalar at the flags the including file is compiled with (4
// floats with SSE2, x86-64's baseline; NEON on AArch64; 16 floats in a -march=native build on an AVX-512 CPU), so it
// runs wherever Eigen does. The avx2 and avx512 levels (detail/avx2/simd.hpp, detail/avx512/simd.hpp) offer the same
// operations on their own registers; the kernels (detail/kernels/) are compiled once per level against them.
//
//   Simd<Scalar>::Packet, size              the register and its number of lanes
//   registers                               vector registers the compiler can allocate (for register blocking)
//   zero(), set1(s), load(p), store(p, v)   unaligned loads and stores
//   load_first(p, n), store_first(p, v, n)  lanes [0, n) only, 0 <= n < size: nothing past p + n is touched
//   add, sub, mul, max, madd(a, b, c)       madd = a * b + c (fused where the level has FMA)
//   zero_where_zero(p, v)                   v, with +0 in the lanes where p == 0 (+0 or -0; a NaN p keeps v)
//   reduce_add(v), reduce_max(v)            over the lanes, in a fixed order
//   exp(x)                                  exp(x) for x <= 0 or NaN, 0 where x < exp_underflow<Scalar>()
//   transpose_tile(A, lda, B, ldb)          B (tile, tile) = A (tile, tile)^T
//   reduce_add_rows(partial, rows, sums)    sums[r] = reduce_add(row r of partial (rows, size))
#pragma once

#include <attend/tensor.hpp>

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

// The value d2l writes over masked scores.
template <class Scalar>
constexpr Scalar masked_score() {
  return Scalar(-1e6);
}

// Below this, exp(x) is under the smallest normal number of Scalar: every level's exp returns 0 there (Eigen's
// vectorised exp clamps such x and returns a tiny positive value, where the exact result rounds to 0 or a
// subnormal), so that a masked key's weight is exactly 0 (as in PyTorch), at an absolute cost below 1.2e-38 (float)
// or 2.3e-308 (double).
template <class Scalar>
constexpr Scalar exp_underflow() {
  return std::is_same<Scalar, float>::value ? Scalar(-87.33654) : Scalar(-708.3964185322641);
}

// log2(e), rounded to float: the exponentials' change of base.
constexpr float log2_e = 1.44269504088896341f;

namespace generic {

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"  // PacketBlock<__m512>: a vector type's alignment attribute
#endif

template <class Scalar>
struct Simd {
  using Packet = typename Eigen::internal::packet_traits<Scalar>::type;
  static constexpr Index size = Eigen::internal::packet_traits<Scalar>::size;
  static constexpr int registers = EIGEN_ARCH_DEFAULT_NUMBER_OF_REGISTERS;
  static constexpr Index tile = size;

  static Packet zero() { return Eigen::internal::pset1<Packet>(Scalar(0)); }
  static Packet set1(Scalar s) { return Eigen::internal::pset1<Packet>(s); }
  static Packet load(const Scalar* p) { return Eigen::internal::ploadu<Packet>(p); }
  static void store(Scalar* p, const Packet& v) { Eigen::internal::pstoreu(p, v); }
  static Packet add(const Packet& a, const Packet& b) { return Eigen::internal::padd(a, b); }
  static Packet sub(const Packet& a, const Packet& b) { return Eigen::internal::psub(a, b); }
  static Packet mul(const Packet& a, const Packet& b) { return Eigen::internal::pmul(a, b); }
  static Packet div(const Packet& a, const Packet& b) { return Eigen::internal::pdiv(a, b); }
  static Packet max(const Packet& a, const Packet& b) { return Eigen::internal::pmax(a, b); }
  static Packet madd(const Packet& a, const Packet& b, const Packet& c) { return Eigen::internal::pmadd(a, b, c); }
  static Packet zero_where_zero(const Packet& p, const Packet& v) {
    return Eigen::internal::pselect(Eigen::internal::pcmp_eq(p, zero()), zero(), v);
  }
  static Scalar reduce_add(const Packet& v) { return Eigen::internal::predux(v); }
  static Scalar reduce_max(const Packet& v) { return Eigen::internal::predux_max(v); }

  // Eigen 3.4 loads and stores float packets of 8 (AVX) and 16 (AVX-512) under a mask of lanes; other packets go
  // through a copy (a loop, not std::copy, which calls memmove: at rows of 4 keys the call costs more than the rest).
  static constexpr bool masked = std::is_same<Scalar, float>::value && (size == 8 || size == 16);
  using Lanes = std::conditional_t<size == 16, std::uint16_t, std::uint8_t>;
  static Packet load_first(const Scalar* p, Index n) {
    if constexpr (masked) {
      return Eigen::internal::ploadu<Packet>(p, static_cast<Lanes>((1u << n) - 1u));
    } else {
      Scalar lanes[size];
      for (Index t = 0; t < size; ++t) lanes[t] = t < n ? p[t] : Scalar(0);
      return load(lanes);
    }
  }
  static void store_first(Scalar* p, const Packet& v, Index n) {
    if constexpr (masked) {
      Eigen::internal::pstoreu(p, v, static_cast<Lanes>((1u << n) - 1u));
    } else {
      Scalar lanes[size];
      store(lanes, v);
      for (Index t = 0; t < n; ++t) p[t] = lanes[t];
    }
  }

  // Eigen's pexp, then a select: Eigen's exp is within a few ulp over the whole range, and below the threshold it
  // returns a small positive number where 0 is wanted.
  static Packet exp(const Packet& x) {
    namespace ei = Eigen::internal;
    return ei::pselect(ei::pcmp_lt(x, set1(exp_underflow<Scalar>())), zero(), ei::pexp(x));
  }

  static void transpose_tile(const Scalar* A, Index lda, Scalar* B, Index ldb) {
    if constexpr (size == 1) {
      B[0] = A[0];
    } else {
      Eigen::internal::PacketBlock<Packet> block;  // rows of A
      for (Index r = 0; r < size; ++r) block.packet[r] = load(A + r * lda);
      Eigen::internal::ptranspose(block);  // now rows of B
      for (Index c = 0; c < size; ++c) store(B + c * ldb, block.packet[c]);
    }
  }

  static void reduce_add_rows(const Scalar* partial, Index rows, Scalar* sums) {
    for (Index r = 0; r < rows; ++r) sums[r] = reduce_add(load(partial + r * size));
  }
};

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace generic
}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
