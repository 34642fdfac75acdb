// attend/detail/transposed_weight.hpp — Y = X W^T + b from a kept transposed copy of W.
//
// A GEMM library packs W on every call, which for a few rows of X costs more than the multiplication. Here W^T is
// kept, padded to whole packets, in a TransposedWeight; each row of Y is then a sum of rows of W^T scaled by X's
// entries (the row kernel, detail/kernels/products-inl.hpp), on full packets with no reduction across lanes.
//
// For the packed products of many rows the same W^T is also kept packed into the row kernel's micro-panels of the
// level that runs (pack_for), so that no chunk of rows packs it again; rebuilt with W^T, or when the level changes.
//
// A kept copy must never be stale: Linear::weight() hands out a reference, so W may change at any time between
// calls. TransposedWeight therefore keeps the W it was made from and compares it, bit for bit, with the W of every
// call (a memcmp, cheaper than packing W), and rebuilds when they differ.
#pragma once

#include <attend/config.hpp>

#include <attend/detail/kernels.hpp>
#include <attend/detail/packet_buffer.hpp>
#include <attend/detail/transpose.hpp>
#include <attend/detail/tuning.hpp>
#include <attend/tensor.hpp>

#include <cstring>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

template <class Scalar>
class TransposedWeight {
 public:
  static constexpr Index packet_size = row_packet_size<Scalar>;

  // Makes transposed() W^T for W (out, in), row-major, contiguous: kept as it is when W has the values of the last
  // call, rebuilt otherwise. May allocate (call it outside parallel regions).
  void refresh(const Scalar* W, Index out, Index in) {
    const bool same_shape = source_.rows() == out && source_.cols() == in;
    if (from_source_ && same_shape &&
        (out * in == 0 || std::memcmp(source_.data(), W, sizeof(Scalar) * out * in) == 0))
      return;
    source_ = Eigen::Map<const Matrix<Scalar>>(W, out, in);
    build(W, out, in);
    from_source_ = true;
  }

  // Makes transposed() W^T for W (out, in) without keeping W: for a copy used by one call only (the next refresh()
  // rebuilds). May allocate.
  void transpose_only(const Scalar* W, Index out, Index in) {
    build(W, out, in);
    from_source_ = false;
  }

  // W^T, (in, out rounded up to whole packets), zero past column out - 1.
  const Matrix<Scalar>& transposed() const { return transposed_; }

  // W^T packed by `kernel`'s pack_panel, (in, out) in its micro-panels: made on the first call after W^T was (re)built
  // or with another level's table, kept otherwise. May allocate (call it outside parallel regions); packed() then
  // returns it.
  void pack_for(const Kernels<Scalar>& kernel) {
    // A copied or moved-from buffer is empty (PacketBuffer): packed anew.
    if (packed_valid_ && packed_isa_ == kernel.isa && (packed_.data() != nullptr || transposed_.size() == 0)) return;
    packed_valid_ = false;
    const Index in = transposed_.rows(), out = source_out_;
    packed_.resize(in * transposed_.cols());
    kernel.pack_panel(b_rows(transposed_.data(), transposed_.cols()), in, out, packed_.data());
    packed_isa_ = kernel.isa;
    packed_valid_ = true;
  }
  const Scalar* packed() const { return packed_.data(); }

 private:
  void build(const Scalar* W, Index out, Index in) {
    const Index padded = padded_to_packets<Scalar>(out);
    packed_valid_ = false;
    transposed_.setZero(in, padded);
    transpose_into(W, in, out, in, transposed_.data(), padded);  // columns [0, out); the rest stay 0
    source_out_ = out;
  }

  Matrix<Scalar> source_;      // (out, in): the W that transposed_ was made from, when from_source_
  Matrix<Scalar> transposed_;  // (in, padded out)
  Index source_out_ = 0;       // out of the W that transposed_ was made from
  bool from_source_ = false;   // false until refresh(), and after transpose_only()
  PacketBuffer<Scalar> packed_;  // (in, out) packed for packed_isa_, when packed_valid_
  Isa packed_isa_ = Isa::generic;
  bool packed_valid_ = false;
};

// Y (rows, out) = X (rows, in) W^T + bias, W^T given as weight.transposed() (refreshed by the caller). X rows ldx
// apart, Y rows ldy apart; bias (out) or null. Every element of Y is summed over k in order, whatever `rows`.
template <class Scalar>
void times_transposed(const Scalar* X, Index ldx, Index rows, Index in, const TransposedWeight<Scalar>& weight,
                      Index out, const Scalar* bias, Scalar* Y, Index ldy) {
  const Matrix<Scalar>& Wt = weight.transposed();  // (in, padded out): whole packets readable past `out`
  kernels<Scalar>().times_matrix(x_rows(X, ldx, rows), in, b_padded_rows(Wt.data(), Wt.cols()), out,
                                 y_into(Y, ldy, bias));
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
