// RotaryEmbedding: apply() and apply_inverse() against PyTorch (fixtures rope_*, made by
// tests/reference/make_modern_fixtures.py and cross-checked there against transformers' apply_rotary_pos_emb and a
// complex-number rotation), the formula entry by entry, the inverse, maps and raw rows of the caller's memory, the
// positions of a decoder's later steps, the relative-position property, bfloat16, and the checks on bad input.
#include <attend/rotary_embedding.hpp>
#include <catch2/catch.hpp>
#include <support/checks.hpp>
#include <support/fixture.hpp>
#include <support/matchers.hpp>
#include <support/random_tensor.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

using attend::ConstTensorMap3;
using attend::Index;
using attend::RotaryEmbedding;
using attend::Tensor3;
using attend::TensorMap3;
using attend_test::random_tensor;
using attend_test::same_bits;
using attend_test::require_invalid;
using Catch::Contains;

namespace {

// Steps [first, first + count) of X: (batch, count, features).
template <class Scalar>
Tensor3<Scalar> steps_of(const Tensor3<Scalar>& X, Index first, Index count) {
  Tensor3<Scalar> out(X.dimension(0), count, X.dimension(2));
  for (Index b = 0; b < X.dimension(0); ++b)
    for (Index t = 0; t < count; ++t)
      for (Index c = 0; c < X.dimension(2); ++c) out(b, t, c) = X(b, first + t, c);
  return out;
}

// Where feature i of a head pairs: (index of x1, index of x2) of pair k.
std::pair<Index, Index> pair_of(Index k, Index head_dim, bool interleaved) {
  return interleaved ? std::pair<Index, Index>{2 * k, 2 * k + 1} : std::pair<Index, Index>{k, k + head_dim / 2};
}

}  // namespace

// ---- golden: PyTorch, float64 angles -----------------------------------------------------------------------------

TEMPLATE_TEST_CASE("apply and apply_inverse match PyTorch's rotation and its gradient", "[rotary][golden]", float,
                   double) {
  const auto name = GENERATE(as<std::string>{}, "rope_half", "rope_half_offset", "rope_interleaved");
  CAPTURE(name);
  const attend_test::Fixture fixture(name);
  const Index num_heads = fixture.index("num_heads"), head_dim = fixture.index("head_dim");
  const Index start = fixture.index("start");
  const bool interleaved = fixture.index("interleaved") != 0;
  const RotaryEmbedding<TestType> rope(head_dim, fixture.scalar("base"), interleaved);
  CHECK(rope.head_dim() == head_dim);
  CHECK(rope.base() == fixture.scalar("base"));
  CHECK(rope.interleaved() == interleaved);

  Tensor3<TestType> X = fixture.tensor3<TestType>("X");  // (batch, steps, num_heads * head_dim)
  rope.apply(X, num_heads, start);
  REQUIRE_THAT(X, attend_test::Near(fixture.tensor3<double>("output"), attend_test::tolerance<TestType>()));

  // The gradient of sum(output * grad_output) with respect to X is the inverse rotation of grad_output.
  Tensor3<TestType> G = fixture.tensor3<TestType>("grad_output");
  rope.apply_inverse(G, num_heads, start);
  REQUIRE_THAT(G, attend_test::Near(fixture.tensor3<double>("grad_input"), attend_test::tolerance<TestType>()));
}

TEST_CASE("the fixtures cover both pairings and a start past 0", "[rotary][golden]") {
  CHECK(attend_test::Fixture("rope_half").index("interleaved") == 0);
  CHECK(attend_test::Fixture("rope_half_offset").index("start") > 0);
  CHECK(attend_test::Fixture("rope_interleaved").index("interleaved") == 1);
  CHECK(attend_test::Fixture("rope_interleaved").index("start") > 0);
}

// ---- the formula -------------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("apply follows the formula entry by entry, for every pairing and width", "[rotary]", float,
                   double) {
  // inv_freq_k = base^(-2k / d), angle (start + t) inv_freq_k in double, cos and sin rounded to Scalar; the pair
  // (x1, x2) -> (x1 c - x2 s, x2 c + x1 s), here evaluated in long double from the same rounded c and s. What is left
  // is Scalar's rounding of two products and a sum: at most 2 eps (|x1| + |x2|) (1.5 eps, with a margin).
  // head_dim 260 has 130 pairs: more than one block of cos and sin.
  const Index head_dim = GENERATE(2, 6, 8, 64, 260);
  const bool interleaved = GENERATE(false, true);
  const Index start = GENERATE(0, 3, 100000);
  const double base = head_dim == 8 ? 500000.0 : 10000.0;
  CAPTURE(head_dim, interleaved, start);
  const Index batch = 2, steps = 3, num_heads = 3;
  const RotaryEmbedding<TestType> rope(head_dim, base, interleaved);
  const Tensor3<TestType> X = random_tensor<TestType>(batch, steps, num_heads * head_dim, 31);
  Tensor3<TestType> Y = X;
  rope.apply(Y, num_heads, start);
  const long double eps = std::numeric_limits<TestType>::epsilon();
  for (Index b = 0; b < batch; ++b)
    for (Index t = 0; t < steps; ++t)
      for (Index h = 0; h < num_heads; ++h)
        for (Index k = 0; k < head_dim / 2; ++k) {
          const double angle = static_cast<double>(start + t) *
                               std::pow(base, -static_cast<double>(2 * k) / static_cast<double>(head_dim));
          const long double c = static_cast<TestType>(std::cos(angle)), s = static_cast<TestType>(std::sin(angle));
          const auto [i1, i2] = pair_of(k, head_dim, interleaved);
          const long double x1 = X(b, t, h * head_dim + i1), x2 = X(b, t, h * head_dim + i2);
          const long double bound = 2 * eps * (std::abs(x1) + std::abs(x2));
          CAPTURE(b, t, h, k);
          CHECK(std::abs(Y(b, t, h * head_dim + i1) - (x1 * c - x2 * s)) <= bound);
          CHECK(std::abs(Y(b, t, h * head_dim + i2) - (x2 * c + x1 * s)) <= bound);
        }
}

TEMPLATE_TEST_CASE("position 0 leaves X as it is, and the first pair turns by start radians", "[rotary]", float,
                   double) {
  const bool interleaved = GENERATE(false, true);
  const RotaryEmbedding<TestType> rope(4, 10000, interleaved);
  const Tensor3<TestType> X = random_tensor<TestType>(2, 1, 8, 5);
  Tensor3<TestType> Y = X;
  rope.apply(Y, 2);
  REQUIRE(same_bits(Y, X));  // cos 0 = 1, sin 0 = 0: exact
  rope.apply_inverse(Y, 2);
  REQUIRE(same_bits(Y, X));

  // Pair 0 has inv_freq 1: at position 2, (1, 0) -> (cos 2, sin 2).
  Tensor3<TestType> E(1, 1, 4);
  E.setZero();
  const auto [i1, i2] = pair_of(0, 4, interleaved);
  E(0, 0, i1) = TestType(1);
  rope.apply(E, 1, 2);
  CHECK(E(0, 0, i1) == static_cast<TestType>(std::cos(2.0)));
  CHECK(E(0, 0, i2) == static_cast<TestType>(std::sin(2.0)));
}

// ---- the inverse -------------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("apply then apply_inverse gives X back", "[rotary]", float, double) {
  // Two rotations, each off by ~2 eps (|x1| + |x2|) <= 4 eps for entries in [-1, 1): 16 eps covers both.
  const Index head_dim = GENERATE(2, 8, 260);
  const bool interleaved = GENERATE(false, true);
  const Index start = GENERATE(0, 7, 65536);
  CAPTURE(head_dim, interleaved, start);
  const RotaryEmbedding<TestType> rope(head_dim, 10000, interleaved);
  const Tensor3<TestType> X = random_tensor<TestType>(3, 5, 2 * head_dim, 32);
  Tensor3<TestType> Y = X;
  rope.apply(Y, 2, start);
  REQUIRE_FALSE(same_bits(Y, X));
  rope.apply_inverse(Y, 2, start);
  const double eps = std::numeric_limits<TestType>::epsilon();
  REQUIRE_THAT(Y, attend_test::Near(X, attend_test::Tolerance<TestType>{0, 16 * eps}));
  // And the other way round.
  rope.apply_inverse(Y, 2, start);
  rope.apply(Y, 2, start);
  REQUIRE_THAT(Y, attend_test::Near(X, attend_test::Tolerance<TestType>{0, 32 * eps}));
}

TEMPLATE_TEST_CASE("the rotation keeps every pair's length", "[rotary]", float, double) {
  const bool interleaved = GENERATE(false, true);
  const RotaryEmbedding<TestType> rope(16, 10000, interleaved);
  const Tensor3<TestType> X = random_tensor<TestType>(2, 9, 32, 33);
  Tensor3<TestType> Y = X;
  rope.apply(Y, 2, 11);
  const double eps = std::numeric_limits<TestType>::epsilon();
  for (Index b = 0; b < 2; ++b)
    for (Index t = 0; t < 9; ++t)
      for (Index h = 0; h < 2; ++h)
        for (Index k = 0; k < 8; ++k) {
          const auto [i1, i2] = pair_of(k, 16, interleaved);
          const double before = std::hypot(double(X(b, t, h * 16 + i1)), double(X(b, t, h * 16 + i2)));
          const double after = std::hypot(double(Y(b, t, h * 16 + i1)), double(Y(b, t, h * 16 + i2)));
          CAPTURE(b, t, h, k);
          CHECK(std::abs(after - before) <= 4 * eps);
        }
}

// ---- the caller's memory -----------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("apply on a TensorMap3 of the same memory gives the Tensor3's bits", "[rotary]", float, double) {
  const bool interleaved = GENERATE(false, true);
  const RotaryEmbedding<TestType> rope(6, 10000, interleaved);
  const Tensor3<TestType> X = random_tensor<TestType>(2, 7, 18, 34);
  for (const bool inverse : {false, true}) {
    CAPTURE(inverse);
    Tensor3<TestType> on_tensor = X;
    std::vector<TestType> memory(X.data(), X.data() + X.size());
    if (inverse) {
      rope.apply_inverse(on_tensor, 3, 4);
      rope.apply_inverse(TensorMap3<TestType>(memory.data(), 2, 7, 18), 3, 4);
    } else {
      rope.apply(on_tensor, 3, 4);
      rope.apply(TensorMap3<TestType>(memory.data(), 2, 7, 18), 3, 4);
    }
    const Tensor3<TestType> on_map = ConstTensorMap3<TestType>(memory.data(), 2, 7, 18);
    REQUIRE(same_bits(on_map, on_tensor));
    // A map of a Tensor3's own memory, too.
    Tensor3<TestType> mapped = X;
    TensorMap3<TestType> view(mapped.data(), 2, 7, 18);
    if (inverse) {
      rope.apply_inverse(view, 3, 4);
    } else {
      rope.apply(view, 3, 4);
    }
    REQUIRE(same_bits(mapped, on_tensor));
  }
}

TEMPLATE_TEST_CASE("apply_rows rotates the heads of wider rows, spaced batch rows apart, and nothing else",
                   "[rotary]", float, double) {
  // (batch 2, batch_rows 6, row_stride 13) memory; steps 4 of each batch row in use, their first 2 * 4 elements the
  // heads: the rest (columns 8 .. 12, and rows 4 and 5 of each batch row) must keep its sentinel.
  const Index batch = 2, steps = 4, batch_rows = 6, row_stride = 13, num_heads = 2, head_dim = 4;
  const bool interleaved = GENERATE(false, true);
  const bool inverse = GENERATE(false, true);
  CAPTURE(interleaved, inverse);
  const RotaryEmbedding<TestType> rope(head_dim, 10000, interleaved);
  const Tensor3<TestType> X = random_tensor<TestType>(batch, steps, num_heads * head_dim, 35);
  Tensor3<TestType> expected = X;
  if (inverse) {
    rope.apply_inverse(expected, num_heads, 9);
  } else {
    rope.apply(expected, num_heads, 9);
  }

  const TestType sentinel = TestType(1234.5);
  std::vector<TestType> memory(static_cast<std::size_t>(batch * batch_rows * row_stride), sentinel);
  const auto at = [&](Index b, Index t, Index c) -> TestType& {
    return memory[static_cast<std::size_t>((b * batch_rows + t) * row_stride + c)];
  };
  for (Index b = 0; b < batch; ++b)
    for (Index t = 0; t < steps; ++t)
      for (Index c = 0; c < num_heads * head_dim; ++c) at(b, t, c) = X(b, t, c);
  rope.apply_rows(memory.data(), batch, steps, batch_rows, row_stride, num_heads, 9, inverse);
  for (Index b = 0; b < batch; ++b)
    for (Index t = 0; t < batch_rows; ++t)
      for (Index c = 0; c < row_stride; ++c) {
        CAPTURE(b, t, c);
        if (t < steps && c < num_heads * head_dim) {
          REQUIRE(at(b, t, c) == expected(b, t, c));
        } else {
          REQUIRE(at(b, t, c) == sentinel);
        }
      }
}

TEMPLATE_TEST_CASE("an empty X is left alone", "[rotary]", float, double) {
  const RotaryEmbedding<TestType> rope(4);
  for (const auto& [batch, steps] : {std::pair<Index, Index>{0, 3}, {2, 0}, {0, 0}}) {
    Tensor3<TestType> X(batch, steps, 8);
    CHECK_NOTHROW(rope.apply(X, 2));
    CHECK_NOTHROW(rope.apply_inverse(X, 2, 5));
    CHECK_NOTHROW(rope.apply(TensorMap3<TestType>(X.data(), batch, steps, 8), 2));
  }
  CHECK_NOTHROW(rope.apply_rows(nullptr, 0, 0, 0, 8, 2, 0, false));
}

// ---- positions ---------------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("steps rotated from start s equal rows s.. of the whole sequence rotated: decoding", "[rotary]",
                   float, double) {
  // A decoder rotates its prompt at positions 0 .. n-1, then each new step at the position the cache has reached.
  const Index head_dim = GENERATE(4, 10);
  const bool interleaved = GENERATE(false, true);
  CAPTURE(head_dim, interleaved);
  const Index batch = 2, total = 12, num_heads = 3;
  const RotaryEmbedding<TestType> rope(head_dim, 10000, interleaved);
  const Tensor3<TestType> X = random_tensor<TestType>(batch, total, num_heads * head_dim, 36);
  for (const Index offset : {Index(0), Index(40)}) {  // the whole sequence itself starting past 0
    Tensor3<TestType> whole = X;
    rope.apply(whole, num_heads, offset);
    for (const auto& [s, count] : {std::pair<Index, Index>{0, 5}, {5, 1}, {6, 3}, {11, 1}, {3, 9}}) {
      CAPTURE(offset, s, count);
      Tensor3<TestType> part = steps_of(X, s, count);
      rope.apply(part, num_heads, offset + s);
      REQUIRE(same_bits(part, steps_of(whole, s, count)));
    }
    // One step at a time, in place in a cache-like buffer, gives the same bits as well.
    Tensor3<TestType> one_by_one = X;
    for (Index t = 0; t < total; ++t)
      rope.apply_rows(one_by_one.data() + t * num_heads * head_dim, batch, 1, total, num_heads * head_dim, num_heads,
                      offset + t, false);
    REQUIRE(same_bits(one_by_one, whole));
  }
}

TEMPLATE_TEST_CASE("a rotated query and key score as a function of their distance alone", "[rotary]", float, double) {
  // R_p q . R_p' k = q . R_(p' - p) k: shifting both positions by the same delta leaves the score unchanged, to
  // rounding. The rotation rounds by ~2 eps per entry, over 8 pairs of entries in [-1, 1): 64 eps. And each angle
  // p inv_freq_k is rounded in double, inv_freq_k (<= 1) itself by pow's ~1 ulp: ~2.5 DBL_EPSILON p off, which turns
  // a pair's product (<= 2) by as much; over 8 pairs and four angles that is at most 40 DBL_EPSILON (p + p' + 2 delta)
  // (the larger term in double, for delta 4096).
  const bool interleaved = GENERATE(false, true);
  const Index head_dim = 16;
  const RotaryEmbedding<TestType> rope(head_dim, 10000, interleaved);
  const Tensor3<TestType> q = random_tensor<TestType>(1, 1, head_dim, 37);
  const Tensor3<TestType> k = random_tensor<TestType>(1, 1, head_dim, 38);
  const auto score = [&](Index p, Index p_key) {
    Tensor3<TestType> a = q, b = k;
    rope.apply(a, 1, p);
    rope.apply(b, 1, p_key);
    double s = 0;
    for (Index i = 0; i < head_dim; ++i) s += double(a(0, 0, i)) * double(b(0, 0, i));
    return s;
  };
  const double eps = std::numeric_limits<TestType>::epsilon();
  for (const auto& [p, p_key] : {std::pair<Index, Index>{0, 0}, {3, 1}, {1, 3}, {10, 0}, {7, 7}})
    for (const Index delta : {1, 5, 100, 4096}) {
      CAPTURE(p, p_key, delta);
      const double angles = 40 * std::numeric_limits<double>::epsilon() * double(p + p_key + 2 * delta);
      CHECK(std::abs(score(p + delta, p_key + delta) - score(p, p_key)) <= 64 * eps + angles);
    }
  // And it does depend on the distance.
  CHECK(std::abs(score(0, 1) - score(0, 2)) > 1e-3);
}

// ---- bfloat16 ----------------------------------------------------------------------------------------------------

TEST_CASE("bfloat16: the float computation rounded once", "[rotary]") {
  using bf16 = Eigen::bfloat16;
  const bool interleaved = GENERATE(false, true);
  const RotaryEmbedding<bf16> rope(8, 10000, interleaved);
  const RotaryEmbedding<float> reference(8, 10000, interleaved);
  const Tensor3<float> X = random_tensor<float>(2, 3, 16, 39);
  Tensor3<bf16> Xb(2, 3, 16);
  for (Index i = 0; i < X.size(); ++i) Xb.data()[i] = bf16(X.data()[i]);
  Tensor3<float> Xf(2, 3, 16);  // X as bfloat16 holds it, exactly
  for (Index i = 0; i < X.size(); ++i) Xf.data()[i] = static_cast<float>(Xb.data()[i]);
  for (const bool inverse : {false, true}) {
    CAPTURE(inverse);
    Tensor3<bf16> Yb = Xb;
    Tensor3<float> Yf = Xf;
    if (inverse) {
      rope.apply_inverse(Yb, 2, 5);
      reference.apply_inverse(Yf, 2, 5);
    } else {
      rope.apply(Yb, 2, 5);
      reference.apply(Yf, 2, 5);
    }
    for (Index i = 0; i < X.size(); ++i) {
      CAPTURE(i);
      REQUIRE(static_cast<float>(Yb.data()[i]) == static_cast<float>(bf16(Yf.data()[i])));
    }
  }
}

// ---- bad input ---------------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("RotaryEmbedding's constructor rejects bad head_dim and base, naming them", "[rotary][errors]",
                   float, double) {
  for (const Index head_dim : {Index(0), Index(1), Index(3), Index(-2), Index(7)}) {
    CAPTURE(head_dim);
    require_invalid([&] { RotaryEmbedding<TestType> rope(head_dim); },
                    {"RotaryEmbedding", "head_dim", "even", "at least 2", "got " + std::to_string(head_dim)});
  }
  for (const double base : {0.0, -10.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
    CAPTURE(base);
    require_invalid([&] { RotaryEmbedding<TestType> rope(8, base); }, {"RotaryEmbedding", "base", "positive"});
  }
  require_invalid([] { RotaryEmbedding<TestType> rope(8, -10.0); }, {"got -10"});
  CHECK_NOTHROW(RotaryEmbedding<TestType>(2, 0.5, true));
}

TEMPLATE_TEST_CASE("apply and apply_inverse reject bad input, naming it, and leave X unchanged", "[rotary][errors]",
                   float, double) {
  const RotaryEmbedding<TestType> rope(8);
  const Tensor3<TestType> X = random_tensor<TestType>(2, 5, 24, 40);  // num_heads 3 fits
  for (const bool inverse : {false, true}) {
    for (const bool map : {false, true}) {
      const std::string where = inverse ? "RotaryEmbedding::apply_inverse" : "RotaryEmbedding::apply";
      CAPTURE(where, map);
      Tensor3<TestType> Y = X;
      const auto call = [&](Index num_heads, Index start) {
        if (map) {
          TensorMap3<TestType> view(Y.data(), Y.dimension(0), Y.dimension(1), Y.dimension(2));
          if (inverse) {
            rope.apply_inverse(view, num_heads, start);
          } else {
            rope.apply(view, num_heads, start);
          }
        } else if (inverse) {
          rope.apply_inverse(Y, num_heads, start);
        } else {
          rope.apply(Y, num_heads, start);
        }
      };
      // X's last dimension is not num_heads * head_dim.
      require_invalid([&] { call(2, 0); }, {where, "X", "num_heads * head_dim", "2 * 8 = 16", "(2, 5, 24)"});
      require_invalid([&] { call(4, 0); }, {where, "X", "4 * 8 = 32", "(2, 5, 24)"});
      // num_heads < 1.
      require_invalid([&] { call(0, 0); }, {where, "num_heads", "at least 1", "got 0"});
      require_invalid([&] { call(-3, 0); }, {where, "num_heads", "at least 1", "got -3"});
      // start < 0.
      require_invalid([&] { call(3, -1); }, {where, "start", "at least 0", "got -1"});
      REQUIRE(same_bits(Y, X));
      // A width that head_dim does not divide.
      Tensor3<TestType> odd(1, 2, 20);
      odd.setConstant(TestType(0.5));
      const Tensor3<TestType> odd_before = odd;
      require_invalid([&] { inverse ? rope.apply_inverse(odd, 3) : rope.apply(odd, 3); },
                      {where, "X", "3 * 8 = 24", "(1, 2, 20)"});
      REQUIRE(same_bits(odd, odd_before));
      // The same arguments that work.
      CHECK_NOTHROW(call(3, 0));
    }
  }
}

TEMPLATE_TEST_CASE("apply_rows rejects bad input, naming it, and leaves the memory unchanged", "[rotary][errors]",
                   float, double) {
  const RotaryEmbedding<TestType> rope(4);
  std::vector<TestType> memory(2 * 6 * 10, TestType(0.25));
  const std::vector<TestType> before = memory;
  const std::string where = "RotaryEmbedding::apply_rows";
  TestType* data = memory.data();
  require_invalid([&] { rope.apply_rows(data, 2, 5, 6, 10, 0, 0, false); }, {where, "num_heads", "got 0"});
  require_invalid([&] { rope.apply_rows(data, 2, 5, 6, 10, 2, -4, false); }, {where, "start", "got -4"});
  require_invalid([&] { rope.apply_rows(data, -1, 5, 6, 10, 2, 0, false); }, {where, "batch", "got -1"});
  require_invalid([&] { rope.apply_rows(data, 2, -5, 6, 10, 2, 0, true); }, {where, "steps", "got -5"});
  require_invalid([&] { rope.apply_rows(data, 2, 5, 4, 10, 2, 0, false); },
                  {where, "batch_rows", "at least steps (5)", "got 4"});
  require_invalid([&] { rope.apply_rows(data, 2, 5, 6, 10, 3, 0, false); },
                  {where, "row_stride", "3 * 4 = 12", "got 10"});
  require_invalid([&] { rope.apply_rows(nullptr, 2, 5, 6, 10, 2, 0, false); }, {where, "data", "null"});
  REQUIRE(memory == before);
  CHECK_NOTHROW(rope.apply_rows(data, 2, 5, 6, 10, 2, 0, false));
  CHECK_NOTHROW(rope.apply_rows(data, 2, 5, 6, 8, 2, 0, false));
}
