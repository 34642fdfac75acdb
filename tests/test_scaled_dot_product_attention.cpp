// scaled_dot_product_attention and its backward pass (attend/scaled_dot_product_attention.hpp): grouped-query heads,
// the score options (scale, softcap, ALiBi, bias) and every part of a mask (valid lengths, causal, window, keep, the
// two rules for a row that sees no key).
//   1. Against the definition, in float64 (tests/reference/make_modern_fixtures.py, checked there against
//      F.scaled_dot_product_attention and flex_attention): output, lse and the autograd gradients of every sdpa_*
//      fixture.
//   2. Against central finite differences in double, on small random cases of each option, independently of 1.
//   3. The two rules for a row that sees no key, from their definitions.
//   4. Maps of the caller's memory, the out-parameter overload and the call against a KVCache: the same bits as the
//      plain call.
//   5. 1 and 2 threads: the same bits, on a decoding shape and a prefill shape.
//   6. Bad input: std::invalid_argument naming the argument.
//   7. One head: DotProductAttention in evaluation mode.
#include <attend/attention_gradients.hpp>
#include <attend/dot_product_attention.hpp>
#include <attend/kv_cache.hpp>
#include <attend/mask.hpp>
#include <attend/scaled_dot_product_attention.hpp>
#include <attend/score_options.hpp>
#include <attend/threads.hpp>
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <support/checks.hpp>
#include <support/finite_difference.hpp>
#include <support/fixture.hpp>
#include <support/gradients.hpp>
#include <support/lens.hpp>
#include <support/masks.hpp>
#include <iterator>
#include <support/matchers.hpp>
#include <support/random_tensor.hpp>
#include <type_traits>
#include <utility>
#include <vector>

using attend::AttentionGradients;
using attend::ConstTensorMap3;
using attend::DotProductAttention;
using attend::FullyMasked;
using attend::Index;
using attend::KVCache;
using attend::Mask;
using attend::Matrix;
using attend::scaled_dot_product_attention;
using attend::scaled_dot_product_attention_backward;
using attend::ScoreOptions;
using attend::Tensor3;
using attend::TensorMap3;
using attend::ValidLens;
using attend_test::exact;
using attend_test::Fixture;
using attend_test::Near;
using attend_test::random_tensor;
using attend_test::Tolerance;
using attend_test::same_bits;
using Catch::Contains;

namespace {

// Bit for bit, with the matcher's description of the first difference on failure.
#define REQUIRE_SAME_BITS(actual, expected)                                   \
  do {                                                                        \
    REQUIRE_THAT(actual, Near(expected, exact<TestType>()));                  \
    REQUIRE(same_bits(actual, expected));                                     \
  } while (false)

template <class Scalar>
double eps() {
  return static_cast<double>(std::numeric_limits<Scalar>::epsilon());
}

// ---- the fixtures' masks and options --------------------------------------------------------------------------------

// A window side of -1 in a fixture is unbounded: a side of num_queries + num_keys reaches past every key from every
// aligned position (p - j < num_keys and j - p < num_queries + num_keys for p = q + num_keys - num_queries).
Index window_side(Index side, Index num_queries, Index num_keys) {
  return side >= 0 ? side : num_queries + num_keys;
}

// valid_lens (per batch row) && causal && window && keep, with the fixture's rule for a row that sees no key
// (fully_masked 1: FullyMasked::zero).
Mask sdpa_mask(const Fixture& fx) {
  const Index num_queries = fx.shape("queries")[1], num_keys = fx.shape("keys")[1];
  Mask mask = attend_test::valid_lens(fx);
  if (fx.index("causal") != 0) mask = mask && Mask::causal();
  const Index left = fx.index("window_left"), right = fx.index("window_right");
  if (left >= 0 || right >= 0)
    mask = mask && Mask::window(window_side(left, num_queries, num_keys), window_side(right, num_queries, num_keys));
  if (fx.has("keep")) mask = mask && Mask::keep(attend_test::booleans(fx, "keep"));
  if (fx.index("fully_masked") != 0) mask = mask.when_fully_masked(FullyMasked::zero);
  return mask;
}

template <class Scalar>
ScoreOptions<Scalar> sdpa_options(const Fixture& fx) {
  ScoreOptions<Scalar> options;
  options.scale = static_cast<Scalar>(fx.scalar("scale"));
  options.softcap = static_cast<Scalar>(fx.scalar("softcap"));
  if (fx.has("alibi_slopes")) {
    const attend::Vector<double> slopes = fx.vector<double>("alibi_slopes");
    for (Index h = 0; h < slopes.size(); ++h) options.alibi_slopes.push_back(static_cast<Scalar>(slopes(h)));
  }
  if (fx.has("bias")) options.bias = fx.tensor3<Scalar>("bias");  // -inf where it hides a key
  return options;
}

// Against the float64 fixtures. Double: rounding error, the house's tolerance<double>() for the output and lse and
// gradient_tolerance<double>() for the gradients. Float: the inputs rounded to float (eps / 2 each), then sums over the
// head width (a score) and over the keys a row sees (the softmax, the output), whose rounding grows as the square root
// of the number of terms (test_numerical_stress.cpp's sum_tolerance): 8 (sqrt(K) + sqrt(d)) eps, relative and
// absolute, for outputs of order 1 (about 4e-6 on the small fixtures, 2e-5 on sdpa_long). The gradients sum those
// errors over queries and keys once more: four times as much. (Measured, every fixture agrees to under 3 eps.)
template <class Scalar>
Tolerance<Scalar> output_tolerance(Index num_keys, Index head_dim) {
  if constexpr (std::is_same_v<Scalar, double>) {
    return attend_test::tolerance<double>();
  } else {
    const double e =
        8 * (std::sqrt(static_cast<double>(num_keys)) + std::sqrt(static_cast<double>(head_dim))) * eps<float>();
    return {e, e};
  }
}
template <class Scalar>
Tolerance<Scalar> gradient_tolerance(Index num_keys, Index head_dim) {
  if constexpr (std::is_same_v<Scalar, double>) {
    return attend_test::gradient_tolerance<double>();
  } else {
    const Tolerance<float> forward = output_tolerance<float>(num_keys, head_dim);
    return {4 * forward.rel, 4 * forward.abs};
  }
}

// ---- a small random case ---------------------------------------------------------------------------------------------

struct Sizes {
  Index batch, queries, keys, heads, kv_heads, head_dim, value_dim;
};

// (rows, queries, keys) standard-normal-ish values in [-2, 2), with -inf at the given flat indices.
Tensor3<double> bias_with_holes(Index rows, Index queries, Index keys, std::uint64_t seed,
                                const std::vector<Index>& holes = {}) {
  Tensor3<double> bias = random_tensor<double>(rows, queries, keys, seed, -2.0, 2.0);
  for (Index i : holes) bias.data()[i] = -std::numeric_limits<double>::infinity();
  return bias;
}

struct FiniteDifferenceCase {
  std::string name;
  Sizes sizes;
  Mask mask;
  ScoreOptions<double> options;
  double input_scale = 1;  // queries and keys uniform in [-input_scale, input_scale)
};

std::vector<FiniteDifferenceCase> finite_difference_cases() {
  std::vector<FiniteDifferenceCase> cases;
  cases.push_back({"GQA, H=4, G=2, no mask", {2, 3, 5, 4, 2, 3, 3}, Mask{}, {}, 1});

  cases.push_back({"causal and window(2, 0), Q < K", {2, 4, 7, 2, 1, 3, 3}, Mask::causal() && Mask::window(2, 0), {}, 1});

  ScoreOptions<double> scaled;
  scaled.scale = 0.7;
  cases.push_back({"window(1, 2), not causal, scale 0.7", {1, 5, 6, 2, 2, 3, 3}, Mask::window(1, 2), scaled, 1});

  ScoreOptions<double> softcap;
  softcap.softcap = 0.8;
  cases.push_back({"softcap 0.8, inputs times 2, causal", {2, 3, 4, 2, 1, 4, 4}, Mask::causal(), softcap, 2});

  ScoreOptions<double> alibi;
  alibi.alibi_slopes = {0.5, 0.25, 0.125, 0.0625};
  cases.push_back({"ALiBi, causal, H=4, G=2", {1, 4, 6, 4, 2, 3, 3}, Mask::causal(), alibi, 1});
  cases.push_back({"ALiBi, no mask, Q > K", {2, 5, 3, 4, 1, 3, 2}, Mask{}, alibi, 1});

  ScoreOptions<double> bias_heads;
  bias_heads.bias = bias_with_holes(2 * 2, 3, 4, 11, {1, 6, 13, 30});  // (B*H, Q, K), never a whole row
  cases.push_back({"bias (B*H, Q, K) with -inf holes", {2, 3, 4, 2, 1, 3, 3}, Mask{}, bias_heads, 1});
  ScoreOptions<double> bias_batch;
  bias_batch.bias = bias_with_holes(2, 3, 5, 12);  // (B, Q, K)
  cases.push_back({"bias (B, Q, K), causal", {2, 3, 5, 4, 2, 3, 3}, Mask::causal(), bias_batch, 1});
  ScoreOptions<double> bias_one;
  bias_one.bias = bias_with_holes(1, 3, 5, 13, {2});  // (1, Q, K)
  cases.push_back({"bias (1, Q, K)", {2, 3, 5, 2, 2, 3, 3}, Mask{}, bias_one, 1});

  Tensor3<bool> keep(1, 4, 6);  // (1, Q, K)
  keep.setConstant(true);
  keep(0, 0, 1) = keep(0, 1, 0) = keep(0, 2, 2) = keep(0, 2, 3) = keep(0, 3, 4) = false;
  cases.push_back({"valid lengths [5, 3] and a keep tensor", {2, 4, 6, 2, 1, 3, 3},
                   Mask(ValidLens{5, 3}) && Mask::keep(keep), {}, 1});

  cases.push_back({"dv != d: d=3, dv=5, H=4, G=2, causal", {2, 3, 5, 4, 2, 3, 5}, Mask::causal(), {}, 1});

  // Rows that see no key: batch row 1 under valid length 0 (uniform: the mean of the values, a gradient to the
  // values only), and the first rows of causal with Q > K (zero: nothing).
  cases.push_back({"valid lengths [4, 0], uniform rule", {2, 3, 4, 2, 1, 3, 2}, Mask(ValidLens{4, 0}), {}, 1});
  cases.push_back({"causal with Q > K, zero rule", {2, 5, 3, 2, 2, 3, 3},
                   Mask::causal().when_fully_masked(FullyMasked::zero), {}, 1});

  ScoreOptions<double> everything;
  everything.scale = 0.4;
  everything.softcap = 1.5;
  everything.alibi_slopes = {0.3, 0.2, 0.1, 0.05};
  everything.bias = bias_with_holes(2, 5, 7, 14, {3});  // (B, Q, K)
  cases.push_back({"everything: causal, window(3, 0), valid lengths [7, 5], softcap, ALiBi, bias, scale, dv != d",
                   {2, 5, 7, 4, 2, 4, 3}, Mask(ValidLens{7, 5}) && Mask::causal() && Mask::window(3, 0), everything,
                   1.5});
  return cases;
}

// The mean of every key's value for value head g of batch row b, feature c: the uniform rule's output.
template <class Scalar>
double mean_value(const Tensor3<Scalar>& values, Index b, Index g, Index value_dim, Index c) {
  double sum = 0;
  for (Index j = 0; j < values.dimension(1); ++j) sum += static_cast<double>(values(b, j, g * value_dim + c));
  return sum / static_cast<double>(values.dimension(1));
}

// Whether a call compiles with a literal nullptr for lse (API.md: "lse may be null"), through each overload that takes
// lse: detected rather than written out, so that the rest of this file still builds and runs when it does not.
template <class S, class = void>
struct returning_call_takes_nullptr : std::false_type {};
template <class S>
struct returning_call_takes_nullptr<
    S, std::void_t<decltype(scaled_dot_product_attention(
           std::declval<const Tensor3<S>&>(), std::declval<const Tensor3<S>&>(), std::declval<const Tensor3<S>&>(),
           Index(1), Index(1), std::declval<const Mask&>(), std::declval<const ScoreOptions<S>&>(), nullptr))>>
    : std::true_type {};
template <class S, class = void>
struct out_call_takes_nullptr : std::false_type {};
template <class S>
struct out_call_takes_nullptr<
    S, std::void_t<decltype(scaled_dot_product_attention(
           std::declval<const Tensor3<S>&>(), std::declval<const Tensor3<S>&>(), std::declval<const Tensor3<S>&>(),
           Index(1), Index(1), std::declval<const Mask&>(), std::declval<const ScoreOptions<S>&>(), nullptr,
           std::declval<TensorMap3<S>>()))>> : std::true_type {};
template <class S, class = void>
struct out_call_into_tensor_takes_nullptr : std::false_type {};
template <class S>
struct out_call_into_tensor_takes_nullptr<
    S, std::void_t<decltype(scaled_dot_product_attention(
           std::declval<const Tensor3<S>&>(), std::declval<const Tensor3<S>&>(), std::declval<const Tensor3<S>&>(),
           Index(1), Index(1), std::declval<const Mask&>(), std::declval<const ScoreOptions<S>&>(), nullptr,
           std::declval<Tensor3<S>&>()))>> : std::true_type {};
template <class S, class = void>
struct cached_call_takes_nullptr : std::false_type {};
template <class S>
struct cached_call_takes_nullptr<
    S, std::void_t<decltype(scaled_dot_product_attention(std::declval<const Tensor3<S>&>(),
                                                         std::declval<const KVCache<S>&>(), Index(1),
                                                         std::declval<const Mask&>(),
                                                         std::declval<const ScoreOptions<S>&>(), nullptr))>>
    : std::true_type {};

// Runs call(); returns its std::invalid_argument's message, or a description of what happened instead.
struct Outcome {
  bool invalid_argument = false;
  std::string what;
};
Outcome outcome_of(const std::function<void()>& call) {
  Outcome outcome;
  try {
    call();
    outcome.what = "no exception";
  } catch (const std::invalid_argument& error) {
    outcome.invalid_argument = true;
    outcome.what = error.what();
  } catch (const std::exception& error) {
    outcome.what = std::string("another exception: ") + error.what();
  }
  return outcome;
}

}  // namespace

// ---- 1. against the definition ---------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("scaled_dot_product_attention gives the definition's output, lse and gradients",
                   "[sdpa][golden][gradients]", float, double) {
  const std::string name =
      GENERATE("sdpa_mha", "sdpa_gqa_causal", "sdpa_mqa_lens", "sdpa_window_causal", "sdpa_window_two_sided",
               "sdpa_keep", "sdpa_softcap", "sdpa_alibi", "sdpa_bias_heads", "sdpa_bias_batch", "sdpa_bias_one",
               "sdpa_everything", "sdpa_zero_rows", "sdpa_decode", "sdpa_decode_few", "sdpa_long");
  CAPTURE(name);
  const Fixture fx(name);
  const Index H = fx.index("num_heads"), G = fx.index("num_kv_heads");
  const Tensor3<TestType> queries = fx.tensor3<TestType>("queries"), keys = fx.tensor3<TestType>("keys"),
                          values = fx.tensor3<TestType>("values");
  const Index K = keys.dimension(1), d = queries.dimension(2) / H;
  const Mask mask = sdpa_mask(fx);
  const ScoreOptions<TestType> options = sdpa_options<TestType>(fx);

  Tensor3<TestType> lse;
  const Tensor3<TestType> output = scaled_dot_product_attention(queries, keys, values, H, G, mask, options, &lse);
  REQUIRE_THAT(output, Near(fx.tensor3<double>("output"), output_tolerance<TestType>(K, d)));
  // lse: -inf exactly where the row sees no key (the matcher wants the same infinity at the same place).
  REQUIRE_THAT(lse, Near(fx.tensor3<double>("lse"), output_tolerance<TestType>(K, d)));
  // Without lse the same output.
  REQUIRE(same_bits(scaled_dot_product_attention(queries, keys, values, H, G, mask, options), output));

  const AttentionGradients<TestType> g = scaled_dot_product_attention_backward(
      queries, keys, values, output, lse, fx.tensor3<TestType>("grad_output"), H, G, mask, options);
  REQUIRE_THAT(g.queries, Near(fx.tensor3<double>("grad_queries"), gradient_tolerance<TestType>(K, d)));
  REQUIRE_THAT(g.keys, Near(fx.tensor3<double>("grad_keys"), gradient_tolerance<TestType>(K, d)));
  REQUIRE_THAT(g.values, Near(fx.tensor3<double>("grad_values"), gradient_tolerance<TestType>(K, d)));

  // A row that sees no key (only sdpa_zero_rows has them, under the zero rule): output and query gradient exactly 0.
  const Tensor3<double> expected_lse = fx.tensor3<double>("lse");
  const Index dv = values.dimension(2) / G;
  Index unseen = 0;
  for (Index b = 0; b < lse.dimension(0); ++b)
    for (Index q = 0; q < lse.dimension(1); ++q)
      for (Index h = 0; h < H; ++h) {
        if (!std::isinf(expected_lse(b, q, h))) continue;
        ++unseen;
        CAPTURE(b, q, h);
        for (Index c = 0; c < dv; ++c) REQUIRE(output(b, q, h * dv + c) == TestType(0));
        for (Index c = 0; c < d; ++c) REQUIRE(g.queries(b, q, h * d + c) == TestType(0));
      }
  CHECK(unseen == (name == "sdpa_zero_rows" ? 2 * 2 * 2 : 0));  // B=2 rows 0 and 1, H=2
}

// ---- 2. against finite differences -------------------------------------------------------------------------------------

TEST_CASE("scaled_dot_product_attention_backward agrees with central finite differences", "[sdpa][gradients]") {
  std::uint64_t seed = 300;
  for (const FiniteDifferenceCase& c : finite_difference_cases()) {
    CAPTURE(c.name);
    const Sizes& s = c.sizes;
    Tensor3<double> q = random_tensor<double>(s.batch, s.queries, s.heads * s.head_dim, ++seed, -c.input_scale,
                                              c.input_scale);
    Tensor3<double> k = random_tensor<double>(s.batch, s.keys, s.kv_heads * s.head_dim, ++seed, -c.input_scale,
                                              c.input_scale);
    Tensor3<double> v = random_tensor<double>(s.batch, s.keys, s.kv_heads * s.value_dim, ++seed);
    const Tensor3<double> dY = random_tensor<double>(s.batch, s.queries, s.heads * s.value_dim, ++seed);

    Tensor3<double> lse;
    const Tensor3<double> output =
        scaled_dot_product_attention(q, k, v, s.heads, s.kv_heads, c.mask, c.options, &lse);
    REQUIRE(output.dimension(0) == s.batch);
    REQUIRE(output.dimension(1) == s.queries);
    REQUIRE(output.dimension(2) == s.heads * s.value_dim);
    REQUIRE(lse.dimension(0) == s.batch);
    REQUIRE(lse.dimension(1) == s.queries);
    REQUIRE(lse.dimension(2) == s.heads);
    const AttentionGradients<double> g =
        scaled_dot_product_attention_backward(q, k, v, output, lse, dY, s.heads, s.kv_heads, c.mask, c.options);

    // L = <dY, attention(q, k, v)>, whose gradient with respect to the output is dY.
    const std::function<double()> loss = [&] {
      return attend_test::dot(dY, scaled_dot_product_attention(q, k, v, s.heads, s.kv_heads, c.mask, c.options));
    };
    REQUIRE_THAT(g.queries, Near(attend_test::finite_difference(q, loss), attend_test::finite_difference_tolerance()));
    REQUIRE_THAT(g.keys, Near(attend_test::finite_difference(k, loss), attend_test::finite_difference_tolerance()));
    REQUIRE_THAT(g.values, Near(attend_test::finite_difference(v, loss), attend_test::finite_difference_tolerance()));
  }
}

// ---- 3. rows that see no key -----------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("A row that sees no key: the mean of the values under the uniform rule, 0 under the zero rule",
                   "[sdpa][mask][gradients]", float, double) {
  // Batch row 1 has valid length 0: every one of its rows sees no key. Causal with Q > K also hides every key from
  // batch row 0's first two queries.
  const Index B = 2, Q = 5, K = 3, H = 4, G = 2, d = 3, dv = 2, group = H / G;
  const Tensor3<TestType> queries = random_tensor<TestType>(B, Q, H * d, 41),
                          keys = random_tensor<TestType>(B, K, G * d, 42),
                          values = random_tensor<TestType>(B, K, G * dv, 43),
                          dY = random_tensor<TestType>(B, Q, H * dv, 44);
  const auto sees_nothing = [&](Index b, Index q) { return b == 1 || q < Q - K; };
  const Tolerance<TestType> close{16 * eps<TestType>(), 16 * eps<TestType>()};

  for (const FullyMasked rule : {FullyMasked::uniform, FullyMasked::zero}) {
    CAPTURE(rule == FullyMasked::uniform ? "uniform" : "zero");
    const Mask mask = (Mask(ValidLens{K, 0}) && Mask::causal()).when_fully_masked(rule);
    Tensor3<TestType> lse;
    const Tensor3<TestType> output = scaled_dot_product_attention(queries, keys, values, H, G, mask, {}, &lse);
    const AttentionGradients<TestType> g =
        scaled_dot_product_attention_backward(queries, keys, values, output, lse, dY, H, G, mask);
    for (Index b = 0; b < B; ++b)
      for (Index q = 0; q < Q; ++q)
        for (Index h = 0; h < H; ++h) {
          CAPTURE(b, q, h);
          if (!sees_nothing(b, q)) {
            REQUIRE(std::isfinite(lse(b, q, h)));
            continue;
          }
          REQUIRE(lse(b, q, h) == -std::numeric_limits<TestType>::infinity());
          for (Index c = 0; c < dv; ++c) {
            const double expected = rule == FullyMasked::zero ? 0.0 : mean_value(values, b, h / group, dv, c);
            const double actual = static_cast<double>(output(b, q, h * dv + c));
            if (rule == FullyMasked::zero) REQUIRE(actual == 0.0);
            REQUIRE_THAT(actual, Catch::Matchers::WithinAbs(expected, close.abs + close.rel * std::abs(expected)));
          }
          for (Index c = 0; c < d; ++c) REQUIRE(g.queries(b, q, h * d + c) == TestType(0));  // no gradient
        }
    // Batch row 1 sees nothing at all: no gradient to its keys; its values get, under the uniform rule, dY / K from
    // every query of the heads that read them, and nothing under the zero rule.
    for (Index j = 0; j < K; ++j) {
      CAPTURE(j);
      for (Index c = 0; c < G * d; ++c) REQUIRE(g.keys(1, j, c) == TestType(0));
      for (Index kv = 0; kv < G; ++kv)
        for (Index c = 0; c < dv; ++c) {
          double expected = 0;
          if (rule == FullyMasked::uniform)
            for (Index q = 0; q < Q; ++q)
              for (Index h = kv * group; h < (kv + 1) * group; ++h)
                expected += static_cast<double>(dY(1, q, h * dv + c)) / static_cast<double>(K);
          const double actual = static_cast<double>(g.values(1, j, kv * dv + c));
          if (rule == FullyMasked::zero) REQUIRE(actual == 0.0);
          REQUIRE_THAT(actual, Catch::Matchers::WithinAbs(expected, close.abs + close.rel * std::abs(expected)));
        }
    }
  }
}

// ---- 4. maps, the out-parameter overload, the cache ---------------------------------------------------------------------

TEMPLATE_TEST_CASE("Maps of the caller's memory and the out-parameter overload give the plain call's bits",
                   "[sdpa][maps]", float, double) {
  const Index B = 2, Q = 3, K = 7, H = 4, G = 2, d = 8, dv = 5;
  const Tensor3<TestType> queries = random_tensor<TestType>(B, Q, H * d, 51),
                          keys = random_tensor<TestType>(B, K, G * d, 52),
                          values = random_tensor<TestType>(B, K, G * dv, 53),
                          dY = random_tensor<TestType>(B, Q, H * dv, 54);
  const Mask mask = Mask(ValidLens{7, 5}) && Mask::causal() && Mask::window(4, 0);
  ScoreOptions<TestType> options;
  options.softcap = TestType(3);
  options.alibi_slopes = {TestType(0.5), TestType(0.25), TestType(0.125), TestType(0.0625)};
  options.bias = random_tensor<TestType>(B, Q, K, 55);  // (B, Q, K)

  Tensor3<TestType> lse;
  const Tensor3<TestType> expected = scaled_dot_product_attention(queries, keys, values, H, G, mask, options, &lse);
  const AttentionGradients<TestType> grads =
      scaled_dot_product_attention_backward(queries, keys, values, expected, lse, dY, H, G, mask, options);

  const ConstTensorMap3<TestType> q_map(queries.data(), B, Q, H * d), k_map(keys.data(), B, K, G * d),
      v_map(values.data(), B, K, G * dv);
  SECTION("read-only maps, and maps mixed with tensors") {
    Tensor3<TestType> lse_maps;
    const Tensor3<TestType> by_maps = scaled_dot_product_attention(q_map, k_map, v_map, H, G, mask, options, &lse_maps);
    REQUIRE_SAME_BITS(by_maps, expected);
    REQUIRE_SAME_BITS(lse_maps, lse);
    const Tensor3<TestType> mixed = scaled_dot_product_attention(queries, k_map, values, H, G, mask, options);
    REQUIRE_SAME_BITS(mixed, expected);
    const Tensor3<TestType> mixed2 = scaled_dot_product_attention(q_map, keys, v_map, H, G, mask, options);
    REQUIRE_SAME_BITS(mixed2, expected);
  }
  SECTION("writable maps as inputs") {
    Tensor3<TestType> q_copy = queries, v_copy = values;
    const TensorMap3<TestType> q_writable(q_copy.data(), B, Q, H * d), v_writable(v_copy.data(), B, K, G * dv);
    const Tensor3<TestType> by_maps = scaled_dot_product_attention(q_writable, k_map, v_writable, H, G, mask, options);
    REQUIRE_SAME_BITS(by_maps, expected);
    REQUIRE(same_bits(q_copy, queries));  // read, not written
    REQUIRE(same_bits(v_copy, values));
  }
  SECTION("the out-parameter overload, into a map and into a Tensor3") {
    const TestType nan = std::numeric_limits<TestType>::quiet_NaN();
    Tensor3<TestType> buffer(B, Q, H * dv);  // (B, Q, H * dv), the caller's
    buffer.setConstant(nan);
    Tensor3<TestType> lse_out;
    scaled_dot_product_attention(queries, keys, values, H, G, mask, options, &lse_out,
                                 TensorMap3<TestType>(buffer.data(), B, Q, H * dv));
    REQUIRE_SAME_BITS(buffer, expected);
    REQUIRE_SAME_BITS(lse_out, lse);

    Tensor3<TestType> out(B, Q, H * dv);
    out.setConstant(nan);
    Tensor3<TestType>* const no_lse = nullptr;  // a typed null (a literal nullptr is the test below)
    scaled_dot_product_attention(q_map, k_map, v_map, H, G, mask, options, no_lse, out);
    REQUIRE_SAME_BITS(out, expected);
    // A second call of the same shape into the same buffers: the same bits again.
    lse_out.setConstant(nan);
    scaled_dot_product_attention(q_map, keys, v_map, H, G, mask, options, &lse_out, out);
    REQUIRE_SAME_BITS(out, expected);
    REQUIRE_SAME_BITS(lse_out, lse);
  }
  SECTION("the backward pass from maps") {
    const AttentionGradients<TestType> by_maps = scaled_dot_product_attention_backward(
        q_map, k_map, v_map, ConstTensorMap3<TestType>(expected.data(), B, Q, H * dv),
        ConstTensorMap3<TestType>(lse.data(), B, Q, H), ConstTensorMap3<TestType>(dY.data(), B, Q, H * dv), H, G, mask,
        options);
    REQUIRE_SAME_BITS(by_maps.queries, grads.queries);
    REQUIRE_SAME_BITS(by_maps.keys, grads.keys);
    REQUIRE_SAME_BITS(by_maps.values, grads.values);
  }
}

TEMPLATE_TEST_CASE("lse may be a literal nullptr in every overload that takes it", "[sdpa][maps]", float, double) {
  // A null lse is "no lse" (API.md); written as nullptr it must not stop the deduction of the scalar type.
  CHECK(returning_call_takes_nullptr<TestType>::value);
  CHECK(out_call_takes_nullptr<TestType>::value);
  CHECK(out_call_into_tensor_takes_nullptr<TestType>::value);
  CHECK(cached_call_takes_nullptr<TestType>::value);
}

TEMPLATE_TEST_CASE("scaled_dot_product_attention against a KVCache gives the plain call's bits on the same keys",
                   "[sdpa][kv_cache]", float, double) {
  const Index B = 2, K = 9, H = 4, G = 2, d = 8;  // the cache holds values as wide as keys: dv = d
  const Tensor3<TestType> keys = random_tensor<TestType>(B, K, G * d, 61), values = random_tensor<TestType>(B, K, G * d, 62);
  ScoreOptions<TestType> options;
  options.alibi_slopes = {TestType(0.5), TestType(0.25), TestType(0.125), TestType(0.0625)};
  const std::pair<Index, Mask> calls[] = {
      {1, Mask{}},                                          // decoding one step
      {3, Mask::causal()},                                  // a few steps, bottom-right
      {4, Mask::causal() && Mask::window(3, 0)},            // Mistral's sliding window
      {2, Mask(ValidLens{9, 6}) && Mask::causal()},         // batch rows of different lengths
  };
  for (const Index capacity : {K, K + 7}) {
    CAPTURE(capacity);
    KVCache<TestType> cache(B, G, d, capacity);
    // In two appends, the second from maps.
    const Index first = 5;
    const Tensor3<TestType> k1 = keys.slice(Eigen::array<Index, 3>{0, 0, 0}, Eigen::array<Index, 3>{B, first, G * d});
    const Tensor3<TestType> v1 = values.slice(Eigen::array<Index, 3>{0, 0, 0}, Eigen::array<Index, 3>{B, first, G * d});
    const Tensor3<TestType> k2 =
        keys.slice(Eigen::array<Index, 3>{0, first, 0}, Eigen::array<Index, 3>{B, K - first, G * d});
    const Tensor3<TestType> v2 =
        values.slice(Eigen::array<Index, 3>{0, first, 0}, Eigen::array<Index, 3>{B, K - first, G * d});
    cache.append(k1, v1);
    cache.append(ConstTensorMap3<TestType>(k2.data(), B, K - first, G * d),
                 ConstTensorMap3<TestType>(v2.data(), B, K - first, G * d));
    REQUIRE(cache.size() == K);

    for (const auto& [Q, mask] : calls) {
      CAPTURE(Q);
      const Tensor3<TestType> queries = random_tensor<TestType>(B, Q, H * d, 63 + static_cast<std::uint64_t>(Q));
      Tensor3<TestType> lse, lse_cached;
      const Tensor3<TestType> expected = scaled_dot_product_attention(queries, keys, values, H, G, mask, options, &lse);
      const Tensor3<TestType> cached = scaled_dot_product_attention(queries, cache, H, mask, options, &lse_cached);
      REQUIRE_SAME_BITS(cached, expected);
      REQUIRE_SAME_BITS(lse_cached, lse);
      const Tensor3<TestType> from_map =
          scaled_dot_product_attention(ConstTensorMap3<TestType>(queries.data(), B, Q, H * d), cache, H, mask, options);
      REQUIRE_SAME_BITS(from_map, expected);
    }
    // Defaults: no mask, no options.
    const Tensor3<TestType> queries = random_tensor<TestType>(B, 2, H * d, 70);
    const Tensor3<TestType> plain = scaled_dot_product_attention(queries, keys, values, H, G);
    const Tensor3<TestType> cached_plain = scaled_dot_product_attention(queries, cache, H);
    REQUIRE_SAME_BITS(cached_plain, plain);
  }
}

// ---- 5. threads -------------------------------------------------------------------------------------------------------

#ifdef _OPENMP
TEMPLATE_TEST_CASE("scaled_dot_product_attention and its backward give the same bits on 1 and 2 threads",
                   "[sdpa][threads]", float, double) {
  struct Shape {
    const char* name;
    Index batch, queries, keys, heads, kv_heads, head_dim;
  };
  const Shape shapes[] = {
      {"decoding, one query", 1, 1, 2000, 8, 2, 64},
      {"decoding, four queries", 1, 4, 2000, 8, 2, 64},
      {"prefill", 2, 300, 300, 8, 2, 64},
  };
  const int before = attend::num_threads();
  std::uint64_t seed = 80;
  for (const Shape& s : shapes) {
    CAPTURE(s.name);
    const Tensor3<TestType> queries = random_tensor<TestType>(s.batch, s.queries, s.heads * s.head_dim, ++seed),
                            keys = random_tensor<TestType>(s.batch, s.keys, s.kv_heads * s.head_dim, ++seed),
                            values = random_tensor<TestType>(s.batch, s.keys, s.kv_heads * s.head_dim, ++seed),
                            dY = random_tensor<TestType>(s.batch, s.queries, s.heads * s.head_dim, ++seed);
    const Mask mask = Mask::causal();
    Tensor3<TestType> output[2], lse[2];
    AttentionGradients<TestType> g[2];
    for (int threads : {1, 2}) {
      attend::set_num_threads(threads);
      const std::size_t t = static_cast<std::size_t>(threads - 1);
      output[t] = scaled_dot_product_attention(queries, keys, values, s.heads, s.kv_heads, mask, {}, &lse[t]);
      g[t] = scaled_dot_product_attention_backward(queries, keys, values, output[t], lse[t], dY, s.heads, s.kv_heads,
                                                   mask);
    }
    attend::set_num_threads(before);
    REQUIRE_SAME_BITS(output[1], output[0]);
    REQUIRE_SAME_BITS(lse[1], lse[0]);
    REQUIRE_SAME_BITS(g[1].queries, g[0].queries);
    REQUIRE_SAME_BITS(g[1].keys, g[0].keys);
    REQUIRE_SAME_BITS(g[1].values, g[0].values);
  }
}
#endif

// ---- 6. bad input -------------------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("scaled_dot_product_attention refuses bad input with a message naming the argument",
                   "[sdpa][bad_input]", float, double) {
  using S = TestType;
  const Index B = 2, Q = 3, K = 4, H = 4, G = 2, d = 2;
  const Tensor3<S> q = random_tensor<S>(B, Q, H * d, 91), k = random_tensor<S>(B, K, G * d, 92),
                   v = random_tensor<S>(B, K, G * d, 93), dY = random_tensor<S>(B, Q, H * d, 94);
  Tensor3<S> lse;
  const Tensor3<S> out = scaled_dot_product_attention(q, k, v, H, G, Mask{}, ScoreOptions<S>{}, &lse);
  const ScoreOptions<S> none;
  const auto sdpa = [](const Tensor3<S>& queries, const Tensor3<S>& keys, const Tensor3<S>& values, Index heads,
                       Index kv_heads, const Mask& mask = {}, const ScoreOptions<S>& options = {}) {
    Tensor3<S> unused_lse;
    scaled_dot_product_attention(queries, keys, values, heads, kv_heads, mask, options, &unused_lse);
  };
  ScoreOptions<S> three_slopes;
  three_slopes.alibi_slopes = {S(0.5), S(0.25), S(0.125)};  // H = 4
  ScoreOptions<S> bias_wide;
  bias_wide.bias = random_tensor<S>(1, Q, 5, 95);  // (1, Q, 5): K = 4
  ScoreOptions<S> bias_rows;
  bias_rows.bias = random_tensor<S>(5, Q, K, 96);  // 5 rows: neither B * H = 8, B = 2 nor 1
  Tensor3<bool> keep(1, Q, 5);                     // (1, Q, 5): K = 4
  keep.setConstant(true);
  Tensor3<S> wrong_out(B, Q, 9);  // (B, Q, 9): H * dv = 8
  Tensor3<S>* const no_lse = nullptr;
  Tensor3<S> wrong_out_buffer(B, Q, 9);
  KVCache<S> cache_batch(3, G, d, 8), cache_dim(B, G, 3, 8), cache_heads(B, 3, d, 8);
  for (KVCache<S>* cache : {&cache_batch, &cache_dim, &cache_heads}) {
    const Tensor3<S> step = random_tensor<S>(cache->batch(), 2, cache->width(), 97);
    cache->append(step, step);
  }

  struct Row {
    std::string name;
    std::function<void()> call;
    std::vector<std::string> phrases;
  };
  const std::vector<Row> rows = {
      {"num_kv_heads 3 does not divide num_heads 4",
       [&] { sdpa(q, random_tensor<S>(B, K, 6, 1), random_tensor<S>(B, K, 6, 2), 4, 3); },
       {"num_kv_heads", "3", "4"}},
      {"num_heads 0", [&] { sdpa(q, k, v, 0, G); }, {"num_heads", "0"}},
      {"num_heads -1", [&] { sdpa(q, k, v, -1, G); }, {"num_heads", "-1"}},
      {"num_kv_heads 0", [&] { sdpa(q, k, v, H, 0); }, {"num_kv_heads", "0"}},
      {"queries of 7 features for 4 heads", [&] { sdpa(random_tensor<S>(B, Q, 7, 3), k, v, H, G); },
       {"queries", "7"}},
      {"keys of 5 features for 2 key/value heads", [&] { sdpa(q, random_tensor<S>(B, K, 5, 4), v, H, G); },
       {"keys", "5"}},
      {"values of 5 features for 2 key/value heads", [&] { sdpa(q, k, random_tensor<S>(B, K, 5, 5), H, G); },
       {"values", "5"}},
      {"keys of another batch than queries", [&] { sdpa(q, random_tensor<S>(5, K, G * d, 6), v, H, G); },
       {"keys", "5"}},
      {"values of another batch than keys", [&] { sdpa(q, k, random_tensor<S>(5, K, G * d, 7), H, G); },
       {"values", "5"}},
      {"values of another number of steps than keys", [&] { sdpa(q, k, random_tensor<S>(B, 6, G * d, 8), H, G); },
       {"values", "6"}},
      {"query heads of 2, key heads of 3", [&] { sdpa(q, random_tensor<S>(B, K, 6, 9), v, H, G); },
       {"keys", "4", "6"}},
      {"3 alibi_slopes for 4 heads", [&] { sdpa(q, k, v, H, G, {}, three_slopes); }, {"alibi_slopes", "3", "4"}},
      {"bias (1, 3, 5) for 4 keys", [&] { sdpa(q, k, v, H, G, {}, bias_wide); }, {"bias", "(1, 3, 5)"}},
      {"bias of 5 rows", [&] { sdpa(q, k, v, H, G, {}, bias_rows); }, {"bias", "(5, 3, 4)"}},
      {"valid lengths of batch 3 for batch 2", [&] { sdpa(q, k, v, H, G, ValidLens{4, 3, 2}); },
       {"valid_lens", "(2,)", "(3,)"}},
      {"keep (1, 3, 5) for 4 keys", [&] { sdpa(q, k, v, H, G, Mask::keep(keep)); }, {"keep", "(1, 3, 5)"}},
      {"out (2, 3, 9) for an output (2, 3, 8)",
       [&] { scaled_dot_product_attention(q, k, v, H, G, Mask{}, none, no_lse, wrong_out); },
       {"(2, 3, 8)", "(2, 3, 9)"}},
      {"a map out (2, 3, 9) for an output (2, 3, 8)",
       [&] {
         scaled_dot_product_attention(q, k, v, H, G, Mask{}, none, no_lse,
                                      TensorMap3<S>(wrong_out_buffer.data(), B, Q, 9));
       },
       {"(2, 3, 8)", "(2, 3, 9)"}},
      {"backward: lse (2, 3, 5)",
       [&] { scaled_dot_product_attention_backward(q, k, v, out, random_tensor<S>(B, Q, 5, 10), dY, H, G); },
       {"lse", "(2, 3, 5)"}},
      {"backward: grad_output (2, 3, 9)",
       [&] { scaled_dot_product_attention_backward(q, k, v, out, lse, random_tensor<S>(B, Q, 9, 11), H, G); },
       {"grad_output", "(2, 3, 9)"}},
      {"backward: output (2, 3, 9)",
       [&] { scaled_dot_product_attention_backward(q, k, v, random_tensor<S>(B, Q, 9, 12), lse, dY, H, G); },
       {"output", "(2, 3, 9)"}},
      {"backward: num_kv_heads 3",
       [&] {
         scaled_dot_product_attention_backward(q, random_tensor<S>(B, K, 6, 13), random_tensor<S>(B, K, 6, 14), out,
                                               lse, dY, 4, 3);
       },
       {"num_kv_heads", "3"}},
      {"backward: 3 alibi_slopes",
       [&] { scaled_dot_product_attention_backward(q, k, v, out, lse, dY, H, G, Mask{}, three_slopes); },
       {"alibi_slopes", "3"}},
      {"backward: valid lengths of batch 3",
       [&] { scaled_dot_product_attention_backward(q, k, v, out, lse, dY, H, G, ValidLens{4, 3, 2}); },
       {"valid_lens", "(3,)"}},
      {"cache of batch 3 for queries of batch 2", [&] { scaled_dot_product_attention(q, cache_batch, H); },
       {"batch", "3"}},
      {"cache of head_dim 3 for queries of head_dim 2", [&] { scaled_dot_product_attention(q, cache_dim, H); },
       {"3"}},
      {"cache of 3 key/value heads for 4 query heads", [&] { scaled_dot_product_attention(q, cache_heads, H); },
       {"num_kv_heads", "3"}},
  };
  for (const Row& row : rows) {
    CAPTURE(row.name);
    const Outcome outcome = outcome_of(row.call);
    INFO("message: " << outcome.what);
    CHECK(outcome.invalid_argument);
    CHECK_THAT(outcome.what, Contains("scaled_dot_product_attention"));
    for (const std::string& phrase : row.phrases) CHECK_THAT(outcome.what, Contains(phrase));
  }
  // The refused out-parameter calls wrote nothing into the caller's buffers... and the good call still works.
  REQUIRE(same_bits(scaled_dot_product_attention(q, k, v, H, G), out));
}

// ---- 7. one head: DotProductAttention --------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("With one head and valid lengths, scaled_dot_product_attention is DotProductAttention in "
                   "evaluation mode",
                   "[sdpa][dot_product]", float, double) {
  const Index B = 2, Q = 4, K = 6, d = 5, dv = 3;
  const Tensor3<TestType> queries = random_tensor<TestType>(B, Q, d, 101), keys = random_tensor<TestType>(B, K, d, 102),
                          values = random_tensor<TestType>(B, K, dv, 103), dY = random_tensor<TestType>(B, Q, dv, 104);
  Matrix<Index> per_query(B, Q);  // every length >= 1: no row is fully masked
  per_query << 1, 2, 6, 3, 5, 4, 1, 9;
  const Mask masks[] = {Mask{}, Mask(ValidLens{6, 2}), Mask(ValidLens{4, 9}), Mask(ValidLens::per_query(per_query)),
                        Mask(ValidLens{6, 5}) && Mask::causal()};
  // Two computations of one softmax, in different orders: a few eps apart.
  const Tolerance<TestType> close{64 * eps<TestType>(), 64 * eps<TestType>()};
  for (std::size_t m = 0; m < std::size(masks); ++m) {
    CAPTURE(m);
    DotProductAttention<TestType> attention(TestType(0));
    attention.eval();
    const Tensor3<TestType> expected = attention(queries, keys, values, masks[m]);
    Tensor3<TestType> lse;
    const Tensor3<TestType> output = scaled_dot_product_attention(queries, keys, values, 1, 1, masks[m], {}, &lse);
    REQUIRE_THAT(output, Near(expected, close));
    const AttentionGradients<TestType> by_module = attention.backward(dY);
    const AttentionGradients<TestType> g =
        scaled_dot_product_attention_backward(queries, keys, values, output, lse, dY, 1, 1, masks[m]);
    REQUIRE_THAT(g.queries, Near(by_module.queries, close));
    REQUIRE_THAT(g.keys, Near(by_module.keys, close));
    REQUIRE_THAT(g.values, Near(by_module.values, close));
  }
}

// The rule DotProductAttention's direct path keeps (tests/test_numerical_stress.cpp): a value that is not finite
// reaches exactly the queries that see its key. A query that does not see key j has the output it has with any
// finite value at j (here 0), whichever way the core takes: a few queries against a cache split into spans, or a
// block of queries; with a causal mask and with a bias that hides j from one head.
TEMPLATE_TEST_CASE("A value that is not finite reaches only the queries that see its key", "[sdpa][stress]", float,
                   double) {
  const attend::Index heads = 4, kv_heads = 2, dim = 8, num_keys = 600, hidden = 590;
  for (const attend::Index num_queries : {attend::Index(3), attend::Index(20)}) {
    for (const bool with_bias : {false, true}) {
      CAPTURE(num_queries, with_bias);
      const Tensor3<TestType> Q = random_tensor<TestType>(1, num_queries, heads * dim, 961);
      const Tensor3<TestType> K = random_tensor<TestType>(1, num_keys, kv_heads * dim, 962);
      Tensor3<TestType> V = random_tensor<TestType>(1, num_keys, kv_heads * dim, 963), V_zero = V;
      for (attend::Index c = 0; c < kv_heads * dim; ++c) {
        V(0, hidden, c) = std::numeric_limits<TestType>::infinity();
        V_zero(0, hidden, c) = TestType(0);
      }
      attend::ScoreOptions<TestType> options;
      if (with_bias) {  // head 1 never sees the key, whatever the mask says
        options.bias = Tensor3<TestType>(heads, num_queries, num_keys);
        options.bias.setZero();
        for (attend::Index q = 0; q < num_queries; ++q)
          options.bias(1, q, hidden) = -std::numeric_limits<TestType>::infinity();
      }
      const Mask mask = Mask::causal();
      const Tensor3<TestType> got = attend::scaled_dot_product_attention(Q, K, V, heads, kv_heads, mask, options);
      const Tensor3<TestType> clean =
          attend::scaled_dot_product_attention(Q, K, V_zero, heads, kv_heads, mask, options);
      for (attend::Index q = 0; q < num_queries; ++q)
        for (attend::Index h = 0; h < heads; ++h) {
          const bool sees = q + (num_keys - num_queries) >= hidden && !(with_bias && h == 1);
          for (attend::Index c = 0; c < dim; ++c) {
            const TestType value = got(0, q, h * dim + c), expected = clean(0, q, h * dim + c);
            CAPTURE(q, h, c, value, expected);
            if (sees) {
              CHECK_FALSE(std::isfinite(value));
            } else {
              CHECK(std::isfinite(value));
              // The block holding the key sums its weights times values in another order: within n eps (Higham's
              // bound for a sum of n terms of at most 1 in size), times 4.
              CHECK(std::abs(value - expected) <= TestType(4 * num_keys) * std::numeric_limits<TestType>::epsilon());
            }
          }
        }
    }
  }
}

TEMPLATE_TEST_CASE("An inf in a key or in grad_output reaches only the gradients that depend on it", "[sdpa][stress]",
                   float, double) {
  // Causal self-attention over n steps (query q sees keys 0 .. q): several blocks of queries and of keys, and key
  // blocks split between pieces. A key row of inf: the queries before it never see it, so their dQ must stay finite
  // (the backward pass multiplies dS, 0 on that key for them, by K). A grad_output row of inf: the keys after its
  // query are not seen by it, so their dK and dV must stay finite (dV multiplies P^T, 0 there, by dO). Each is
  // compared with the same call where the inf is 0 instead, which those gradients do not depend on.
  using T = TestType;
  const attend::Index heads = 4, kv_heads = 2, dim = 8, n = 300, hidden_key = 150, hidden_query = 10;
  const T inf = std::numeric_limits<T>::infinity();
  const Mask mask = Mask::causal();
  const Tensor3<T> Q = random_tensor<T>(1, n, heads * dim, 971), V = random_tensor<T>(1, n, kv_heads * dim, 973);
  const Tensor3<T> K = random_tensor<T>(1, n, kv_heads * dim, 972), dO = random_tensor<T>(1, n, heads * dim, 974);
  const auto gradients = [&](const Tensor3<T>& keys, const Tensor3<T>& grad_output) {
    Tensor3<T> lse;
    const Tensor3<T> out = attend::scaled_dot_product_attention(Q, keys, V, heads, kv_heads, mask, {}, &lse);
    return attend::scaled_dot_product_attention_backward(Q, keys, V, out, lse, grad_output, heads, kv_heads, mask);
  };
  const auto with_row = [](Tensor3<T> X, attend::Index row, T value) {  // X with every entry of one step = value
    for (attend::Index c = 0; c < X.dimension(2); ++c) X(0, row, c) = value;
    return X;
  };
  const auto close = [](T value, T expected) {  // a sum of n terms in another order: Higham's n eps, times 4
    return std::abs(value - expected) <= T(4 * n) * std::numeric_limits<T>::epsilon() * (T(1) + std::abs(expected));
  };
  SECTION("a key of inf: dQ of the queries before it") {
    const AttentionGradients<T> got = gradients(with_row(K, hidden_key, inf), dO);
    const AttentionGradients<T> expected = gradients(with_row(K, hidden_key, T(0)), dO);
    for (attend::Index q = 0; q < n; ++q)
      for (attend::Index c = 0; c < heads * dim; ++c) {
        CAPTURE(q, c);
        if (q < hidden_key) {
          REQUIRE(std::isfinite(got.queries(0, q, c)));
          REQUIRE(close(got.queries(0, q, c), expected.queries(0, q, c)));
        } else {
          REQUIRE_FALSE(std::isfinite(got.queries(0, q, c)));
        }
      }
  }
  SECTION("a grad_output row of inf: dK and dV of the keys after its query") {
    const AttentionGradients<T> got = gradients(K, with_row(dO, hidden_query, inf));
    const AttentionGradients<T> expected = gradients(K, with_row(dO, hidden_query, T(0)));
    for (attend::Index j = hidden_query + 1; j < n; ++j)
      for (attend::Index c = 0; c < kv_heads * dim; ++c) {
        CAPTURE(j, c);
        REQUIRE(std::isfinite(got.keys(0, j, c)));
        REQUIRE(std::isfinite(got.values(0, j, c)));
        REQUIRE(close(got.keys(0, j, c), expected.keys(0, j, c)));
        REQUIRE(close(got.values(0, j, c), expected.values(0, j, c)));
      }
    CHECK_FALSE(std::isfinite(got.values(0, 0, 0)));  // key 0 is seen by the query of inf
  }
}
