// Attention in bfloat16 (evaluation only): scaled_dot_product_attention on whole sequences and against a KVCache,
// against the definition in double on the same bfloat16 values within the bound of its float arithmetic and one
// rounding; RotaryEmbedding's rotation likewise; MultiHeadAttention and GroupedQueryAttention (whole sequences and
// decoding through the cache) bit for bit their definitions composed of those tested pieces: each projection a
// Linear<bfloat16>, the rotation, then the attention, each result rounded once. Every level this CPU has, forced in
// turn.
#include <attend/detail/bf16_products.hpp>
#include <attend/detail/tuning.hpp>
#include <attend/grouped_query_attention.hpp>
#include <attend/kv_cache.hpp>
#include <attend/linear.hpp>
#include <attend/mask.hpp>
#include <attend/multi_head_attention.hpp>
#include <attend/random.hpp>
#include <attend/rotary_embedding.hpp>
#include <attend/scaled_dot_product_attention.hpp>
#include <attend/threads.hpp>
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <support/bfloat16.hpp>
#include <support/levels.hpp>
#include <vector>

using attend::bfloat16;
using attend::Generator;
using attend::Index;
using attend::Isa;
using attend::Mask;
using attend::Tensor3;
using attend_test::ForcedLevel;
using attend_test::random_bf16;
using attend_test::same_bits;

namespace {

struct Ratios {
  double output = 0, lse = 0;  // the largest |result - definition| / bound of each
};

// What a query sees and what is done to its scores (attend/score_options.hpp, attend/mask.hpp): causal (query q at
// aligned position p = q + nk - nq sees keys up to p), a window of `left` keys before p (none when negative), softcap
// and ALiBi slopes (one per query head, or none); whether the weights are rounded to bfloat16 for their product with
// the values (rounds_weights).
struct Rule {
  bool causal = false;
  Index left = -1;
  double softcap = 0;
  std::vector<double> slopes;
  bool weights_rounded = false;
};

// Whether a call of nq queries on `isa` rounds its weights to bfloat16 before their product with the values, as
// FlashAttention and PyTorch's CPU kernel do: the packed path of avx512_bf16 where its pairs run at full rate
// (scaled_dot_product_attention.hpp, reduced_attention_heads).
bool rounds_weights(Isa isa, Index nq) {
  return isa == Isa::avx512_bf16 && attend::detail::pairs_at_full_rate() && nq > attend::detail::tuning::decode_queries;
}

// Causal or not, on `isa` for nq queries.
Rule causal_rule(bool causal, Isa isa, Index nq) {
  Rule rule;
  rule.causal = causal;
  rule.weights_rounded = rounds_weights(isa, nq);
  return rule;
}

// The largest ratios over O and lse of their error to its bound, for attention of Q (batch, nq, heads * d) on K and V
// (batch, nk, kv_heads * d) under `rule`. The definition: softmax of the scores (scale / sqrt(d) q.k, then the softcap
// and ALiBi) over the keys the query sees, times V, in double on the same bfloat16 values, grouped-query heads. Bound
// of one output: a score's float error ds = (d + 2) 2^-24 (scale max_j sum_i |q_i k_ji| + the largest ALiBi term)
// (the softcap's derivative is at most 1) moves each weight by at most 2 ds of itself; the weights' and the weighted
// sum's float rounding (and exp's and tanh's, within a few units) stay within (keys + 16) 2^-24; both times max |v|;
// weights rounded to bfloat16 move each by at most 2^-8 of itself: 2^-8 sum_j w_j |v_j| more; then the rounding to
// bfloat16, 2^-8 of the result. lse: its float error within (d + keys + 16) 2^-24 of the larger
// of its terms, then rounded.
Ratios attention_ratios(const Tensor3<bfloat16>& Q, const Tensor3<bfloat16>& K, const Tensor3<bfloat16>& V,
                        Index heads, Index kv_heads, const Rule& rule, const Tensor3<bfloat16>& O,
                        const Tensor3<bfloat16>& lse) {
  const Index batch = Q.dimension(0), nq = Q.dimension(1), nk = K.dimension(1), d = Q.dimension(2) / heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d)), unit = std::ldexp(1.0, -24);
  Ratios worst;
  for (Index b = 0; b < batch; ++b)
    for (Index h = 0; h < heads; ++h)
      for (Index q = 0; q < nq; ++q) {
        const Index g = h / (heads / kv_heads), p = q + nk - nq;
        const Index first = rule.left >= 0 ? std::max(Index(0), p - rule.left) : 0, end = rule.causal ? p + 1 : nk;
        const Index keys = end - first;  // keys first .. end - 1
        std::vector<double> score(static_cast<std::size_t>(keys));
        double largest = -INFINITY, magnitude = 0, v_max = 0;
        for (Index j = first; j < end; ++j) {
          double dot = 0, absolute = 0;
          for (Index i = 0; i < d; ++i) {
            const double product = static_cast<double>(Q(b, q, h * d + i)) * static_cast<double>(K(b, j, g * d + i));
            dot += product;
            absolute += std::abs(product);
          }
          double s = scale * dot;
          if (rule.softcap > 0) s = rule.softcap * std::tanh(s / rule.softcap);
          const double alibi = rule.slopes.empty() ? 0.0 : rule.slopes[static_cast<std::size_t>(h)] *
                                                               static_cast<double>(std::abs(p - j));
          s -= alibi;
          score[static_cast<std::size_t>(j - first)] = s;
          largest = std::max(largest, s);
          magnitude = std::max(magnitude, scale * absolute + alibi);
          for (Index i = 0; i < d; ++i) v_max = std::max(v_max, std::abs(static_cast<double>(V(b, j, g * d + i))));
        }
        double total = 0;
        for (double sc : score) total += std::exp(sc - largest);
        const double lse_expected = largest + std::log(total);
        const double lse_bound = (static_cast<double>(d + keys) + 16) * unit * (std::abs(largest) + magnitude + 1) +
                                 std::ldexp(1.0, -8) * std::abs(lse_expected);
        worst.lse = std::max(worst.lse, std::abs(static_cast<double>(lse(b, q, h)) - lse_expected) / lse_bound);
        const double ds = static_cast<double>(d + 2) * unit * magnitude;
        const double computing = v_max * (2 * ds + static_cast<double>(keys + 16) * unit);
        for (double& sc : score) sc = std::exp(sc - largest) / total;  // the weights
        for (Index i = 0; i < d; ++i) {
          double expected = 0, weighted = 0;  // sum_j w_j v_j, sum_j w_j |v_j|
          for (Index j = first; j < end; ++j) {
            const double w = score[static_cast<std::size_t>(j - first)], v = static_cast<double>(V(b, j, g * d + i));
            expected += w * v;
            weighted += w * std::abs(v);
          }
          const double rounded = rule.weights_rounded ? std::ldexp(weighted, -8) : 0.0;
          const double bound = computing + rounded + std::ldexp(1.0, -8) * (std::abs(expected) + computing + rounded);
          worst.output = std::max(worst.output, std::abs(static_cast<double>(O(b, q, h * d + i)) - expected) / bound);
        }
      }
  return worst;
}

// Steps [from, from + count) of X (batch, steps, features).
Tensor3<bfloat16> steps_of(const Tensor3<bfloat16>& X, Index from, Index count) {
  const std::array<Index, 3> offsets{0, from, 0}, extents{X.dimension(0), count, X.dimension(2)};
  return X.slice(offsets, extents);
}

}  // namespace

TEST_CASE("scaled_dot_product_attention<bfloat16>: in float on the stored values, the output rounded once",
          "[bfloat16]") {
  // Grouped-query heads (4 query heads on 2 key/value heads), no mask and causal.
  const bool causal = GENERATE(false, true);
  CAPTURE(causal);
  const Index batch = 2, steps = 9, heads = 4, kv_heads = 2, d = 8;
  const Tensor3<bfloat16> Q = random_bf16(batch, steps, heads * d, 71);     // (2, 9, 32)
  const Tensor3<bfloat16> K = random_bf16(batch, steps, kv_heads * d, 72);  // (2, 9, 16)
  const Tensor3<bfloat16> V = random_bf16(batch, steps, kv_heads * d, 73);  // (2, 9, 16)
  const Mask mask = causal ? Mask::causal() : Mask{};
  for (Isa isa : attend_test::bf16_levels()) {
    CAPTURE(attend::isa_name(isa));
    const ForcedLevel level(isa);
    Tensor3<bfloat16> lse;
    const Tensor3<bfloat16> O = attend::scaled_dot_product_attention(Q, K, V, heads, kv_heads, mask, {}, &lse);
    REQUIRE(O.dimension(2) == heads * d);
    REQUIRE(lse.dimension(2) == heads);
    const Ratios worst = attention_ratios(Q, K, V, heads, kv_heads, causal_rule(causal, isa, Q.dimension(1)), O, lse);
    CHECK(worst.output <= 1.0);
    CHECK(worst.lse <= 1.0);
  }
  // The checks of the float call, on the bfloat16 arguments: a wrong head count is refused, naming it.
  REQUIRE_THROWS_WITH(attend::scaled_dot_product_attention(Q, K, V, 3, kv_heads),
                      Catch::Contains("num_kv_heads must be >= 1 and divide num_heads (3)"));
}

TEST_CASE("scaled_dot_product_attention<bfloat16> against a KVCache<bfloat16>: its steps read in place", "[bfloat16]") {
  // Steps appended in two pieces to a cache with room to spare, then queries for the last 3 positions attend to all of
  // them: the definition on the appended keys and values, aligned bottom-right. 12 steps are widened whole; 600, in
  // chunks of tuning::bf16_key_chunk merged by their log-sum-exp.
  const Index length = GENERATE(Index(12), Index(600));
  CAPTURE(length);
  const Index batch = 2, heads = 4, kv_heads = 2, d = 8, first = 7, second = length - first, queries = 3;
  const Tensor3<bfloat16> K = random_bf16(batch, length, kv_heads * d, 81);  // (2, length, 16)
  const Tensor3<bfloat16> V = random_bf16(batch, length, kv_heads * d, 82);  // (2, length, 16)
  const Tensor3<bfloat16> Q = random_bf16(batch, queries, heads * d, 83);            // (2, 3, 32)
  attend::KVCache<bfloat16> cache(batch, kv_heads, d, length + 8);
  cache.append(steps_of(K, 0, first), steps_of(V, 0, first));
  cache.append(steps_of(K, first, second), steps_of(V, first, second));
  REQUIRE(cache.size() == length);
  const bool causal = GENERATE(false, true);
  CAPTURE(causal);
  for (Isa isa : attend_test::bf16_levels()) {
    CAPTURE(attend::isa_name(isa));
    const ForcedLevel level(isa);
    Tensor3<bfloat16> lse;
    const Tensor3<bfloat16> O =
        attend::scaled_dot_product_attention(Q, cache, heads, causal ? Mask::causal() : Mask{}, {}, &lse);
    const Ratios worst = attention_ratios(Q, K, V, heads, kv_heads, causal_rule(causal, isa, Q.dimension(1)), O, lse);
    CHECK(worst.output <= 1.0);
    CHECK(worst.lse <= 1.0);
  }
}

TEST_CASE("Attention in bfloat16 against a KVCache<bfloat16>: grouped heads, a window, softcap and ALiBi",
          "[bfloat16]") {
  // 1 and 4 queries (a decoding step, and a few checked at once) and 70 (a prefill: two blocks of core_query_rows)
  // against 700 cached steps, so that the keys come in several blocks of core_key_rows and spans of decode_span (on
  // avx512_bf16 the cache is read in place; the other levels widen it): heads of 64 in groups of 4 and of 16 (more than
  // the few-rows kernel's 8 at a time) and of 128, causal, within a causal window of 100 keys, or with softcap and
  // ALiBi. Against the definition as above; on each level, 1 and 2 threads give the same bits.
  struct Shape {
    Index heads, kv_heads, d;
  };
  const Shape shape = GENERATE(Shape{8, 2, 64}, Shape{16, 1, 64}, Shape{4, 1, 128});
  const Index queries = GENERATE(Index(1), Index(4), Index(70));
  const int variant = GENERATE(0, 1, 2);  // causal; a window; softcap and ALiBi
  CAPTURE(shape.heads, shape.kv_heads, shape.d, queries, variant);
  const Index batch = 1, length = 700, heads = shape.heads, kv_heads = shape.kv_heads, d = shape.d;
  const Tensor3<bfloat16> K = random_bf16(batch, length, kv_heads * d, 84);  // (1, 700, kv_heads * d)
  const Tensor3<bfloat16> V = random_bf16(batch, length, kv_heads * d, 85);  // (1, 700, kv_heads * d)
  const Tensor3<bfloat16> Q = random_bf16(batch, queries, heads * d, 86);    // (1, queries, heads * d)
  attend::KVCache<bfloat16> cache(batch, kv_heads, d, length);
  cache.append(K, V);
  Rule rule = causal_rule(true, Isa::generic, queries);
  Mask mask = Mask::causal();
  attend::ScoreOptions<bfloat16> options;
  if (variant == 1) {
    rule.left = 99;
    mask = Mask::causal() && Mask::window(99, 0);
  } else if (variant == 2) {
    rule.softcap = 5;
    options.softcap = bfloat16(5.0f);
    for (Index h = 0; h < heads; ++h) {  // 2^-(h + 1): exact in bfloat16
      options.alibi_slopes.push_back(bfloat16(std::ldexp(1.0f, -static_cast<int>(h) - 1)));
      rule.slopes.push_back(static_cast<double>(options.alibi_slopes.back()));
    }
  }
  const int threads = attend::num_threads();
  for (Isa isa : attend_test::bf16_levels()) {
    CAPTURE(attend::isa_name(isa));
    const ForcedLevel level(isa);
    rule.weights_rounded = rounds_weights(isa, queries);
    Tensor3<bfloat16> lse, lse_two;
    attend::set_num_threads(1);
    const Tensor3<bfloat16> O = attend::scaled_dot_product_attention(Q, cache, heads, mask, options, &lse);
    attend::set_num_threads(2);
    const Tensor3<bfloat16> two = attend::scaled_dot_product_attention(Q, cache, heads, mask, options, &lse_two);
    attend::set_num_threads(threads);
    const Ratios worst = attention_ratios(Q, K, V, heads, kv_heads, rule, O, lse);
    CHECK(worst.output <= 1.0);
    CHECK(worst.lse <= 1.0);
    CHECK(same_bits(O, two));
    CHECK(same_bits(lse, lse_two));
  }
}

TEST_CASE("Attention in bfloat16: a value of inf reaches only the queries that see its key", "[bfloat16]") {
  // Causal, the last key's value inf: only the last query sees it, and its output is not finite (inf times a positive
  // weight, or NaN); every other query's output is finite, through the path of a few queries and of many.
  const Index queries = GENERATE(Index(4), Index(70));
  CAPTURE(queries);
  const Index batch = 1, length = 300, heads = 4, kv_heads = 1, d = 64;
  const Tensor3<bfloat16> K = random_bf16(batch, length, kv_heads * d, 87);  // (1, 300, 64)
  Tensor3<bfloat16> V = random_bf16(batch, length, kv_heads * d, 88);        // (1, 300, 64)
  V(0, length - 1, 5) = bfloat16(INFINITY);
  const Tensor3<bfloat16> Q = random_bf16(batch, queries, heads * d, 89);  // (1, queries, 256)
  for (Isa isa : attend_test::bf16_levels()) {
    CAPTURE(attend::isa_name(isa));
    const ForcedLevel level(isa);
    const Tensor3<bfloat16> O = attend::scaled_dot_product_attention(Q, K, V, heads, kv_heads, Mask::causal());
    bool others_finite = true, last_finite = true;
    for (Index q = 0; q < queries; ++q)
      for (Index c = 0; c < heads * d; ++c) {
        const bool finite = std::isfinite(static_cast<float>(O(0, q, c)));
        if (q + 1 < queries) others_finite = others_finite && finite;
        if (q + 1 == queries && c % d == 5) last_finite = last_finite && finite;
      }
    CHECK(others_finite);
    CHECK_FALSE(last_finite);
  }
}

TEST_CASE("Attention in bfloat16: a query that sees no key follows the mask's rule", "[bfloat16]") {
  // Valid lengths {0, 300}: batch row 0 sees no key. FullyMasked::uniform gives d2l's mean of every value (in double:
  // within (keys + 16) 2^-24 max |v|, then rounded, 2^-8 of it), FullyMasked::zero a zero row; batch row 1 sees every
  // key, as with no mask. Through the path of a few queries and of many.
  const Index queries = GENERATE(Index(4), Index(70));
  const bool uniform = GENERATE(true, false);
  CAPTURE(queries, uniform);
  const Index batch = 2, length = 300, heads = 4, kv_heads = 2, d = 32;
  const Tensor3<bfloat16> K = random_bf16(batch, length, kv_heads * d, 90);  // (2, 300, 64)
  const Tensor3<bfloat16> V = random_bf16(batch, length, kv_heads * d, 91);  // (2, 300, 64)
  const Tensor3<bfloat16> Q = random_bf16(batch, queries, heads * d, 92);    // (2, queries, 128)
  const Mask mask = Mask{0, length}.when_fully_masked(uniform ? attend::FullyMasked::uniform : attend::FullyMasked::zero);
  const std::array<Index, 3> second{1, 0, 0}, second_q{1, queries, heads * d}, second_kv{1, length, kv_heads * d};
  const Tensor3<bfloat16> Q1 = Q.slice(second, second_q), K1 = K.slice(second, second_kv), V1 = V.slice(second, second_kv);
  for (Isa isa : attend_test::bf16_levels()) {
    CAPTURE(attend::isa_name(isa));
    const ForcedLevel level(isa);
    Tensor3<bfloat16> lse;
    const Tensor3<bfloat16> O = attend::scaled_dot_product_attention(Q, K, V, heads, kv_heads, mask, {}, &lse);
    double worst = 0;
    for (Index h = 0; h < heads; ++h)
      for (Index c = 0; c < d; ++c) {
        const Index g = h / (heads / kv_heads);
        double mean = 0, v_max = 0;
        for (Index j = 0; j < length; ++j) {
          mean += static_cast<double>(V(0, j, g * d + c)) / static_cast<double>(length);
          v_max = std::max(v_max, std::abs(static_cast<double>(V(0, j, g * d + c))));
        }
        const double expected = uniform ? mean : 0.0;
        const double computing = static_cast<double>(length + 16) * std::ldexp(1.0, -24) * v_max;
        const double bound = computing + std::ldexp(1.0, -8) * (std::abs(expected) + computing);
        for (Index q = 0; q < queries; ++q)
          worst = std::max(worst, std::abs(static_cast<double>(O(0, q, h * d + c)) - expected) / bound);
      }
    CHECK(worst <= 1.0);
    CHECK(std::isinf(static_cast<float>(lse(0, 0, 0))));
    // Batch row 1 as its own call without a mask: the same arithmetic, so the same bits.
    const Tensor3<bfloat16> alone = attend::scaled_dot_product_attention(Q1, K1, V1, heads, kv_heads);
    const std::array<Index, 3> extent{1, queries, heads * d};
    CHECK(same_bits(Tensor3<bfloat16>(O.slice(second, extent)), alone));
  }
}

TEST_CASE("RotaryEmbedding<bfloat16>: each pair rotated in float, rounded once", "[bfloat16]") {
  // The definition: (x1 cos a - x2 sin a, x2 cos a + x1 sin a), a = p base^(-2i/d), in double on the same values.
  // Bound: cos and sin rounded to float (2^-24 each), two products and a sum in float (3 units), of |x1| + |x2|; then
  // the rounding to bfloat16, 2^-8 of the result.
  const bool interleaved = GENERATE(false, true);
  CAPTURE(interleaved);
  const Index batch = 2, steps = 6, heads = 3, d = 16, start = 40;
  const Tensor3<bfloat16> X = random_bf16(batch, steps, heads * d, 91);  // (2, 6, 48)
  Tensor3<bfloat16> Y = X;
  const attend::RotaryEmbedding<bfloat16> rope(d, 10000, interleaved);
  rope.apply(Y, heads, start);
  double worst = 0;
  for (Index b = 0; b < batch; ++b)
    for (Index t = 0; t < steps; ++t)
      for (Index h = 0; h < heads; ++h)
        for (Index i = 0; i < d / 2; ++i) {
          const Index k1 = h * d + (interleaved ? 2 * i : i), k2 = h * d + (interleaved ? 2 * i + 1 : i + d / 2);
          const double x1 = static_cast<double>(X(b, t, k1)), x2 = static_cast<double>(X(b, t, k2));
          const double angle = static_cast<double>(start + t) * std::pow(10000.0, -2.0 * static_cast<double>(i) / d);
          const double y1 = x1 * std::cos(angle) - x2 * std::sin(angle);
          const double y2 = x2 * std::cos(angle) + x1 * std::sin(angle);
          const double computing = 5 * std::ldexp(1.0, -24) * (std::abs(x1) + std::abs(x2));
          for (const auto& [got, expected] : {std::pair{Y(b, t, k1), y1}, std::pair{Y(b, t, k2), y2}}) {
            const double bound = computing + std::ldexp(1.0, -8) * (std::abs(expected) + computing);
            worst = std::max(worst, std::abs(static_cast<double>(got) - expected) / bound);
          }
        }
  CHECK(worst <= 1.0);
}

TEST_CASE("MultiHeadAttention<bfloat16> is its projections, attention and output projection, each rounded once",
          "[bfloat16]") {
  // The definition composed of the pieces tested above: W_o(attention(W_q queries, W_k keys, W_v values)), bit for
  // bit, for self-attention (dropout 0.5, never applied: evaluation only) and for distinct keys and values under valid
  // lengths.
  const Index batch = 2, steps = 7, hiddens = 32, heads = 4;
  Generator generator(101);
  attend::MultiHeadAttention<bfloat16> self(hiddens, hiddens, hiddens, hiddens, heads, bfloat16(0.5f), true, generator);
  attend::MultiHeadAttention<bfloat16> cross(24, hiddens, 20, hiddens, heads, bfloat16(0.0f), true, generator);
  const Tensor3<bfloat16> X = random_bf16(batch, steps, hiddens, 102);  // (2, 7, 32)
  const Tensor3<bfloat16> K = random_bf16(batch, 5, 24, 103);           // (2, 5, 24)
  const Tensor3<bfloat16> V = random_bf16(batch, 5, 20, 104);           // (2, 5, 20)
  const auto definition = [&](attend::MultiHeadAttention<bfloat16>& m, const Tensor3<bfloat16>& q,
                              const Tensor3<bfloat16>& k, const Tensor3<bfloat16>& v, const Mask& mask) {
    const Tensor3<bfloat16> context = attend::scaled_dot_product_attention(
        m.W_q().forward(q), m.W_k().forward(k), m.W_v().forward(v), heads, heads, mask);
    return m.W_o().forward(context);  // (batch, q, hiddens)
  };
  for (Isa isa : attend_test::bf16_levels()) {
    CAPTURE(attend::isa_name(isa));
    const ForcedLevel level(isa);
    CHECK(same_bits(self.forward(X, X, X, Mask::causal()), definition(self, X, X, X, Mask::causal())));
    CHECK(same_bits(cross(X, K, V, Mask{4, 2}), definition(cross, X, K, V, Mask{4, 2})));
    self.train();  // evaluation-mode arithmetic whatever the mode: nothing kept, nothing dropped
    CHECK(same_bits(self(X, X, X), definition(self, X, X, X, Mask{})));
    self.eval();
  }
}

TEST_CASE("MultiHeadAttention<bfloat16> runs the tiled path only and keeps no gradients", "[bfloat16]") {
  attend::MultiHeadAttention<bfloat16> attention(16, 16, 16, 16, 2, bfloat16(0.0f));
  REQUIRE_THROWS_AS(attention.set_path(attend::AttentionPath::direct), std::invalid_argument);
  REQUIRE_THROWS_WITH(attention.set_path(attend::AttentionPath::direct),
                      Catch::Contains("bfloat16 takes the tiled path only"));
  CHECK(attention.path() == attend::AttentionPath::automatic);  // unchanged by the refused call
  attention.set_path(attend::AttentionPath::tiled);
  const Tensor3<bfloat16> X = random_bf16(1, 3, 16, 111);
  static_cast<void>(attention(X, X, X));
  REQUIRE_THROWS_AS(attention.attention_weights(), std::logic_error);
  REQUIRE_THROWS_WITH(attention.attention_weights(), Catch::Contains("bfloat16 runs the tiled path only"));
  for (const auto& parameter : attention.parameters()) CHECK(parameter.grad == nullptr);
  CHECK(attention.W_q().weight_grad().size() == 0);
}

TEST_CASE("GroupedQueryAttention<bfloat16>: rotated projections, attention and output projection, each rounded once; "
          "decoding through a KVCache<bfloat16> the same",
          "[bfloat16]") {
  // Llama's shape: 4 query heads on 2 key/value heads of 8, rotary positions, causal. The definition from the pieces
  // tested above, bit for bit: Q = rope(W_q X), K = rope(W_k X), V = W_v X, each rounded once, then attention and W_o.
  // Decoding: steps 0..4, 5..6, then 7..299 and 300..301 (against keys taken in chunks) through the cache, each
  // against the same definition on the cache's steps.
  const Index batch = 2, steps = 302, hiddens = 32, heads = 4, kv_heads = 2, d = 8;
  Generator generator(121);
  attend::GroupedQueryAttention<bfloat16> attention(hiddens, heads, kv_heads, 0, false, bfloat16(0.0f), generator);
  const attend::RotaryEmbedding<bfloat16> rope(d);
  attention.set_rotary(rope);
  const Tensor3<bfloat16> X = random_bf16(batch, steps, hiddens, 122);  // (2, 302, 32)
  // queries rotated from position `start`; keys and values of positions 0 .. end - 1.
  const auto definition = [&](const Tensor3<bfloat16>& queries_in, Index start, Index end) {
    Tensor3<bfloat16> Q = attention.W_q().forward(queries_in);                  // (batch, s, heads * d)
    Tensor3<bfloat16> K = attention.W_k().forward(steps_of(X, 0, end));        // (batch, end, kv_heads * d)
    const Tensor3<bfloat16> V = attention.W_v().forward(steps_of(X, 0, end));  // (batch, end, kv_heads * d)
    rope.apply(Q, heads, start);
    rope.apply(K, kv_heads, 0);
    return attention.W_o().forward(attend::scaled_dot_product_attention(Q, K, V, heads, kv_heads, Mask::causal()));
  };
  for (Isa isa : attend_test::bf16_levels()) {
    CAPTURE(attend::isa_name(isa));
    const ForcedLevel level(isa);
    CHECK(same_bits(attention.forward(X), definition(X, 0, steps)));
    CHECK(same_bits(attention(X), definition(X, 0, steps)));
    attend::KVCache<bfloat16> cache(batch, kv_heads, d, 320);
    CHECK(same_bits(attention(steps_of(X, 0, 5), cache), definition(steps_of(X, 0, 5), 0, 5)));
    CHECK(same_bits(attention(steps_of(X, 5, 2), cache), definition(steps_of(X, 5, 2), 5, 7)));
    CHECK(same_bits(attention(steps_of(X, 7, 293), cache), definition(steps_of(X, 7, 293), 7, 300)));
    CHECK(same_bits(attention(steps_of(X, 300, 2), cache), definition(steps_of(X, 300, 2), 300, 302)));
    CHECK(cache.size() == steps);
  }
}
