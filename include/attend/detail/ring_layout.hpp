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
// Two chunks never overlap, so a chunk of queries against a chunk of keys is one of three blocks: every key visible
// (the keys end before the queries begin), none (they begin after the queries end) or the chunk against itself, a
// square causal block.
#pragma once

#include <algorithm>
#include <attend/config.hpp>
#include <attend/tensor.hpp>
#include <stdexcept>
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

// What a block of queries at `queries` computes against keys at `keys` under the causal mask.
enum class Block { whole, none, diagonal };

inline Block causal_block(const Span& queries, const Span& keys) {
  if (keys.end - 1 <= queries.begin) return Block::whole;  // the last key is at or before the first query
  if (keys.begin >= queries.end) return Block::none;       // the first key is after the last query
  if (keys == queries) return Block::diagonal;
  throw std::logic_error("ring attention: blocks of queries and keys overlap without being equal");
}

}  // namespace ring
}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
