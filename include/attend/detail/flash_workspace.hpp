// attend/detail/flash_workspace.hpp — the buffers of the tiled kernel (detail/flash_attention.hpp): tile sizes, one
// thread's workspace, the packed head-major copies of K^T and V, and the view of one head's keys that a work item
// reads.
#pragma once

#include <attend/config.hpp>
#include <attend/detail/packet_buffer.hpp>
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
// workspace kept across calls of the same shape allocates nothing. The tiles the kernels stream in whole packets are
// packet-aligned (PacketMatrix).
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

  PacketMatrix<Scalar> Qs;          // (Br, d): the query block, scaled by 1 / sqrt(d)
  PacketMatrix<Scalar> S;           // (Br, Bc): scores, then unnormalised probabilities
  PacketMatrix<Scalar> O;           // (Br, dv): unnormalised output
  Vector<Scalar> m;                 // (Br): running maximum of each row's visible scores
  Vector<Scalar> l;                 // (Br): running sum of exp(score - m); 0 until the row has seen a key
  Vector<Scalar> shift;             // (Br): the maximum each row's exponentials of a key block take
  Vector<Scalar> rescale;           // (Br rounded up to whole packets): each row's a for a key block
  Matrix<Scalar> partial;           // (Br, widest packet): each row's partial sums of exp over a key block
  Vector<Scalar> block_sum;         // (Br): each row's sum of exp over a key block
  Vector<Scalar> mean;              // (dv): mean of the head's value rows, for FullyMasked::uniform
  std::vector<VisibleKeys> keys;    // (Br): the keys each row sees (Mask::visible_keys)
};

// Everything a call keeps between calls: one workspace per thread, and the head-major copies of K^T and V that all
// threads read, each key block packed once into the micro-panels the row kernel streams (pack_panel,
// detail/kernels/products-inl.hpp), so that no work item packs an operand again. K's is transposed, so that
// S = Qs K^T is a sum of rows of K^T scaled by Qs's entries. With several heads, a head's rows of K and V lie
// (heads * d) elements apart; the copies also put each (batch row, head) pair's rows next to one another.
// The micro-panels' width is the level's: the copies are made and read through one call's kernel table.
template <class Scalar>
struct FlashBuffers {
  std::vector<FlashWorkspace<Scalar>> threads;  // one per thread
  // (batch * kv_heads * panels, d, Bc rounded up to whole packets): K^T of key block t of key/value head g of batch
  // row b, packed, at panel (b * kv_heads + g) * panels + t
  PacketBuffer<Scalar> KT;
  // (batch * kv_heads * panels, Bc, dv rounded up to whole packets): that key block's values, packed, likewise,
  // when more than one work item reads them
  PacketBuffer<Scalar> V;
};

// One (batch row, head) pair's keys and values, as the work items read them.
template <class Scalar>
struct HeadKeys {
  using View = Eigen::Map<const Matrix<Scalar>, 0, Eigen::OuterStride<>>;
  const Scalar* KT;   // (panels, d, panel_width): key block t's K^T, packed, at KT + t * panel_size
  Index panel_size;   // d * Bc rounded up to whole packets
  const Scalar* VP;   // (panels, Bc, dv rounded up): key block t's values, packed, at VP + t * value_panel_size;
                      // or null: the values read from V
  Index value_panel_size;  // Bc * dv rounded up to whole packets
  View V;             // (num_keys, dv): the values in place, for the rows that add their visible keys one by one
};

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
