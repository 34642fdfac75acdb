// The plan of ring attention (detail/ring_layout.hpp), without MPI: the caller's shards, the zigzag chunks that balance
// a causal mask's work across the ranks, and the three kinds of causal block. Expected values from the definitions:
// chunk c of 2P is [c N / 2P, (c + 1) N / 2P), rank r works on chunks r and 2P - 1 - r; a query at position i sees the
// keys at positions 0 .. i, so a rank's causal work is the sum over its queries of i + 1.
#include <algorithm>
#include <attend/detail/ring_layout.hpp>
#include <catch2/catch.hpp>
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

TEST_CASE("ring layout: under a causal mask a block sees all of its keys, none, or those up to each query", "[ring]") {
  const ring::Span early{0, 5}, late{5, 9};
  const ring::CausalBlock after = ring::causal_block(late, early);
  CHECK((after.keys == early && after.whole));
  CHECK(ring::causal_block(early, late).keys.empty());
  // A chunk against itself: the square causal block, Mask::window(any, 0).
  const ring::CausalBlock diagonal = ring::causal_block(late, late);
  CHECK((diagonal.keys == late && !diagonal.whole && diagonal.right == 0));
  CHECK(ring::causal_block(ring::Span{4, 5}, ring::Span{4, 5}).whole);  // one query sees its own key
  // Queries [0, 6) against keys [3, 9): keys 3 .. 5 seen; query q (position q, aligned p = q + 3 - 6) sees key j (at
  // 3 + j) when 3 + j <= q, that is j <= p + 0.
  const ring::CausalBlock overlap = ring::causal_block(ring::Span{0, 6}, ring::Span{3, 9});
  CHECK((overlap.keys == ring::Span{3, 6} && !overlap.whole && overlap.right == 0));
  // Queries [0, 10) against keys [0, 5): query q sees j <= q; aligned p = q + 5 - 10, so right = 5.
  const ring::CausalBlock short_keys = ring::causal_block(ring::Span{0, 10}, ring::Span{0, 5});
  CHECK((short_keys.keys == ring::Span{0, 5} && !short_keys.whole && short_keys.right == 5));
}

TEST_CASE("ring layout: a span cut into pieces", "[ring]") {
  const std::vector<ring::Span> cut = ring::pieces(ring::Span{3, 12}, 4);
  REQUIRE(cut.size() == 3);
  CHECK(cut[0] == ring::Span{3, 7});
  CHECK(cut[1] == ring::Span{7, 11});
  CHECK(cut[2] == ring::Span{11, 12});
  CHECK(ring::pieces(ring::Span{2, 2}, 4).empty());
}
