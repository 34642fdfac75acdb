// attend/detail/ring_layout.hpp — which positions of a sharded sequence each rank of ring attention works on, and
// what a block of queries against a block of keys has to compute: the plan of attend/distributed/ring_attention.hpp,
// free of MPI.
//
// The caller's shards are contiguous: rank r holds positions [offsets[r], offsets[r + 1]). Without a causal mask the
// ranks work on their own shards. Under a causal mask a query sees only the keys up to its own position, so the last
// shard would carry most of the work (with P equal shards, rank r scores 2r + 1 of the P^2 blocks' halves); the
// sequence is therefore cut into 2P chunks of near-equal length and rank r works on chunks r and 2P - 1 - r (the
// zigzag order): every rank then scores the same number of keys to within a chunk's rounding.
//
// A block of queries against a block of keys sees all of the keys, none, or those before the queries' end through a
// window reaching up to each query's own position (causal_block).
#pragma once

#include <attend/config.hpp>
#include <attend/tensor.hpp>

#include <algorithm>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {
namespace ring {

// Positions [begin, end) of the whole sequence.
struct Span {
  Index begin = 0, end = 0;
  Index size() const { return end - begin; }
  bool empty() const { return end <= begin; }
  friend bool operator==(const Span& a, const Span& b) { return a.begin == b.begin && a.end == b.end; }
};

// The spans each rank holds or works on, in increasing position.
using Layout = std::vector<std::vector<Span>>;

// The caller's contiguous shards, from each rank's length.
inline Layout shards(const std::vector<Index>& lengths) {
  Layout layout(lengths.size());
  Index begin = 0;
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    layout[r] = {Span{begin, begin + lengths[r]}};
    begin += lengths[r];
  }
  return layout;
}

// The zigzag chunks of a sequence of `total` positions over `ranks` ranks: chunk c is [c N / 2P, (c + 1) N / 2P), and
// rank r works on chunks r and 2P - 1 - r.
inline Layout zigzag(Index total, Index ranks) {
  const Index chunks = 2 * ranks;
  const auto edge = [&](Index c) { return c * total / chunks; };
  Layout layout(static_cast<std::size_t>(ranks));
  for (Index r = 0; r < ranks; ++r) {
    const Index last = chunks - 1 - r;
    layout[static_cast<std::size_t>(r)] = {Span{edge(r), edge(r + 1)}, Span{edge(last), edge(last + 1)}};
  }
  return layout;
}

// The positions of a rank's spans.
inline Index positions(const std::vector<Span>& spans) {
  Index n = 0;
  for (const Span& s : spans) n += s.size();
  return n;
}

// Under the causal mask a query at position i sees the keys at positions up to i. For queries at `queries` against keys
// at `keys`: the keys some query sees (those before the queries' end; empty when there is none), and whether every
// query sees all of them. When not, query q of the block (its aligned position p = q + K - Q, bottom-right, over the
// K keys seen) sees key j when j <= p + right, with right = queries.end - keys_seen.end: Mask::window(any, right).
struct CausalBlock {
  Span keys;          // the keys seen by some query
  bool whole = true;  // every query sees every one of them
  Index right = 0;    // otherwise, the reach of the window beyond the aligned position
};

inline CausalBlock causal_block(const Span& queries, const Span& keys) {
  CausalBlock block;
  block.keys = Span{keys.begin, std::min(keys.end, queries.end)};
  if (block.keys.empty() || queries.empty()) return {Span{}, true, 0};
  block.whole = block.keys.end - 1 <= queries.begin;  // the last key seen is at or before the first query
  block.right = queries.end - block.keys.end;
  return block;
}

// Span i cut into pieces of at most `rows` positions.
inline std::vector<Span> pieces(const Span& span, Index rows) {
  std::vector<Span> out;
  for (Index begin = span.begin; begin < span.end; begin += rows)
    out.push_back({begin, std::min(span.end, begin + rows)});
  return out;
}

}  // namespace ring
}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
