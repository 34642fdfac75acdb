// The plan of ring attention (detail/ring_layout.hpp), without MPI: the caller's shards, the zigzag chunks that balance
// a causal mask's work across the ranks, and the three kinds of causal block. Expected values from the definitions:
// chunk c of 2P is [c N / 2P, (c + 1) N / 2P), rank r works on chunks r and 2P - 1 - r; a query at position i sees the
// keys at positions 0 .. i, so a rank's causal work is the sum over its queries of i + 1.
#include <algorithm>
#include <attend/detail/ring_layout.hpp>
#include <catch2/catch.hpp>
#include <stdexcept>
#include <vector>

using attend::Index;
namespace ring = attend::detail::ring;

TEST_CASE("ring layout: the caller's shards are contiguous and in rank order", "[ring]") {
  const ring::Layout shards = ring::shards({4, 0, 7});
  REQUIRE(shards.size() == 3);
  CHECK(shards[0].front() == ring::Span{0, 4});
  CHECK(shards[1].front() == ring::Span{4, 4});
  CHECK(shards[2].front() == ring::Span{4, 11});
}

TEST_CASE("ring layout: the zigzag chunks cover the sequence once and give the ranks equal causal work", "[ring]") {
  for (Index ranks : {2, 3, 4, 8})
    for (Index total : {Index(1), Index(7), Index(100), Index(16384), Index(16387)}) {
      INFO("ranks " << ranks << ", positions " << total);
      const ring::Layout work = ring::zigzag(total, ranks);
      std::vector<int> covered(static_cast<std::size_t>(total), 0);
      Index least = total * total, most = 0;
      for (Index r = 0; r < ranks; ++r) {
        const auto& spans = work[static_cast<std::size_t>(r)];
        REQUIRE(spans.size() == 2);
        CHECK(spans[0].begin == r * total / (2 * ranks));
        CHECK(spans[1].end == (2 * ranks - r) * total / (2 * ranks));
        Index scores = 0;  // the keys its queries see: i + 1 for the query at i
        for (const ring::Span& s : spans)
          for (Index i = s.begin; i < s.end; ++i) {
            ++covered[static_cast<std::size_t>(i)];
            scores += i + 1;
          }
        least = std::min(least, scores);
        most = std::max(most, scores);
      }
      CHECK(std::all_of(covered.begin(), covered.end(), [](int c) { return c == 1; }));
      // Chunks differ by at most one position; a rank's two chunks by at most two positions of at most total keys
      // each, plus the chunks' own rounding: within 2 total + 2 of each other.
      CHECK(most - least <= 2 * total + 2);
    }
}

TEST_CASE("ring layout: under a causal mask a block is whole, empty or the chunk against itself", "[ring]") {
  const ring::Span early{0, 5}, late{5, 9};
  CHECK(ring::causal_block(late, early) == ring::Block::whole);
  CHECK(ring::causal_block(early, late) == ring::Block::none);
  CHECK(ring::causal_block(late, late) == ring::Block::diagonal);
  CHECK(ring::causal_block(ring::Span{4, 5}, ring::Span{4, 5}) == ring::Block::whole);  // one query sees its key
  CHECK_THROWS_AS(ring::causal_block(ring::Span{0, 6}, ring::Span{3, 9}), std::logic_error);
}
