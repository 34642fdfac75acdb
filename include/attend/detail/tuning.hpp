// attend/detail/tuning.hpp — every tuning constant of attend's kernels, each with the reason for its value.
//
// Sizes are in elements of Scalar where they say so, otherwise in bytes. The caches they are sized for: 32-48 KiB of
// L1d and 0.5-2 MiB of L2 per core (Zen 3 and 4, Ice Lake to Emerald Rapids Xeons). docs/PERFORMANCE.md has the
// measurements behind them and the commands that repeat them.
#pragma once

#include <attend/config.hpp>

#include <Eigen/Core>
#include <cstddef>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {
namespace tuning {

// The widest packet of any level (AVX-512's 64 bytes): buffers that a kernel reads in whole packets are padded to
// this, so that one layout serves every level.
constexpr std::size_t widest_packet_bytes = 64;

// Work items a backward pass makes at least, when the shape allows, so that two to eight threads have work when
// batch * heads is small: the direct path then takes one key/value head at a time, in blocks of queries and then of
// keys, and the core splits each key/value head's key blocks between several pieces. Chosen from the shape alone, so
// that the bits do not depend on the thread count.
constexpr Eigen::Index backward_items = 8;

// The attention core's tile (detail/core/): core_query_rows query rows of each head of a key/value group by
// core_key_rows keys. The group's rows share one K^T block (64 rows by 128 keys of 64-wide heads: a 32 KiB score
// tile in float and a 32 KiB K^T block, inside L2 with the group's accumulators).
constexpr Eigen::Index core_query_rows = 64;
constexpr Eigen::Index core_key_rows = 128;
// The core's backward pass packs K^T, V^T and K of core_backward_key_rows keys once and runs every query block
// against them: a wide block makes that packing a small part of the products.
constexpr Eigen::Index core_backward_key_rows = 128;
// Decoding: a call of at most decode_queries queries splits its keys into spans of decode_span keys, each a piece of
// work of its own, merged by their log-sum-exp in key order (flash-decoding), when it has at least two spans. A
// multiple of core_key_rows; fixed, so that the split, and the bits, do not depend on the thread count.
constexpr Eigen::Index decode_queries = 8;
constexpr Eigen::Index decode_span = 256;

// The direct path while one call's weights take at most this (about one core's L2): AttentionPath::automatic takes
// the tiled path (the attention core, detail/core/) above it, in evaluation and training mode alike.
constexpr double direct_path_bytes = 1 << 20;

// The direct path's piece of work: a block of this many query rows of one head (its scores, softmax and weights times
// values; in the backward pass, dP, dS and dQ), or of keys (the backward pass's dK and dV), so that a call with fewer
// heads than threads still shares its work; a row's bits do not depend on it.
constexpr Eigen::Index direct_block_rows = 64;

// Rows of a projection's chunk, one piece of work for a thread: large enough that the weight's passes over it are a
// small part of the chunk's work; fixed, so that the split, and so the bits, do not depend on the thread count.
constexpr Eigen::Index rows_per_chunk = 256;

// A projection multiplies from a kept, transposed copy of W while that copy takes at most this (a quarter of a 1 MiB
// L2: each block of rows streams all of it).
constexpr double kept_transpose_bytes = 256.0 * 1024;

// The row kernel's panels of B: a product whose B is larger than this runs over panels of at most
// product_panel_depth rows by product_panel_width columns, each staying in L2 while every row of X passes over it.
constexpr double product_panel_bytes = 128.0 * 1024;
template <class Scalar>
constexpr Eigen::Index product_panel_depth = 256;
template <class Scalar>
constexpr Eigen::Index product_panel_width = 128 * 4 / sizeof(Scalar);  // 512 bytes a row

// bfloat16 products (detail/bf16_products.hpp) of at most bf16_in_place_rows rows read W in place, widening it in
// registers, on every level but generic: up to here that beats widening W into a float copy for the float kernels
// (measured at 1024 and 4096 wide, docs/PERFORMANCE.md, "bfloat16"). Products of more rows on AVX512-BF16's packed
// pairs take W in panels of 16 columns, bf16_panel_group of them (128 columns) to a piece of work: 512 bytes of each
// packed row, as product_panel_width.
constexpr Eigen::Index bf16_in_place_rows = 32;
constexpr Eigen::Index bf16_panel_group = 8;
// Decoding in bfloat16 (at most decode_queries queries) on a level without bfloat16 dot products (avx512_bf16 reads
// the cache in place) widens its keys and values to float a chunk of this many steps
// at a time, attends to each chunk and merges the chunks by their log-sum-exp (detail::attention_heads): a chunk of
// 8 key/value heads of 64, keys and values, is 1 MiB of float, inside L2, where widening the whole cache would write
// it to memory and read it back (128 and 512: docs/PERFORMANCE.md). Fixed, so that the bits do not depend on the
// thread count; one span of the float core's decoding (decode_span).
constexpr Eigen::Index bf16_key_chunk = 256;

// average_gradients (attend/distributed.hpp) sends the gradients in buckets of this many bytes, one allreduce each:
// large enough that a model's step makes few calls, each long beside MPI's latency; small enough that the copy into
// the bucket stays in cache. (PyTorch's DistributedDataParallel buckets 25 MiB by default.)
constexpr long long gradient_bucket_bytes = 4ll << 20;

// Ring attention (attend/distributed/ring_attention.hpp) calls the core on at most this many query rows at a time and
// polls the ring's messages between calls: without a progress thread MPI moves a message only inside MPI's own calls,
// so a step of one call would leave the next block waiting until the step ends. 1024 rows against a block of keys is
// long beside a poll, and the core packs the block's keys once per call, a fraction 1 / 1024 of its products.
constexpr Eigen::Index ring_query_rows = 1024;

// Packing a panel of B whose rows lie closer than its columns, neither of them adjacent (b_strided's general
// layout, such as one tap of Conv1d's (out, in, k) weight: strides k and k * in), writes this many steps of a
// micro-panel at a time, at most 64 rows of 256 bytes, so that they stay in L1 while every column is written rather
// than a whole column's rows being evicted before the next column reaches them (docs/PERFORMANCE.md, "Design
// measurements").
constexpr Eigen::Index pack_block_steps = 64;

// A product of at least this many rows copies each panel of B into contiguous micro-panels first
// (detail/kernels/products-inl.hpp): the copy costs about 2 / rows of the product's time, under 4 % from here, while
// B read in place misses L1 whenever its rows are a power of two apart; with fewer rows the copy does not pay.
constexpr Eigen::Index packed_product_rows = 64;

// Projections of at most this many rows of floats read W as it is stored on the avx512 level (the seed's 8 rows, and
// every decoding step): no kept copy to compare, and W read once. Inputs up to few_rows_max_in wide (a Llama's
// feed-forward down_proj included); X's interleaved copy is on the stack up to few_rows_stack_in (16 KiB), in a
// buffer of the calling thread beyond. The outputs go to the threads in pieces of few_rows_piece (a multiple of the
// kernel's blocks of 8): 24 pieces for a 768-wide projection, enough to share.
constexpr Eigen::Index few_rows = 8;
constexpr Eigen::Index few_rows_max_in = 16384;
constexpr Eigen::Index few_rows_stack_in = 512;
constexpr Eigen::Index few_rows_piece = 32;
// A decoding step's scores by the few-rows kernel request the cache lines of the keys this many rows ahead of the
// block of 8 they multiply (8 KiB of 128-wide float keys): the hardware's own prefetching alone leaves a step at
// about half the speed of a streaming read (docs/PERFORMANCE.md).
constexpr Eigen::Index few_rows_prefetch_keys = 16;

// A weight streamed from memory once (a projection of a few rows) costs about as much time as this many
// multiply-adds in cache: one core streams about 10 GB/s (2.5 G floats/s) and multiply-adds about 40 G/s. The work
// such a projection reports to parallel_for is its weights read times this.
constexpr double streamed_weight_work = 16;

// A head whose scores take at most this many multiply-adds (queries * keys * d) gets them one dot product each:
// transposing K for the row kernel costs more than it saves there.
constexpr Eigen::Index tiny_product = 16 * 16 * 32;

// Below this many multiply-adds in all (about 0.1 ms of one core's work), starting and joining a team of threads
// costs more than the second thread saves (detail::parallel_for).
constexpr double worth_a_team = 4e6;

// Element-wise passes (activations, normalisation rows) go to the threads in pieces of about this many elements
// (64 KiB of floats): enough pieces for two threads to share a (1024, 2048) tensor evenly, few enough that each is
// worth its scheduling. The work they report to parallel_for counts an element as elementwise_work multiply-adds
// (a load, a few operations and a store, bound by memory) and one with a transcendental function (erf, tanh, exp) as
// transcendental_work.
constexpr Eigen::Index elementwise_piece = 16384;
constexpr double elementwise_work = 4;
constexpr double transcendental_work = 32;

}  // namespace tuning

// Scalars in the widest packet, and n rounded up to whole such packets: the width of a buffer that every level's
// kernels may read in whole packets (detail/kernels/products-inl.hpp, padded = true).
template <class Scalar>
constexpr Eigen::Index row_packet_size = static_cast<Eigen::Index>(tuning::widest_packet_bytes / sizeof(Scalar));
template <class Scalar>
constexpr Eigen::Index padded_to_packets(Eigen::Index n) {
  return (n + row_packet_size<Scalar> - 1) / row_packet_size<Scalar> * row_packet_size<Scalar>;
}
}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
