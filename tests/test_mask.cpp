// attend::Mask: causal, keep and window masks, their AND with valid lengths, and the rule for a query that sees no
// key.
// Golden tests against PyTorch (fixtures mask_*, made by tests/reference/make_fixtures.py from d2l's code with a
// boolean keep mask), properties from the definitions in mask.hpp, and every bad-input path.
#include <attend/additive_attention.hpp>
#include <attend/attention_path.hpp>
#include <attend/dot_product_attention.hpp>
#include <attend/mask.hpp>
#include <attend/masked_softmax.hpp>
#include <attend/multi_head_attention.hpp>
#include <attend/transpose_qkv.hpp>
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <support/fixture.hpp>
#include <support/fixture_modules.hpp>
#include <support/lens.hpp>
#include <support/masks.hpp>
#include <support/matchers.hpp>
#include <type_traits>
#include <utility>
#include <vector>

using attend::FullyMasked;
using attend::Index;
using attend::Mask;
using attend::Tensor3;
using attend::ValidLens;
using attend_test::booleans;
using attend_test::mask_from;
using Catch::Matchers::Message;

namespace {

// Bit-for-bit equality, through the element-wise matcher (which also fails on NaN).
template <class Scalar>
attend_test::Tolerance<Scalar> exact() {
  return {0, 0};
}

template <class Scalar>
Tensor3<Scalar> random_tensor(Index d0, Index d1, Index d2, std::mt19937& rng, double scale = 2.0) {
  std::normal_distribution<double> normal(0.0, scale);
  Tensor3<Scalar> X(d0, d1, d2);
  for (Index i = 0; i < X.size(); ++i) X.data()[i] = static_cast<Scalar>(normal(rng));
  return X;
}

Tensor3<bool> random_keep(Index batch, Index num_queries, Index num_keys, std::mt19937& rng, double p = 0.6) {
  std::bernoulli_distribution keep(p);
  Tensor3<bool> K(batch, num_queries, num_keys);
  for (Index i = 0; i < K.size(); ++i) K.data()[i] = keep(rng);
  return K;
}

Tensor3<bool> all(Index batch, Index num_queries, Index num_keys, bool value) {
  Tensor3<bool> K(batch, num_queries, num_keys);
  K.setConstant(value);
  return K;
}

// Written from the definitions, independently of mask.hpp:
//   valid lengths  j < len(b, q)
//   causal         j <= q + (num_keys - num_queries)
//   keep           K(b or 0, q, j)
bool lens_keeps(const ValidLens& lens, Index b, Index q, Index j) { return lens.empty() || j < lens.length(b, q); }
bool causal_keeps(Index q, Index j, Index num_queries, Index num_keys) { return j <= q + (num_keys - num_queries); }
bool tensor_keeps(const Tensor3<bool>& K, Index b, Index q, Index j) { return K(K.dimension(0) == 1 ? 0 : b, q, j); }

// Every mask of the property tests, its parts known: (lens, causal, keep or empty tensor).
struct Parts {
  ValidLens lens;
  bool causal = false;
  Tensor3<bool> keep;  // size 0: none

  Mask mask() const {
    Mask m = lens;
    if (causal) m = m && Mask::causal();
    if (keep.size() > 0) m = m && Mask::keep(keep);
    return m;
  }
  bool keeps(Index b, Index q, Index j, Index num_queries, Index num_keys) const {
    return lens_keeps(lens, b, q, j) && (!causal || causal_keeps(q, j, num_queries, num_keys)) &&
           (keep.size() == 0 || tensor_keeps(keep, b, q, j));
  }
};

// A spread of masks for scores of shape (batch, num_queries, num_keys), including fully masked queries.
std::vector<Parts> some_parts(Index batch, Index num_queries, Index num_keys, std::mt19937& rng) {
  std::vector<Index> per_batch(static_cast<std::size_t>(batch));
  for (Index b = 0; b < batch; ++b) per_batch[static_cast<std::size_t>(b)] = (b * 3) % (num_keys + 2);  // 0 first
  attend::Matrix<Index> per_query(batch, num_queries);
  for (Index i = 0; i < per_query.size(); ++i) per_query.data()[i] = static_cast<Index>(rng() % (num_keys + 2));
  std::vector<Parts> parts(8);
  parts[1].lens = ValidLens::per_batch(per_batch);
  parts[2].lens = ValidLens::per_query(per_query);
  parts[3].causal = true;
  parts[4].keep = random_keep(batch, num_queries, num_keys, rng);
  parts[5].keep = random_keep(1, num_queries, num_keys, rng);
  parts[6].lens = ValidLens::per_query(per_query);
  parts[6].causal = true;
  parts[7].keep = random_keep(1, num_queries, num_keys, rng, 0.3);
  parts[7].causal = true;
  return parts;
}

// The whole mask as a keep tensor (batch, num_queries, num_keys), from the definitions.
Tensor3<bool> as_keep(const std::vector<const Parts*>& all_parts, Index batch, Index num_queries, Index num_keys) {
  Tensor3<bool> K(batch, num_queries, num_keys);
  for (Index b = 0; b < batch; ++b)
    for (Index q = 0; q < num_queries; ++q)
      for (Index j = 0; j < num_keys; ++j) {
        bool kept = true;
        for (const Parts* p : all_parts) kept = kept && p->keeps(b, q, j, num_queries, num_keys);
        K(b, q, j) = kept;
      }
  return K;
}

}  // namespace

// ---- golden: PyTorch with a boolean keep mask --------------------------------------------------------------------

TEMPLATE_TEST_CASE("masked_softmax with a Mask matches PyTorch", "[mask][golden]", float, double) {
  const auto name = GENERATE(as<std::string>{}, "mask_softmax_all_parts_uniform", "mask_softmax_all_parts_zero");
  CAPTURE(name);
  const attend_test::Fixture fixture(name);
  const Tensor3<TestType> weights = attend::masked_softmax(fixture.tensor3<TestType>("X"), mask_from(fixture));
  REQUIRE_THAT(weights, attend_test::Near(fixture.tensor3<double>("output"), attend_test::tolerance<TestType>()));
}

TEMPLATE_TEST_CASE("DotProductAttention with a Mask matches PyTorch (output and weights)", "[mask][golden]", float,
                   double) {
  const auto name = GENERATE(as<std::string>{}, "mask_dot_causal_square", "mask_dot_causal_fewer_queries",
                             "mask_dot_causal_more_queries_uniform", "mask_dot_causal_more_queries_zero",
                             "mask_dot_keep_broadcast", "mask_dot_keep_batch", "mask_dot_keep_lens_uniform",
                             "mask_dot_keep_lens_zero", "mask_dot_causal_lens_uniform", "mask_dot_causal_lens_zero");
  CAPTURE(name);
  const attend_test::Fixture fixture(name);
  attend::DotProductAttention<TestType> attention(TestType(0.5));
  attention.eval();
  const Tensor3<TestType> output = attention(fixture.tensor3<TestType>("queries"), fixture.tensor3<TestType>("keys"),
                                             fixture.tensor3<TestType>("values"), mask_from(fixture));
  const auto tolerance = attend_test::tolerance<TestType>();
  REQUIRE_THAT(output, attend_test::Near(fixture.tensor3<double>("output"), tolerance));
  REQUIRE_THAT(attention.attention_weights(),
               attend_test::Near(fixture.tensor3<double>("attention_weights"), tolerance));
}

TEMPLATE_TEST_CASE("MultiHeadAttention with a Mask matches d2l's code with a keep mask", "[mask][golden]", float,
                   double) {
  const auto name = GENERATE(as<std::string>{}, "mask_mha_causal", "mask_mha_keep_broadcast", "mask_mha_keep_lens",
                             "mask_mha_causal_lens_uniform", "mask_mha_causal_lens_zero");
  CAPTURE(name);
  const attend_test::Fixture fixture(name);
  auto attention = attend_test::mha_from_fixture<TestType>(fixture);
  const Tensor3<TestType> output = attention(fixture.tensor3<TestType>("queries"), fixture.tensor3<TestType>("keys"),
                                             fixture.tensor3<TestType>("values"), mask_from(fixture));
  const auto tolerance = attend_test::tolerance<TestType>();
  REQUIRE_THAT(output, attend_test::Near(fixture.tensor3<double>("output"), tolerance));
  REQUIRE_THAT(attention.attention_weights(),
               attend_test::Near(fixture.tensor3<double>("attention_weights"), tolerance));
}

// The script builds combined_keep from the formulas (causal bottom-right aligned); Mask::keeps must agree everywhere,
// and the combined tensor alone, as a keep mask, must give the same weights as the parts.
TEMPLATE_TEST_CASE("the fixtures' masks keep exactly the keys the script's formulas keep", "[mask][golden]", float,
                   double) {
  const auto name = GENERATE(as<std::string>{}, "mask_softmax_all_parts_uniform", "mask_dot_causal_square",
                             "mask_dot_causal_fewer_queries", "mask_dot_causal_more_queries_zero",
                             "mask_dot_keep_broadcast", "mask_dot_keep_lens_zero", "mask_dot_causal_lens_uniform",
                             "mask_mha_keep_lens", "mask_mha_causal_lens_zero");
  CAPTURE(name);
  const attend_test::Fixture fixture(name);
  const Mask mask = mask_from(fixture);
  const Tensor3<bool> combined = booleans(fixture, "combined_keep");  // (batch, queries, keys)
  const Index batch = combined.dimension(0), num_queries = combined.dimension(1), num_keys = combined.dimension(2);
  REQUIRE_NOTHROW(mask.require_shape(batch, num_queries, num_keys, "test"));
  for (Index b = 0; b < batch; ++b)
    for (Index q = 0; q < num_queries; ++q)
      for (Index j = 0; j < num_keys; ++j) {
        CAPTURE(b, q, j);
        REQUIRE(mask.keeps(b, q, j, num_queries, num_keys) == combined(b, q, j));
      }
  std::mt19937 rng(3);
  const Tensor3<TestType> X = random_tensor<TestType>(batch, num_queries, num_keys, rng);
  REQUIRE_THAT(attend::masked_softmax(X, mask),
               attend_test::Near(attend::masked_softmax(X, Mask::keep(combined).when_fully_masked(mask.fully_masked())),
                                 exact<TestType>()));
}

// ---- semantics --------------------------------------------------------------------------------------------------

TEST_CASE("causal is aligned bottom-right: query i sees keys j <= i + (keys - queries)", "[mask]") {
  const Mask causal = Mask::causal();
  CHECK(causal.is_causal());
  CHECK_FALSE(causal.has_elementwise());
  // As many queries as keys: the lower triangle.
  for (Index q = 0; q < 4; ++q) CHECK(causal.visible_prefix(0, q, 4, 4) == q + 1);
  // Fewer queries than keys (a decoder with 3 cached keys): the last query sees all 5 keys.
  CHECK(causal.visible_prefix(0, 0, 2, 5) == 4);
  CHECK(causal.visible_prefix(0, 1, 2, 5) == 5);
  // More queries than keys: the first 5 - 3 = 2 queries see nothing, the last sees every key.
  const Index expected[] = {0, 0, 1, 2, 3};
  for (Index q = 0; q < 5; ++q) CHECK(causal.visible_prefix(1, q, 5, 3) == expected[q]);
  CHECK_FALSE(causal.keeps(0, 0, 0, 5, 3));
  CHECK(causal.keeps(0, 4, 2, 5, 3));
}

TEST_CASE("visible_prefix is the minimum of the prefix limits, and keep_row adds per-element work", "[mask]") {
  const Mask none;
  CHECK(none.empty());
  CHECK(none.visible_prefix(0, 0, 3, 7) == 7);
  CHECK(none.keep_row(0, 0) == nullptr);

  const Mask lens = ValidLens{9, 2};
  CHECK_FALSE(lens.empty());
  CHECK(lens.visible_prefix(0, 1, 3, 7) == 7);  // a length past the keys masks nothing
  CHECK(lens.visible_prefix(1, 1, 3, 7) == 2);

  const Mask both = ValidLens{9, 2} && Mask::causal();  // 3 queries, 7 keys: causal limits 5, 6, 7
  CHECK(both.visible_prefix(0, 0, 3, 7) == 5);
  CHECK(both.visible_prefix(0, 2, 3, 7) == 7);
  CHECK(both.visible_prefix(1, 0, 3, 7) == 2);
  CHECK_FALSE(both.has_elementwise());

  Tensor3<bool> K = all(1, 3, 7, true);
  K(0, 1, 3) = false;
  const Mask with_keep = both && Mask::keep(K);
  CHECK(with_keep.has_elementwise());
  CHECK(with_keep.visible_prefix(0, 1, 3, 7) == 6);  // the prefix limit ignores the keep tensor
  REQUIRE(with_keep.keep_row(1, 1) != nullptr);
  CHECK_FALSE(with_keep.keep_row(1, 1)[3]);  // batch row 1 reads the broadcast row 0
  CHECK_FALSE(with_keep.keeps(0, 1, 3, 3, 7));
  CHECK(with_keep.keeps(0, 1, 4, 3, 7));
}

TEST_CASE("visible_keys describes exactly the keys of visible_prefix and keep_row, its range as narrow as can be",
          "[mask]") {
  // The definition (mask.hpp): key j of query q is visible when j < visible_prefix(b, q) and the keep row, if any,
  // holds true at j. visible_keys must see exactly those keys, visit them in order, and have first and last - 1 at
  // the first and last of them (first == last when there is none).
  std::mt19937 rng(29);
  const Index batch = 2, num_queries = 6, num_keys = 9;
  std::bernoulli_distribution coin(0.35);
  Tensor3<bool> K(batch, num_queries, num_keys);  // sparse, so that rows with no kept key and holes at the ends occur
  for (Index i = 0; i < K.size(); ++i) K.data()[i] = coin(rng);
  for (Index j = 0; j < num_keys; ++j) K(1, 0, j) = false;  // a row that keeps nothing
  const Mask masks[] = {Mask{},
                        Mask::causal(),
                        Mask(ValidLens{4, 0}),
                        Mask::keep(K),
                        Mask(ValidLens{7, 3}) && Mask::causal() && Mask::keep(K)};
  for (std::size_t m = 0; m < std::size(masks); ++m)
    for (Index b = 0; b < batch; ++b)
      for (Index q = 0; q < num_queries; ++q) {
        CAPTURE(m, b, q);
        const Mask& mask = masks[m];
        const Index prefix = mask.visible_prefix(b, q, num_queries, num_keys);
        const bool* keep = mask.keep_row(b, q);
        std::vector<Index> expected;
        for (Index j = 0; j < prefix; ++j)
          if (keep == nullptr || keep[j]) expected.push_back(j);
        const attend::VisibleKeys keys = mask.visible_keys(b, q, num_queries, num_keys);
        std::vector<Index> visited;
        keys.for_each([&](Index j) { visited.push_back(j); });
        CHECK(visited == expected);
        CHECK(keys.none() == expected.empty());
        if (!expected.empty()) {
          CHECK(keys.first == expected.front());
          CHECK(keys.last == expected.back() + 1);
        }
        for (Index j = 0; j < num_keys; ++j) {
          const bool visible = std::find(expected.begin(), expected.end(), j) != expected.end();
          CHECK(keys.sees(j) == visible);
          CHECK(mask.keeps(b, q, j, num_queries, num_keys) == visible);
        }
        std::vector<Index> middle;  // a window of the keys, as the tiled path visits a key block
        keys.for_each(2, 6, [&](Index j) { middle.push_back(j); });
        std::vector<Index> expected_middle;
        for (Index j : expected)
          if (j >= 2 && j < 6) expected_middle.push_back(j);
        CHECK(middle == expected_middle);
        // The range's part inside a block of keys, counted from its first key, as the tiled path cuts a row to it.
        for (const Index k0 : {Index(0), Index(2), Index(5), Index(9)})
          for (const Index n : {Index(0), Index(1), Index(4)}) {
            CAPTURE(k0, n);
            const attend::VisibleKeys::Span span = keys.within(k0, n);
            const Index lo = expected.empty() ? 0 : std::max(expected.front(), k0);
            const Index hi = expected.empty() ? 0 : std::min(expected.back() + 1, k0 + n);
            CHECK((0 <= span.lo && span.lo <= span.hi && span.hi <= n));
            CHECK(keys.overlaps(k0, n) == (lo < hi));
            if (lo < hi) {
              CHECK((span.lo == lo - k0 && span.hi == hi - k0));
            } else {
              CHECK(span.lo == span.hi);
            }
          }
      }
}

TEMPLATE_TEST_CASE("a && b keeps exactly the element-wise AND, whatever the parts", "[mask]", float, double) {
  std::mt19937 rng(11);
  const Index batch = 3, num_queries = 4, num_keys = 6;
  const Tensor3<TestType> X = random_tensor<TestType>(batch, num_queries, num_keys, rng, 3.0);
  const std::vector<Parts> parts = some_parts(batch, num_queries, num_keys, rng);
  for (std::size_t i = 0; i < parts.size(); ++i)
    for (std::size_t j = 0; j < parts.size(); ++j) {
      CAPTURE(i, j);
      const Mask both = parts[i].mask() && parts[j].mask();
      const Tensor3<bool> expected = as_keep({&parts[i], &parts[j]}, batch, num_queries, num_keys);
      for (Index b = 0; b < batch; ++b)
        for (Index q = 0; q < num_queries; ++q)
          for (Index k = 0; k < num_keys; ++k) {
            CAPTURE(b, q, k);
            REQUIRE(both.keeps(b, q, k, num_queries, num_keys) == expected(b, q, k));
          }
      for (const FullyMasked rule : {FullyMasked::uniform, FullyMasked::zero}) {
        REQUIRE_THAT(attend::masked_softmax(X, both.when_fully_masked(rule)),
                     attend_test::Near(attend::masked_softmax(X, Mask::keep(expected).when_fully_masked(rule)),
                                       exact<TestType>()));
      }
    }
}

// Valid lengths through a Mask take the "replace the tail" path; the same keys as a keep tensor take the per-element
// path. Both must give the ValidLens result bit for bit, in every module.
TEMPLATE_TEST_CASE("ValidLens as a Mask equals the ValidLens result bit for bit", "[mask]", float, double) {
  std::mt19937 rng(12);
  const Index batch = 2, num_queries = 3, num_keys = 5;
  attend::Matrix<Index> per_query(batch, num_queries);
  per_query << 0, 2, 7, 5, 1, 3;
  for (const ValidLens& lens : {ValidLens{2, 0}, ValidLens::per_query(per_query)}) {
    Parts parts;
    parts.lens = lens;
    const Tensor3<bool> K = as_keep({&parts}, batch, num_queries, num_keys);
    const Mask as_mask = lens, as_keep_mask = Mask::keep(K);

    const Tensor3<TestType> X = random_tensor<TestType>(batch, num_queries, num_keys, rng);
    const Tensor3<TestType> reference = attend::masked_softmax(X, lens);
    REQUIRE_THAT(attend::masked_softmax(X, as_mask), attend_test::Near(reference, exact<TestType>()));
    REQUIRE_THAT(attend::masked_softmax(X, as_keep_mask), attend_test::Near(reference, exact<TestType>()));

    const Tensor3<TestType> queries = random_tensor<TestType>(batch, num_queries, 4, rng);
    const Tensor3<TestType> keys = random_tensor<TestType>(batch, num_keys, 4, rng);
    const Tensor3<TestType> values = random_tensor<TestType>(batch, num_keys, 6, rng);
    attend::DotProductAttention<TestType> dot(TestType(0));
    const Tensor3<TestType> dot_reference = dot(queries, keys, values, lens);
    const Tensor3<TestType> dot_weights = dot.attention_weights();
    for (const Mask* mask : {&as_mask, &as_keep_mask}) {
      REQUIRE_THAT(dot(queries, keys, values, *mask), attend_test::Near(dot_reference, exact<TestType>()));
      REQUIRE_THAT(dot.attention_weights(), attend_test::Near(dot_weights, exact<TestType>()));
    }

    attend::MultiHeadAttention<TestType> mha(4, 4, 6, 8, 2, TestType(0), true);
    const Tensor3<TestType> mha_reference = mha(queries, keys, values, lens);
    const Tensor3<TestType> mha_weights = mha.attention_weights();
    for (const Mask* mask : {&as_mask, &as_keep_mask}) {
      REQUIRE_THAT(mha(queries, keys, values, *mask), attend_test::Near(mha_reference, exact<TestType>()));
      REQUIRE_THAT(mha.attention_weights(), attend_test::Near(mha_weights, exact<TestType>()));
    }
  }
}

TEMPLATE_TEST_CASE("a keep mask of all true equals no mask, in every entry point", "[mask]", float, double) {
  std::mt19937 rng(13);
  const Index batch = 2, num_queries = 3, num_keys = 4;
  const Tensor3<TestType> X = random_tensor<TestType>(batch, num_queries, num_keys, rng);
  const Tensor3<TestType> queries = random_tensor<TestType>(batch, num_queries, 5, rng);
  const Tensor3<TestType> keys = random_tensor<TestType>(batch, num_keys, 5, rng);
  const Tensor3<TestType> values = random_tensor<TestType>(batch, num_keys, 3, rng);
  for (const Index keep_batch : {Index(1), batch}) {
    CAPTURE(keep_batch);
    const Mask everything = Mask::keep(all(keep_batch, num_queries, num_keys, true));
    REQUIRE_THAT(attend::masked_softmax(X, everything),
                 attend_test::Near(attend::masked_softmax(X), exact<TestType>()));

    attend::DotProductAttention<TestType> dot(TestType(0));
    const Tensor3<TestType> dot_none = dot(queries, keys, values);
    const Tensor3<TestType> dot_weights = dot.attention_weights();
    REQUIRE_THAT(dot(queries, keys, values, everything), attend_test::Near(dot_none, exact<TestType>()));
    REQUIRE_THAT(dot.attention_weights(), attend_test::Near(dot_weights, exact<TestType>()));

    attend::AdditiveAttention<TestType> additive(5, 5, 7, TestType(0));
    const Tensor3<TestType> additive_none = additive(queries, keys, values);
    REQUIRE_THAT(additive(queries, keys, values, everything), attend_test::Near(additive_none, exact<TestType>()));

    attend::MultiHeadAttention<TestType> mha(5, 5, 3, 10, 5, TestType(0));
    const Tensor3<TestType> mha_none = mha(queries, keys, values);
    REQUIRE_THAT(mha(queries, keys, values, everything), attend_test::Near(mha_none, exact<TestType>()));
  }
}

// The rule for a query that sees no key, on every way of getting there, in evaluation and in training mode (with
// dropout): uniform weights 1/keys and the mean of the values, or zero weights and a zero output; never NaN.
TEMPLATE_TEST_CASE("a fully masked query gets its rule and never NaN", "[mask]", float, double) {
  std::mt19937 rng(14);
  const Index batch = 2, num_queries = 5, num_keys = 3;
  // Large scores: a -inf rule would overflow nothing here, but a careless max-subtraction would.
  const Tensor3<TestType> queries = random_tensor<TestType>(batch, num_queries, 4, rng, 30.0);
  const Tensor3<TestType> keys = random_tensor<TestType>(batch, num_keys, 4, rng, 30.0);
  const Tensor3<TestType> values = random_tensor<TestType>(batch, num_keys, 2, rng);
  Tensor3<bool> K = random_keep(batch, num_queries, num_keys, rng);
  for (Index j = 0; j < num_keys; ++j) K(1, 4, j) = false;
  attend::Matrix<Index> per_query(batch, num_queries);
  per_query << 3, 0, 2, 1, 3, 2, 3, 0, 1, 3;
  const Mask masks[] = {ValidLens{0, 2}, ValidLens::per_query(per_query), Mask::causal(), Mask::keep(K),
                        Mask::keep(K) && Mask::causal() && ValidLens::per_query(per_query)};

  for (const Mask& base : masks) {
    for (const FullyMasked rule : {FullyMasked::uniform, FullyMasked::zero}) {
      CAPTURE(attend::to_string(rule));
      const Mask mask = base.when_fully_masked(rule);
      REQUIRE(mask.fully_masked() == rule);
      for (const bool training : {false, true}) {
        CAPTURE(training);
        attend::DotProductAttention<TestType> dot(TestType(0.25));
        attend::MultiHeadAttention<TestType> mha(4, 4, 2, 4, 2, TestType(0.25));
        if (!training) {
          dot.eval();
          mha.eval();
        }
        const Tensor3<TestType> out = dot(queries, keys, values, mask);
        const Tensor3<TestType> mha_out = mha(queries, keys, values, mask);
        const Tensor3<TestType> X = random_tensor<TestType>(batch, num_queries, num_keys, rng, 1e3);
        const Tensor3<TestType> softmax = attend::masked_softmax(X, mask);
        for (const Tensor3<TestType>* T :
             {&out, &dot.attention_weights(), &mha_out, &mha.attention_weights(), &softmax})
          for (Index i = 0; i < T->size(); ++i) REQUIRE(std::isfinite(T->data()[i]));

        Index blind = 0;
        for (Index b = 0; b < batch; ++b)
          for (Index q = 0; q < num_queries; ++q) {
            bool sees_a_key = false;
            for (Index j = 0; j < num_keys; ++j) sees_a_key = sees_a_key || mask.keeps(b, q, j, num_queries, num_keys);
            if (sees_a_key) continue;
            ++blind;
            CAPTURE(b, q);
            const TestType expected = rule == FullyMasked::zero ? TestType(0) : TestType(1) / TestType(num_keys);
            for (Index j = 0; j < num_keys; ++j) {
              REQUIRE(dot.attention_weights()(b, q, j) == expected);
              REQUIRE(softmax(b, q, j) == expected);
              for (Index h = 0; h < 2; ++h) REQUIRE(mha.attention_weights()(b * 2 + h, q, j) == expected);
            }
            if (rule == FullyMasked::zero) {
              for (Index v = 0; v < 2; ++v) REQUIRE(out(b, q, v) == TestType(0));
            } else if (!training) {
              for (Index v = 0; v < 2; ++v) {
                const TestType mean = (values(b, 0, v) + values(b, 1, v) + values(b, 2, v)) / TestType(3);
                REQUIRE_THAT(out(b, q, v), Catch::Matchers::WithinAbs(mean, 1e-5));
              }
            }
          }
        REQUIRE(blind > 0);
      }
    }
  }
}

// The documented range: with largest kept score m, a masked key (score -1e6) has weight exactly 0 once
// -1e6 - m is below exp's underflow, m > -1e6 + 87.34 (float) or m > -1e6 + 708.40 (double); just inside it the
// weight is tiny but not 0, as in d2l.
TEMPLATE_TEST_CASE("a masked key's weight is exactly 0 in the documented range of kept scores", "[mask]", float,
                   double) {
  const bool is_float = std::is_same<TestType, float>::value;
  const TestType outside = is_float ? TestType(-1e6 + 88) : TestType(-1e6 + 709);
  const TestType inside = is_float ? TestType(-1e6 + 80) : TestType(-1e6 + 700);
  Tensor3<bool> K(1, 1, 2);
  K.setValues({{{true, false}}});
  for (const Mask& mask : {Mask(ValidLens{1}), Mask::keep(K), Mask::keep(K) && Mask::causal()}) {
    Tensor3<TestType> X(1, 1, 2);
    X.setValues({{{outside, TestType(5)}}});
    const Tensor3<TestType> far = attend::masked_softmax(X, mask);
    CHECK(far(0, 0, 1) == TestType(0));
    CHECK(far(0, 0, 0) == TestType(1));
    X.setValues({{{inside, TestType(5)}}});
    const Tensor3<TestType> near = attend::masked_softmax(X, mask);
    CHECK(near(0, 0, 1) > TestType(0));
    CHECK(near(0, 0, 1) < TestType(1e-30));
  }
}

// d2l applies the valid lengths of batch row b to each of its heads (repeat_interleave); a Mask does the same. The
// literal route: transpose_qkv, DotProductAttention on (batch * heads) rows with the keep mask repeated per head.
TEMPLATE_TEST_CASE("MultiHeadAttention applies batch row b's mask to all its heads", "[mask]", float, double) {
  std::mt19937 rng(15);
  const Index batch = 2, num_queries = 3, num_keys = 5, heads = 3;
  const Tensor3<TestType> queries = random_tensor<TestType>(batch, num_queries, 4, rng);
  const Tensor3<TestType> keys = random_tensor<TestType>(batch, num_keys, 6, rng);
  const Tensor3<TestType> values = random_tensor<TestType>(batch, num_keys, 2, rng);
  const Tensor3<bool> K = random_keep(batch, num_queries, num_keys, rng);
  const Mask mask = Mask::keep(K) && Mask::causal() && ValidLens{4, 2};
  Tensor3<bool> repeated(batch * heads, num_queries, num_keys);  // (batch * heads, q, k)
  for (Index b = 0; b < batch; ++b)
    for (Index h = 0; h < heads; ++h)
      for (Index q = 0; q < num_queries; ++q)
        for (Index j = 0; j < num_keys; ++j) repeated(b * heads + h, q, j) = mask.keeps(b, q, j, num_queries, num_keys);

  attend::MultiHeadAttention<TestType> attention(6, 4, 2, 12, heads, TestType(0.5), true);
  attention.eval();
  const Tensor3<TestType> fast = attention(queries, keys, values, mask);
  attend::DotProductAttention<TestType> dot(TestType(0.5));
  dot.eval();
  const Tensor3<TestType> per_head =
      dot(attend::transpose_qkv(attention.W_q()(queries), heads), attend::transpose_qkv(attention.W_k()(keys), heads),
          attend::transpose_qkv(attention.W_v()(values), heads), Mask::keep(repeated));
  const Tensor3<TestType> literal = attention.W_o()(attend::transpose_output(per_head, heads));
  const attend_test::Tolerance<TestType> same{16 * std::numeric_limits<TestType>::epsilon(),
                                              16 * std::numeric_limits<TestType>::epsilon()};
  REQUIRE_THAT(fast, attend_test::Near(literal, same));
  REQUIRE_THAT(attention.attention_weights(), attend_test::Near(dot.attention_weights(), same));
}

TEMPLATE_TEST_CASE("AdditiveAttention takes a Mask like the others", "[mask]", float, double) {
  std::mt19937 rng(16);
  const Tensor3<TestType> queries = random_tensor<TestType>(2, 4, 3, rng);
  const Tensor3<TestType> keys = random_tensor<TestType>(2, 3, 5, rng);
  const Tensor3<TestType> values = random_tensor<TestType>(2, 3, 2, rng);
  attend::AdditiveAttention<TestType> attention(5, 3, 6, TestType(0));
  const Mask mask = (Mask::causal() && ValidLens{3, 1}).when_fully_masked(FullyMasked::zero);
  const Tensor3<TestType> output = attention(queries, keys, values, mask);
  // Scores by d2l's formula, w_v . tanh(W_q q + W_k k), then the same mask through masked_softmax.
  Tensor3<TestType> scores(2, 4, 3);  // (batch, queries, keys)
  const auto q = attention.W_q()(queries);
  const auto k = attention.W_k()(keys);
  for (Index b = 0; b < 2; ++b)
    for (Index i = 0; i < 4; ++i)
      for (Index j = 0; j < 3; ++j) {
        TestType s = 0;
        for (Index h = 0; h < 6; ++h) s += attention.w_v().weight()(0, h) * std::tanh(q(b, i, h) + k(b, j, h));
        scores(b, i, j) = s;
      }
  const attend_test::Tolerance<TestType> close{64 * std::numeric_limits<TestType>::epsilon(),
                                               64 * std::numeric_limits<TestType>::epsilon()};
  REQUIRE_THAT(attention.attention_weights(), attend_test::Near(attend::masked_softmax(scores, mask), close));
  // Causal with 4 queries and 3 keys: query 0 sees no key in either batch row (and, by the zero rule, gets a zero
  // output row); query 1 sees key 0, which both valid lengths keep.
  for (Index b = 0; b < 2; ++b)
    for (Index v = 0; v < 2; ++v) CHECK(output(b, 0, v) == TestType(0));
  CHECK(output(0, 1, 0) != TestType(0));
}

TEST_CASE("the rule for a fully masked query travels through &&", "[mask]") {
  CHECK(Mask().fully_masked() == FullyMasked::uniform);
  CHECK(Mask::causal().fully_masked() == FullyMasked::uniform);
  const Mask zero = Mask::causal().when_fully_masked(FullyMasked::zero);
  CHECK(zero.fully_masked() == FullyMasked::zero);
  CHECK((zero && ValidLens{1}).fully_masked() == FullyMasked::zero);
  CHECK((ValidLens{1} && zero).fully_masked() == FullyMasked::zero);
  CHECK((zero && Mask().when_fully_masked(FullyMasked::zero)).fully_masked() == FullyMasked::zero);
  CHECK((zero && Mask()).is_causal());
  // The explicit default and no choice at all combine to the default.
  CHECK((Mask().when_fully_masked(FullyMasked::uniform) && Mask::causal()).fully_masked() == FullyMasked::uniform);
}

TEST_CASE("valid lengths combine into their minimum", "[mask]") {
  attend::Matrix<Index> per_query(2, 3);
  per_query << 1, 5, 3, 0, 2, 9;
  const Mask both = Mask(ValidLens{2, 4}) && ValidLens::per_query(per_query);
  REQUIRE(both.valid_lens().kind() == ValidLens::Kind::per_query);
  const Index expected[2][3] = {{1, 2, 2}, {0, 2, 4}};
  for (Index b = 0; b < 2; ++b)
    for (Index q = 0; q < 3; ++q) CHECK(both.valid_lens().length(b, q) == expected[b][q]);
  const Mask per_batch = Mask(ValidLens{2, 4}) && ValidLens{3, 1};
  REQUIRE(per_batch.valid_lens().kind() == ValidLens::Kind::per_batch);
  CHECK(per_batch.valid_lens().length(0, 0) == 2);
  CHECK(per_batch.valid_lens().length(1, 0) == 1);
}

TEMPLATE_TEST_CASE("masks handle empty shapes", "[mask]", float, double) {
  const Tensor3<TestType> no_keys(2, 3, 0);
  const Mask mask = (Mask::keep(Tensor3<bool>(1, 3, 0)) && Mask::causal()).when_fully_masked(FullyMasked::zero);
  CHECK(attend::masked_softmax(no_keys, mask).dimensions() == no_keys.dimensions());
  Tensor3<TestType> queries(2, 3, 4), keys(2, 0, 4), values(2, 0, 2);
  queries.setRandom();
  attend::DotProductAttention<TestType> dot(TestType(0));
  const Tensor3<TestType> output = dot(queries, keys, values, mask);  // no keys: a zero output, as with no mask
  for (Index i = 0; i < output.size(); ++i) CHECK(output.data()[i] == TestType(0));
  // No queries but keys: an empty output of shape (batch, 0, value_dim) under every mask kind, from both scorings
  // (the empty block of rows sees no key; nothing may be read or offset from its null data).
  Tensor3<TestType> no_queries(2, 0, 4), some_keys(2, 3, 4), some_values(2, 3, 2);
  some_keys.setRandom();
  some_values.setRandom();
  attend::AdditiveAttention<TestType> additive(4, 4, 5, TestType(0));
  additive.eval();
  const Mask masks[] = {Mask(), Mask(ValidLens{1, 2}), Mask::causal(),
                        Mask::keep(Tensor3<bool>(2, 0, 3)).when_fully_masked(FullyMasked::zero)};
  for (const Mask& each : masks) {
    for (const Tensor3<TestType>& output_of :
         {dot(no_queries, some_keys, some_values, each), additive(no_queries, some_keys, some_values, each)}) {
      CHECK(output_of.dimension(0) == 2);
      CHECK(output_of.dimension(1) == 0);
      CHECK(output_of.dimension(2) == 2);
    }
  }
}

// ---- bad input --------------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("a keep tensor of the wrong shape is rejected, naming both shapes", "[mask][errors]", float,
                   double) {
  Tensor3<TestType> X(2, 3, 4);
  X.setZero();
  REQUIRE_THROWS_MATCHES(attend::masked_softmax(X, Mask::keep(all(2, 3, 5, true))), std::invalid_argument,
                         Message("masked_softmax: mask's keep tensor must have shape (2, 3, 4) or (1, 3, 4) (batch or "
                                 "1, queries, keys), got (2, 3, 5)"));
  REQUIRE_THROWS_MATCHES(attend::masked_softmax(X, Mask::keep(all(3, 3, 4, true))), std::invalid_argument,
                         Message("masked_softmax: mask's keep tensor must have shape (2, 3, 4) or (1, 3, 4) (batch or "
                                 "1, queries, keys), got (3, 3, 4)"));
  Tensor3<TestType> one(1, 3, 4);
  one.setZero();
  REQUIRE_THROWS_MATCHES(attend::masked_softmax(one, Mask::keep(all(2, 3, 4, true))), std::invalid_argument,
                         Message("masked_softmax: mask's keep tensor must have shape (1, 3, 4) (batch, queries, keys), "
                                 "got (2, 3, 4)"));
  // The valid-lengths part keeps its message.
  REQUIRE_THROWS_MATCHES(attend::masked_softmax(X, (ValidLens{1, 2, 3} && Mask::causal())), std::invalid_argument,
                         Message("masked_softmax: valid_lens must have shape (2,) (one per batch row), got (3,)"));
  // Causal with more queries than keys is fine.
  Tensor3<TestType> tall(2, 6, 2);
  tall.setZero();
  REQUIRE_NOTHROW(attend::masked_softmax(tall, Mask::causal()));
}

TEMPLATE_TEST_CASE("the modules reject a mask of the wrong shape and stay unchanged", "[mask][errors]", float, double) {
  std::mt19937 rng(17);
  const Tensor3<TestType> queries = random_tensor<TestType>(2, 3, 4, rng);
  const Tensor3<TestType> keys = random_tensor<TestType>(2, 5, 4, rng);
  const Tensor3<TestType> values = random_tensor<TestType>(2, 5, 2, rng);
  const Mask good = Mask::causal() && Mask::keep(random_keep(1, 3, 5, rng, 0.8));
  const Mask bad = Mask::keep(all(2, 5, 3, true));
  const char* tail =
      ": mask's keep tensor must have shape (2, 3, 5) or (1, 3, 5) (batch or 1, queries, keys), got "
      "(2, 5, 3)";
  const attend_test::Tolerance<TestType> same = exact<TestType>();

  attend::DotProductAttention<TestType> dot(TestType(0));
  const Tensor3<TestType> dot_first = dot(queries, keys, values, good);
  const Tensor3<TestType> dot_weights = dot.attention_weights();
  REQUIRE_THROWS_MATCHES(dot(queries, keys, values, bad), std::invalid_argument,
                         Message(std::string("DotProductAttention") + tail));
  REQUIRE_THAT(dot.attention_weights(), attend_test::Near(dot_weights, same));
  REQUIRE_THAT(dot(queries, keys, values, good), attend_test::Near(dot_first, same));

  attend::AdditiveAttention<TestType> additive(4, 4, 3, TestType(0));
  REQUIRE_THROWS_MATCHES(additive(queries, keys, values, bad), std::invalid_argument,
                         Message(std::string("AdditiveAttention") + tail));

  attend::MultiHeadAttention<TestType> mha(4, 4, 2, 4, 2, TestType(0));
  const Tensor3<TestType> mha_first = mha(queries, keys, values, good);
  const Tensor3<TestType> mha_weights = mha.attention_weights();
  REQUIRE_THROWS_MATCHES(mha(queries, keys, values, bad), std::invalid_argument,
                         Message(std::string("MultiHeadAttention") + tail));
  REQUIRE_THAT(mha.attention_weights(), attend_test::Near(mha_weights, same));
  REQUIRE_THAT(mha(queries, keys, values, good), attend_test::Near(mha_first, same));
}

TEST_CASE("&& rejects parts that cannot describe the same scores", "[mask][errors]") {
  attend::Matrix<Index> per_query(2, 3);
  per_query.setOnes();
  attend::Matrix<Index> other_queries(2, 4);
  other_queries.setOnes();
  REQUIRE_THROWS_MATCHES((ValidLens{1, 2} && Mask(ValidLens{1, 2, 3})), std::invalid_argument,
                         Message("Mask &&: valid lengths must describe the same batch rows and queries, got valid_lens "
                                 "(2,) and (3,)"));
  REQUIRE_THROWS_MATCHES((ValidLens{1, 2, 3} && Mask(ValidLens::per_query(per_query))), std::invalid_argument,
                         Message("Mask &&: valid lengths must describe the same batch rows, got valid_lens (3,) and "
                                 "(2, 3)"));
  REQUIRE_THROWS_MATCHES(ValidLens::per_query(other_queries) && Mask(ValidLens::per_query(per_query)),
                         std::invalid_argument,
                         Message("Mask &&: valid lengths must describe the same batch rows and queries, got valid_lens "
                                 "(2, 4) and (2, 3)"));
  REQUIRE_THROWS_MATCHES((Mask::keep(all(2, 3, 4, true)) && Mask::keep(all(3, 3, 4, true))), std::invalid_argument,
                         Message("Mask &&: keep tensors must have the same (queries, keys) and batch sizes that are "
                                 "equal or 1, got (2, 3, 4) and (3, 3, 4)"));
  REQUIRE_THROWS_MATCHES((Mask::keep(all(1, 3, 4, true)) && Mask::keep(all(1, 3, 5, true))), std::invalid_argument,
                         Message("Mask &&: keep tensors must have the same (queries, keys) and batch sizes that are "
                                 "equal or 1, got (1, 3, 4) and (1, 3, 5)"));
  REQUIRE_THROWS_MATCHES((Mask::causal().when_fully_masked(FullyMasked::zero) &&
                          Mask(ValidLens{1}).when_fully_masked(FullyMasked::uniform)),
                         std::invalid_argument,
                         Message("Mask &&: the operands choose different rules for a fully masked query, "
                                 "FullyMasked::zero and FullyMasked::uniform"));
  // A keep tensor of batch 1 broadcasts over one of batch 2.
  REQUIRE_NOTHROW((Mask::keep(all(1, 3, 4, true)) && Mask::keep(all(2, 3, 4, false))));
}

TEMPLATE_TEST_CASE("a braced list of lengths is a Mask of valid lengths per batch row", "[mask]", float, double) {
  attend::Tensor3<TestType> X(2, 3, 4);
  X.setRandom();
  const attend::Tensor3<TestType> braced = attend::masked_softmax(X, {1, 3});
  const attend::Tensor3<TestType> lens = attend::masked_softmax(X, attend::ValidLens{1, 3});
  REQUIRE_THAT(braced, attend_test::Near(lens, attend_test::Tolerance<TestType>{0, 0}));
}

// ---- sliding windows ----------------------------------------------------------------------------------------------

namespace {

// Written from the rule in API.md, independently of mask.hpp: query q of Q, at aligned position p = q + K - Q, sees
// key j of K when p - left <= j <= p + right.
struct Window {
  Index left, right;
  bool keeps(Index q, Index j, Index num_queries, Index num_keys) const {
    const Index p = q + num_keys - num_queries;
    return p - j <= left && j - p <= right;  // as p - left <= j <= p + right, without overflow for the largest sides
  }
};

// parts && every window, as a Mask.
Mask with_windows(const Parts& parts, const std::vector<Window>& windows) {
  Mask m = parts.mask();
  for (const Window& w : windows) m = m && Mask::window(w.left, w.right);
  return m;
}

// The same, from the definitions: (batch, num_queries, num_keys).
Tensor3<bool> window_keep(const Parts& parts, const std::vector<Window>& windows, Index batch, Index num_queries,
                          Index num_keys) {
  Tensor3<bool> K(batch, num_queries, num_keys);
  for (Index b = 0; b < batch; ++b)
    for (Index q = 0; q < num_queries; ++q)
      for (Index j = 0; j < num_keys; ++j) {
        bool kept = parts.keeps(b, q, j, num_queries, num_keys);
        for (const Window& w : windows) kept = kept && w.keeps(q, j, num_queries, num_keys);
        K(b, q, j) = kept;
      }
  return K;
}

// Every key of `mask` (b, q, j) against `expected`, element by element through keeps(), and visible_keys() as the
// narrowest range around those keys (first == last when there is none; no keep row, so no hole, unless a keep
// tensor is part of the mask).
void require_keeps(const Mask& mask, const Tensor3<bool>& expected) {
  const Index batch = expected.dimension(0), num_queries = expected.dimension(1), num_keys = expected.dimension(2);
  for (Index b = 0; b < batch; ++b)
    for (Index q = 0; q < num_queries; ++q) {
      CAPTURE(b, q);
      Index first = -1, last = -1;
      for (Index j = 0; j < num_keys; ++j) {
        CAPTURE(j);
        REQUIRE(mask.keeps(b, q, j, num_queries, num_keys) == expected(b, q, j));
        if (expected(b, q, j)) {
          if (first < 0) first = j;
          last = j + 1;
        }
      }
      const attend::VisibleKeys keys = mask.visible_keys(b, q, num_queries, num_keys);
      REQUIRE(keys.none() == (first < 0));
      REQUIRE((0 <= keys.first && keys.first <= keys.last && keys.last <= num_keys));
      if (first >= 0) {
        REQUIRE(keys.first == first);
        REQUIRE(keys.last == last);
      }
      if (!mask.has_elementwise()) REQUIRE(keys.is_range());
    }
}

// The (left, right) sides the property tests try: none, one-sided, two-sided, wider than any shape here, and the
// largest Index (no limit on that side).
std::vector<Window> some_windows() {
  const Index huge = std::numeric_limits<Index>::max();
  return {{0, 0}, {1, 0}, {0, 1}, {2, 1}, {3, 0}, {1, 4}, {6, 6}, {50, 50}, {huge, 0}, {0, huge}, {huge, huge}};
}

}  // namespace

TEST_CASE("a window keeps exactly the keys p - left <= j <= p + right, p the aligned position", "[mask][window]") {
  const Mask w = Mask::window(2, 1);
  CHECK(w.has_window());
  CHECK(w.window_left() == 2);
  CHECK(w.window_right() == 1);
  CHECK_FALSE(w.empty());
  CHECK_FALSE(w.is_causal());
  CHECK_FALSE(w.has_elementwise());
  CHECK_FALSE(Mask().has_window());
  CHECK_FALSE(Mask::causal().has_window());
  // 4 queries, 4 keys: p = q. Query 2 sees keys 0 .. 3.
  CHECK(w.visible_keys(0, 2, 4, 4).first == 0);
  CHECK(w.visible_keys(0, 2, 4, 4).last == 4);
  CHECK(w.visible_keys(0, 3, 4, 4).first == 1);
  // 2 queries, 6 keys (a decoder with 4 cached keys): p = q + 4. Query 0 sees keys 2 .. 5, query 1 keys 3 .. 5.
  CHECK(w.visible_keys(0, 0, 2, 6).first == 2);
  CHECK(w.visible_keys(0, 0, 2, 6).last == 6);
  CHECK(w.visible_keys(0, 1, 2, 6).first == 3);
  // 6 queries, 2 keys: p = q - 4. Queries 0 .. 2 see nothing (p + 1 < 0), query 3 sees key 0 only.
  for (Index q = 0; q < 3; ++q) CHECK(w.visible_keys(0, q, 6, 2).none());
  CHECK(w.visible_keys(0, 3, 6, 2).first == 0);
  CHECK(w.visible_keys(0, 3, 6, 2).last == 1);
  // Mistral's window of W = 3 keys: window(2, 0), alone or with causal.
  const Mask mistral = Mask::window(2, 0);
  for (const Mask& m : {mistral, mistral && Mask::causal(), Mask::causal() && mistral})
    for (Index q = 0; q < 5; ++q)
      for (Index j = 0; j < 5; ++j) {
        CAPTURE(q, j);
        CHECK(m.keeps(0, q, j, 5, 5) == (j <= q && j >= q - 2));
      }
}

TEST_CASE("window masks, alone and ANDed with every other part, keep exactly the rule's keys", "[mask][window]") {
  std::mt19937 rng(41);
  const Index batch = 2;
  // Q == K, Q < K (decoding), Q > K (rows that see no key), and a single query or key.
  for (const auto& [num_queries, num_keys] :
       {std::pair<Index, Index>{5, 5}, {3, 8}, {8, 3}, {1, 6}, {6, 1}, {1, 1}}) {
    const std::vector<Parts> parts = some_parts(batch, num_queries, num_keys, rng);
    for (std::size_t i = 0; i < parts.size(); ++i)
      for (const Window& w : some_windows()) {
        CAPTURE(num_queries, num_keys, i, w.left, w.right);
        const Tensor3<bool> expected = window_keep(parts[i], {w}, batch, num_queries, num_keys);
        require_keeps(with_windows(parts[i], {w}), expected);
        // The window first: && is symmetric.
        require_keeps(Mask::window(w.left, w.right) && parts[i].mask(), expected);
      }
  }
}

TEST_CASE("the AND of two windows takes the narrower of each side", "[mask][window]") {
  const std::vector<Window> windows = some_windows();
  for (const Window& a : windows)
    for (const Window& b : windows) {
      CAPTURE(a.left, a.right, b.left, b.right);
      const Mask both = Mask::window(a.left, a.right) && Mask::window(b.left, b.right);
      REQUIRE(both.has_window());
      REQUIRE(both.window_left() == std::min(a.left, b.left));
      REQUIRE(both.window_right() == std::min(a.right, b.right));
      for (const auto& [num_queries, num_keys] : {std::pair<Index, Index>{4, 4}, {2, 7}, {7, 2}}) {
        CAPTURE(num_queries, num_keys);
        require_keeps(both, window_keep(Parts{}, {a, b}, 1, num_queries, num_keys));
        // With causal and valid lengths between them too.
        Parts lens;
        lens.lens = ValidLens{num_keys - 1};
        lens.causal = true;
        require_keeps(Mask::window(a.left, a.right) && lens.mask() && Mask::window(b.left, b.right),
                      window_keep(lens, {a, b}, 1, num_queries, num_keys));
      }
    }
  // A window ANDed with a mask without one keeps its sides.
  const Mask one = Mask::window(3, 1) && Mask::causal();
  CHECK(one.window_left() == 3);
  CHECK(one.window_right() == 1);
  const Mask other = Mask(ValidLens{2}) && Mask::window(0, 5);
  CHECK(other.window_left() == 0);
  CHECK(other.window_right() == 5);
}

TEST_CASE("a window travels with the rule for a fully masked query", "[mask][window]") {
  const Mask zero = Mask::window(1, 0).when_fully_masked(FullyMasked::zero);
  CHECK(zero.has_window());
  CHECK(zero.fully_masked() == FullyMasked::zero);
  const Mask both = zero && Mask::causal();
  CHECK(both.has_window());
  CHECK(both.fully_masked() == FullyMasked::zero);
  CHECK(both.window_left() == 1);
}

TEST_CASE("a window with a negative side is rejected, naming it", "[mask][window][errors]") {
  REQUIRE_THROWS_MATCHES(Mask::window(-1, 0), std::invalid_argument,
                         Message("Mask::window: left must be >= 0, got -1"));
  REQUIRE_THROWS_MATCHES(Mask::window(0, -3), std::invalid_argument,
                         Message("Mask::window: right must be >= 0, got -3"));
  REQUIRE_THROWS_AS(Mask::window(-2, -2), std::invalid_argument);
  REQUIRE_THROWS_AS(Mask::window(std::numeric_limits<Index>::min(), 0), std::invalid_argument);
  REQUIRE_NOTHROW(Mask::window(0, 0));
}

TEMPLATE_TEST_CASE("DotProductAttention and MultiHeadAttention give a window's output as its keep tensor's, on both "
                   "paths",
                   "[mask][window]", float, double) {
  // The same keys through a window (a range per row, which both paths cut their products to) and through the keep
  // tensor built from the rule (a keep row per row): the same output, and on the direct path the same weights.
  // Shapes beyond one tile of the tiled path (128 query rows, 256 or 128 keys) let it skip whole key blocks.
  std::mt19937 rng(42);
  const Index batch = 2;
  Index blind_cases = 0;
  for (const auto& [num_queries, num_keys] :
       {std::pair<Index, Index>{5, 5}, {3, 9}, {9, 3}, {1, 7}, {300, 300}, {150, 400}, {400, 150}}) {
    const Tensor3<TestType> queries = random_tensor<TestType>(batch, num_queries, 6, rng);
    const Tensor3<TestType> keys = random_tensor<TestType>(batch, num_keys, 6, rng);
    const Tensor3<TestType> values = random_tensor<TestType>(batch, num_keys, 4, rng);
    Parts none, lens, causal, keep;
    lens.lens = ValidLens{num_keys / 2, 0};  // batch row 1 sees no key
    causal.causal = true;
    keep.keep = random_keep(batch, num_queries, num_keys, rng, 0.7);
    const std::vector<std::pair<Parts, std::vector<Window>>> cases = {
        {none, {{0, 0}}},   {none, {{2, 1}}},       {none, {{1, 0}}},  // Q > K: early rows see no key
        {none, {{20, 5}}},  {causal, {{3, 0}}},     {lens, {{2, 2}}},  {keep, {{1, 3}}},
        {none, {{4, 1}, {2, 6}}}, {causal, {{64, 0}}}};
    for (std::size_t c = 0; c < cases.size(); ++c) {
      const auto& [parts, windows] = cases[c];
      const Tensor3<bool> K = window_keep(parts, windows, batch, num_queries, num_keys);
      bool blind = false;  // some row sees no key
      for (Index b = 0; b < batch; ++b)
        for (Index q = 0; q < num_queries; ++q) {
          bool any = false;
          for (Index j = 0; j < num_keys; ++j) any = any || K(b, q, j);
          blind = blind || !any;
        }
      blind_cases += blind ? 1 : 0;
      for (const FullyMasked rule : {FullyMasked::uniform, FullyMasked::zero}) {
        const Mask window = with_windows(parts, windows).when_fully_masked(rule);
        const Mask as_keep = Mask::keep(K).when_fully_masked(rule);
        for (const attend::AttentionPath path : {attend::AttentionPath::direct, attend::AttentionPath::tiled}) {
          CAPTURE(num_queries, num_keys, c, blind, attend::to_string(rule), path);
          attend::DotProductAttention<TestType> dot(TestType(0.5));
          dot.eval();
          dot.set_path(path);
          const Tensor3<TestType> dot_keep = dot(queries, keys, values, as_keep);
          const Tensor3<TestType> dot_keep_weights =
              path == attend::AttentionPath::direct ? dot.attention_weights() : Tensor3<TestType>();
          REQUIRE_THAT(dot(queries, keys, values, window), attend_test::Near(dot_keep, exact<TestType>()));
          if (path == attend::AttentionPath::direct)
            REQUIRE_THAT(dot.attention_weights(), attend_test::Near(dot_keep_weights, exact<TestType>()));
          REQUIRE_THAT(dot.forward(queries, keys, values, window), attend_test::Near(dot_keep, exact<TestType>()));

          attend::Generator generator(7);
          attend::MultiHeadAttention<TestType> mha(6, 6, 4, 8, 2, TestType(0.5), true, generator);
          mha.eval();
          mha.set_path(path);
          const Tensor3<TestType> mha_keep = mha(queries, keys, values, as_keep);
          REQUIRE_THAT(mha(queries, keys, values, window), attend_test::Near(mha_keep, exact<TestType>()));
          REQUIRE_THAT(mha.forward(queries, keys, values, window), attend_test::Near(mha_keep, exact<TestType>()));
        }
      }
    }
  }
  REQUIRE(blind_cases > 0);
}
