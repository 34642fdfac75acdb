// attend/detail/bf16_products.hpp — Y = X W^T + b with X, W, b and Y in bfloat16: every product and sum in float,
// each output rounded to bfloat16 once. Which kernel takes a product:
//
//   rows                 avx512_bf16                        avx512, avx2                 generic
//   <= in_place_rows     pairs of W in place (vdpbf16ps)    W widened in registers       widened, float kernels
//   more                 widened, float kernels; or packed pairs where they run at the multiply-add's rate (AMD)
//
// (in_place_rows: tuning::bf16_in_place_rows.)
//
// "Widened, float kernels": X, W and b converted to float (exact) and multiplied on the level's float row kernel
// (detail/project_rows.hpp). A product of many rows is bound by arithmetic, and Intel's cores without AMX issue
// vdpbf16ps at half the rate of a 16-lane multiply-add, each doing twice its work: no faster than float, and the
// packed kernel's blocking gets less of it (docs/PERFORMANCE.md, "bfloat16"); AMD's Zen 4 and Zen 5 issue it at the
// multiply-add's rate. A product of a few rows (decoding) is bound by reading W, which the in-place kernels read
// once as stored, at half float's bytes.
//
// The work goes to the threads in pieces fixed by the shapes alone, so the result is the same bits for any number of
// threads.
#pragma once

#include <attend/config.hpp>

#include <attend/detail/avx2/bf16_rows.hpp>
#include <attend/detail/avx512/bf16_rows.hpp>
#include <attend/detail/avx512_bf16/products.hpp>
#include <attend/detail/packet_buffer.hpp>
#include <attend/detail/project_rows.hpp>
#include <attend/detail/tuning.hpp>
#include <attend/isa.hpp>
#include <attend/tensor.hpp>
#include <attend/threads.hpp>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

// to[i] = from[i] as float, i < count: bfloat16 is float's upper 16 bits, so the conversion is exact.
inline void widen(Isa isa, const bfloat16* from, Index count, float* to) {
#ifdef ATTEND_X86_DISPATCH
  if (float_level(isa) == Isa::avx512) return avx512::widen(from, count, to);
  if (isa != Isa::generic) return avx2::widen(from, count, to);
#endif
  static_cast<void>(isa);
  for (Index i = 0; i < count; ++i) to[i] = static_cast<float>(from[i]);
}

// to[i] = from[i] rounded to bfloat16 (to nearest, ties to even), i < count.
inline void narrow(Isa isa, const float* from, Index count, bfloat16* to) {
#ifdef ATTEND_X86_DISPATCH
  if (float_level(isa) == Isa::avx512) return avx512::narrow(from, count, to);
  if (isa != Isa::generic) return avx2::narrow(from, count, to);
#endif
  static_cast<void>(isa);
  for (Index i = 0; i < count; ++i) to[i] = bfloat16(from[i]);
}

// Whether this CPU's vdpbf16ps multiplies at least as fast as its float multiply-adds: AMD's (Zen 4 and later).
// Asked of the CPU once.
inline bool pairs_at_full_rate() {
#ifdef ATTEND_X86_DISPATCH
  static const bool amd = [] {
    unsigned int a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
    return b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;  // "Auth" "enti" "cAMD"
  }();
  return amd;
#else
  return false;
#endif
}

// Y (rows, out), rows ldy apart, = X (rows, in) W^T + bias on the packed pairs of AVX512-BF16 (avx512_bf16 only):
// W packed once per call, then chunks of rows by groups of panels. bias: (out) in float, or null.
inline void packed_pairs_product(const bfloat16* X, Index ldx, Index rows, Index in, const bfloat16* W, Index out,
                                 const float* bias, bfloat16* Y, Index ldy) {
#ifdef ATTEND_X86_DISPATCH
  namespace kernel = avx512_bf16;
  constexpr Index group = tuning::bf16_panel_group;  // panels a piece of work takes
  const Index panels = (out + kernel::panel_columns - 1) / kernel::panel_columns;
  const Index groups = (panels + group - 1) / group;
  const Index panel_size = kernel::pairs_of(in) * kernel::panel_columns;
  const std::unique_ptr<std::uint32_t[]> packed(new std::uint32_t[static_cast<std::size_t>(panels * panel_size)]);
  parallel_for(groups, static_cast<double>(in) * static_cast<double>(out) * tuning::elementwise_work,
               [&](Index g, int) {
                 kernel::pack_pairs(W, in, out, in, g * group, std::min(group, panels - g * group), packed.get());
               });
  const Index chunks = (rows + tuning::rows_per_chunk - 1) / tuning::rows_per_chunk;
  const double work = static_cast<double>(rows) * static_cast<double>(in) * static_cast<double>(out);
  parallel_for(chunks * groups, work, [&](Index item, int) {
    const Index r0 = item / groups * tuning::rows_per_chunk, g = item % groups;
    const Index c0 = g * group * kernel::panel_columns;
    kernel::times_packed(X + r0 * ldx, ldx, std::min(tuning::rows_per_chunk, rows - r0), in,
                         packed.get() + g * group * panel_size, bias != nullptr ? bias + c0 : nullptr,
                         Y + r0 * ldy + c0, ldy, std::min(group * kernel::panel_columns, out - c0));
  });
#else
  static_cast<void>(X), static_cast<void>(ldx), static_cast<void>(rows), static_cast<void>(in);
  static_cast<void>(W), static_cast<void>(out), static_cast<void>(bias), static_cast<void>(Y), static_cast<void>(ldy);
#endif
}

// Y (rows, out), rows ldy apart, = X (rows, in) W^T + bias: X rows ldx apart, W (out, in) contiguous, bias (out) or
// null; the kernel as the table at the top of this file says. Shapes are the caller's to check.
inline void project_rows_bf16(const bfloat16* X, Index ldx, Index rows, Index in, const bfloat16* W, Index out,
                              const bfloat16* bias, bfloat16* Y, Index ldy) {
  if (rows == 0 || out == 0) return;
  const Isa isa = active_isa();  // before any parallel region: it may throw
#ifdef ATTEND_X86_DISPATCH
  const bool in_place = rows <= tuning::bf16_in_place_rows && isa != Isa::generic;
  const bool pairs = !in_place && isa == Isa::avx512_bf16 && pairs_at_full_rate();
#else
  constexpr bool in_place = false, pairs = false;
#endif
  // The bias in float, and for the widened path X, W and Y in float, in a buffer of the calling thread kept across
  // calls (its size that of the largest call so far), so that a repeated call neither allocates nor touches new pages.
  static thread_local PacketBuffer<float> scratch;
  const Index widened = in_place || pairs ? 0 : rows * in + out * in + rows * out;
  scratch.resize(out + widened);
  float* const bias_float = scratch.data() + widened;  // (out), after the widened operands
  if (bias != nullptr) widen(isa, bias, out, bias_float);
  const float* b = bias != nullptr ? bias_float : nullptr;
#ifdef ATTEND_X86_DISPATCH
  if (in_place) {  // W read once, in place, in pieces of columns
    constexpr Index piece = tuning::few_rows_piece;
    const double work = static_cast<double>(in) * static_cast<double>(out) * tuning::streamed_weight_work;
    parallel_for((out + piece - 1) / piece, work, [&](Index i, int) {
      const Index c0 = i * piece, columns = std::min(piece, out - c0);
      const bfloat16* W_c0 = W + c0 * in;  // (columns, in)
      const float* b_c0 = b != nullptr ? b + c0 : nullptr;
      if (isa == Isa::avx512_bf16)
        avx512_bf16::few_rows_times(X, ldx, rows, in, W_c0, in, b_c0, Y + c0, ldy, columns);
      else if (isa == Isa::avx512)
        avx512::widened_rows_times(X, ldx, rows, in, W_c0, in, b_c0, Y + c0, ldy, columns);
      else
        avx2::widened_rows_times(X, ldx, rows, in, W_c0, in, b_c0, Y + c0, ldy, columns);
    });
    return;
  }
  if (pairs) {
    packed_pairs_product(X, ldx, rows, in, W, out, b, Y, ldy);
    return;
  }
#endif
  // Widened, on the level's float kernels.
  float* const X_float = scratch.data();       // (rows, in)
  float* const W_float = X_float + rows * in;  // (out, in)
  float* const Y_float = W_float + out * in;   // (rows, out)
  for (Index r = 0; r < rows; ++r) widen(isa, X + r * ldx, in, X_float + r * in);
  widen(isa, W, out * in, W_float);
  project_rows<float>(Eigen::Map<const Matrix<float>>(X_float, rows, in), {{W_float, out, b, Y_float, out}});
  for (Index r = 0; r < rows; ++r) narrow(isa, Y_float + r * out, out, Y + r * ldy);
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
