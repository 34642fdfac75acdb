// attend/detail/flash_workspace.hpp — the buffers of the tiled kernel (detail/flash_attention.hpp): tile sizes, one
// thread's workspace, the head-major copies of K and V, and the view of one head's keys that a work item reads.
#pragma once

#include <attend/config.hpp>
#include <attend/detail/tuning.hpp>
#include <attend/mask.hpp>
#include <attend/tensor.hpp>

#include <vector>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

// Tile sizes of the kernel: Br query rows by Bc keys.
struct FlashBlocks {
  Index query_rows;  // Br
  Index key_rows;    // Bc
};

// The tile sizes for Scalar (tuning.hpp).
template <class Scalar>
constexpr FlashBlocks flash_blocks() {
  return {tuning::flash_query_rows<Scalar>, tuning::flash_key_rows<Scalar>};
}

// One thread's buffers, sized for the largest work item; resize() reallocates only when a size changes, so a
// workspace kept across calls of the same shape allocates nothing.
template <class Scalar>
struct FlashWorkspace {
  void resize(FlashBlocks blocks, Index d, Index dv) {
    const auto rows = static_cast<std::size_t>(blocks.query_rows);
    Qs.resize(blocks.query_rows, d);
    S.resize(blocks.query_rows, blocks.key_rows);
    O.resize(blocks.query_rows, dv);
    m.resize(blocks.query_rows);
    l.resize(blocks.query_rows);
    shift.resize(blocks.query_rows);
    partial.resize(blocks.query_rows, row_packet_size<Scalar>);
    block_sum.resize(blocks.query_rows);
    rescale.resize(padded_to_packets<Scalar>(blocks.query_rows));
    mean.resize(dv);
    keys.resize(rows);
  }

  Matrix<Scalar> Qs;                // (Br, d): the query block, scaled by 1 / sqrt(d)
  Matrix<Scalar> S;                 // (Br, Bc): scores, then unnormalised probabilities
  Matrix<Scalar> O;                 // (Br, dv): unnormalised output
  Vector<Scalar> m;                 // (Br): running maximum of each row's visible scores
  Vector<Scalar> l;                 // (Br): running sum of exp(score - m); 0 until the row has seen a key
  Vector<Scalar> shift;             // (Br): the maximum each row's exponentials of a key block take
  Vector<Scalar> rescale;           // (Br rounded up to whole packets): each row's a for a key block
  Matrix<Scalar> partial;           // (Br, widest packet): each row's partial sums of exp over a key block
  Vector<Scalar> block_sum;         // (Br): each row's sum of exp over a key block
  Vector<Scalar> mean;              // (dv): mean of the head's value rows, for FullyMasked::uniform
  std::vector<VisibleKeys> keys;    // (Br): the keys each row sees (Mask::visible_keys)
};

// Everything a call keeps between calls: one workspace per thread, and the head-major copies of K and V that all
// threads read. K's is transposed, so that S = Qs K^T is a sum of rows of K^T scaled by Qs's entries, the product
// the row kernel makes without packing either operand. With several heads, a head's rows of K and V lie
// (heads * d) elements apart, so a work item, which reads one head, would use one cache line in `heads` of every
// stretch of memory it crosses; the copies put each (batch row, head) pair's rows next to one another, V's padded with
// zeros to whole packets.
template <class Scalar>
struct FlashBuffers {
  std::vector<FlashWorkspace<Scalar>> threads;  // one per thread
  // (batch * kv_heads * panels * d, Bc rounded up to whole packets): K^T in panels, one per key block; key/value
  // head g of batch row b has its panel t, K^T of keys [t Bc, t Bc + Bc), in rows ((b * kv_heads + g) * panels + t)
  // * d .., padding 0
  Matrix<Scalar> KT;
  Matrix<Scalar> V;  // (batch * kv_heads * num_keys, dv rounded up to whole packets): its values, the padding 0
};

// One (batch row, head) pair's keys and values, as the work items read them.
template <class Scalar>
struct HeadKeys {
  using View = Eigen::Map<const Matrix<Scalar>, 0, Eigen::OuterStride<>>;
  const Scalar* KT;   // (panels, d, panel_width): key block t's K^T at KT + t * panel_size, rows panel_width apart
  Index panel_width;  // Bc rounded up to whole packets
  Index panel_size;   // d * panel_width
  View V;             // (num_keys, dv), rows readable in whole packets
};

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
