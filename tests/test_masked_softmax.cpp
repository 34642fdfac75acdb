// masked_softmax against d2l's PyTorch code (fixtures), the book's examples, and the seed's -1e6 rule.
#include <algorithm>
#include <attend/masked_softmax.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <support/fixture.hpp>
#include <support/lens.hpp>
#include <support/levels.hpp>
#include <support/matchers.hpp>
#include <vector>

using attend::Index;
using attend::Tensor3;
using attend::ValidLens;

namespace {

// A float's or a double's bit pattern, as an unsigned integer of its size, and back.
template <class Scalar>
using Bits = std::conditional_t<sizeof(Scalar) == 4, std::uint32_t, std::uint64_t>;
template <class Scalar>
Bits<Scalar> bits_of(Scalar x) {
  Bits<Scalar> b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
template <class Scalar>
Scalar value_of(Bits<Scalar> b) {
  Scalar x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// Calls visit(lanes) with packets of `size` values on evenly spaced bit patterns: every step-th from -0 down to
// `lowest` (< 0; a negative number's bits grow with |x|), as many whole packets as they fill.
template <class Scalar, Index size, class Visit>
void for_each_packet_down_to(Scalar lowest, Bits<Scalar> step, Visit&& visit) {
  const Bits<Scalar> first = bits_of(Scalar(-0.0)), last = bits_of(lowest);
  Scalar lanes[size];
  Index filled = 0;
  for (Bits<Scalar> b = first; b <= last; b += step) {
    lanes[filled++] = value_of<Scalar>(b);
    if (filled == size) {
      visit(static_cast<const Scalar*>(lanes));
      filled = 0;
    }
    if (last - b < step) break;
  }
}

}  // namespace

TEMPLATE_TEST_CASE("masked_softmax matches d2l's masked_softmax", "[masked_softmax][golden]", float, double) {
  const auto name = GENERATE(as<std::string>{}, "masked_softmax_book_1d", "masked_softmax_book_2d",
                             "masked_softmax_none", "masked_softmax_zero_and_long", "masked_softmax_2d_mixed");
  CAPTURE(name);
  const attend_test::Fixture fixture(name);
  const Tensor3<TestType> weights =
      attend::masked_softmax(fixture.tensor3<TestType>("X"), attend_test::valid_lens(fixture));
  REQUIRE_THAT(weights, attend_test::Near(fixture.tensor3<double>("output"), attend_test::tolerance<TestType>()));
}

// The d2l book's two examples: masked_softmax(torch.rand(2, 2, 4), torch.tensor([2, 3])) and the same input with
// torch.tensor([[1, 3], [2, 4]]). Their printed values are random; what the book shows, and what is checked here,
// is the pattern: keys past the valid length get exactly 0 and each row sums to 1.
TEMPLATE_TEST_CASE("masked_softmax zeroes exactly the keys past the valid length", "[masked_softmax]", float, double) {
  Tensor3<TestType> X(2, 2, 4);
  X.setRandom();
  attend::Matrix<Index> per_query(2, 2);
  per_query << 1, 3, 2, 4;
  for (const ValidLens& lens : {ValidLens{2, 3}, ValidLens::per_query(per_query)}) {
    const Tensor3<TestType> weights = attend::masked_softmax(X, lens);
    for (Index b = 0; b < 2; ++b)
      for (Index q = 0; q < 2; ++q) {
        const Index valid = lens.length(b, q);
        TestType sum = 0;
        for (Index j = 0; j < 4; ++j) {
          if (j < valid) {
            CHECK(weights(b, q, j) > TestType(0));
          } else {
            CHECK(weights(b, q, j) == TestType(0));
          }
          sum += weights(b, q, j);
        }
        CHECK_THAT(sum, Catch::Matchers::WithinRel(TestType(1), TestType(1e-6)));
      }
  }
}

TEMPLATE_TEST_CASE("a valid length of 0 gives uniform weights, as d2l's -1e6 does", "[masked_softmax]", float, double) {
  Tensor3<TestType> X(1, 2, 5);
  X.setValues({{{3, -1, 4, 1, -5}, {9, 2, -6, 5, 3}}});
  const Tensor3<TestType> weights = attend::masked_softmax(X, ValidLens{0});
  // Every score becomes -1e6, so every weight is exp(0) / 5.
  for (Index q = 0; q < 2; ++q)
    for (Index j = 0; j < 5; ++j) CHECK(weights(0, q, j) == TestType(1) / TestType(5));
}

TEMPLATE_TEST_CASE("masked scores are replaced by -1e6, not -inf", "[masked_softmax]", float, double) {
  // Kept scores below -1e6 lose to the replaced ones: with d2l's rule the row [-3e6, -2e6 | 0, 0] (valid length 2)
  // becomes [-3e6, -2e6, -1e6, -1e6], whose softmax is [0, 0, 1/2, 1/2].
  Tensor3<TestType> X(1, 1, 4);
  X.setValues({{{TestType(-3e6), TestType(-2e6), 0, 0}}});
  const Tensor3<TestType> weights = attend::masked_softmax(X, ValidLens{2});
  CHECK(weights(0, 0, 0) == TestType(0));
  CHECK(weights(0, 0, 1) == TestType(0));
  CHECK(weights(0, 0, 2) == TestType(0.5));
  CHECK(weights(0, 0, 3) == TestType(0.5));
}

TEMPLATE_TEST_CASE("masked_softmax without lengths is the softmax of each row", "[masked_softmax]", float, double) {
  Tensor3<TestType> X(1, 1, 3);
  X.setValues({{{0, std::log(TestType(2)), std::log(TestType(5))}}});  // exp: 1, 2, 5 -> 1/8, 2/8, 5/8
  const Tensor3<TestType> weights = attend::masked_softmax(X);
  CHECK_THAT(weights(0, 0, 0), Catch::Matchers::WithinRel(TestType(0.125), TestType(1e-6)));
  CHECK_THAT(weights(0, 0, 1), Catch::Matchers::WithinRel(TestType(0.25), TestType(1e-6)));
  CHECK_THAT(weights(0, 0, 2), Catch::Matchers::WithinRel(TestType(0.625), TestType(1e-6)));
}

TEMPLATE_TEST_CASE("masked_softmax handles empty shapes", "[masked_softmax]", float, double) {
  const Tensor3<TestType> no_keys(2, 3, 0);
  CHECK(attend::masked_softmax(no_keys, ValidLens{1, 0}).dimensions() == no_keys.dimensions());
  const Tensor3<TestType> no_batch(0, 3, 4);
  CHECK(attend::masked_softmax(no_batch).size() == 0);
  const Tensor3<TestType> no_queries(2, 0, 3);  // keys fewer than a packet: the short-row pass must not touch a row
  CHECK(attend::masked_softmax(no_queries, ValidLens{1, 2}).dimensions() == no_queries.dimensions());
}

TEMPLATE_TEST_CASE("masked_softmax rejects lengths of the wrong shape", "[masked_softmax][errors]", float, double) {
  Tensor3<TestType> X(2, 3, 4);
  X.setZero();
  REQUIRE_THROWS_MATCHES(attend::masked_softmax(X, ValidLens{1, 2, 3}), std::invalid_argument,
                         Catch::Matchers::Message("masked_softmax: valid_lens must have shape (2,) (one per batch "
                                                  "row), got (3,)"));
  attend::Matrix<Index> per_query(2, 2);
  per_query << 1, 2, 3, 4;
  REQUIRE_THROWS_MATCHES(attend::masked_softmax(X, ValidLens::per_query(per_query)), std::invalid_argument,
                         Catch::Matchers::Message("masked_softmax: valid_lens must have shape (2, 3) (batch, "
                                                  "queries), got (2, 2)"));
}

// The bound each level's exp keeps against exp(x) for x <= 0, relative, in units of Scalar's epsilon: Cephes'
// polynomials (generic: Eigen's pexp; avx2; avx512 doubles) and avx512's 2^(x log2 e) with x log2(e) carried in two
// floats (the comment of detail/avx512/simd.hpp), each within a few ulp.
constexpr double exp_bound = 4.0;

TEMPLATE_TEST_CASE("every level's exp is within its bound of exp(x) on [exp_underflow, 0]", "[masked_softmax]",
                   float, double) {
  // Against std::exp in long double (the definition) on evenly spaced bit patterns from -0 down to exp_underflow:
  // every 64th float (17.5 million), 4 million doubles; then both ends and a tiny value. Through exp_shifted with
  // m = 0, which applies the level's packet exp to every entry.
  const TestType lowest = attend::detail::exp_underflow<TestType>();
  const Bits<TestType> step =
      sizeof(TestType) == 4 ? Bits<TestType>(64) : (bits_of(lowest) - bits_of(TestType(-0.0))) / 4000000;
  std::vector<TestType> xs;
  const auto collect = [&](const TestType* lanes) { xs.insert(xs.end(), lanes, lanes + 16); };
  for_each_packet_down_to<TestType, 16>(lowest, step, collect);
  for (TestType x : {lowest, TestType(-0.0), TestType(-1e-30)}) xs.push_back(x);
  for (attend::Isa isa : attend_test::levels()) {
    CAPTURE(attend::isa_name(isa));
    std::vector<TestType> ours = xs;
    attend::detail::kernels_for<TestType>(isa).exp_shifted(ours.data(), static_cast<Index>(ours.size()), TestType(0));
    double worst = 0;  // the largest error over the bound
    TestType worst_at = 0;
    for (std::size_t i = 0; i < xs.size(); ++i) {
      // avx512's floats flush where x log2(e), rounded, is under -126: at most an ulp above exp_underflow
      if (isa == attend::Isa::avx512 && sizeof(TestType) == 4 && ours[i] == TestType(0) &&
          static_cast<float>(xs[i]) * attend::detail::log2_e < -126.0f)
        continue;
      const long double exact = std::exp(static_cast<long double>(xs[i]));
      const double error = static_cast<double>(std::abs(static_cast<long double>(ours[i]) - exact) / exact) /
                           static_cast<double>(std::numeric_limits<TestType>::epsilon());
      const double over = error / exp_bound;
      if (over > worst) {
        worst = over;
        worst_at = xs[i];
      }
    }
    CAPTURE(xs.size(), worst, worst_at);
    REQUIRE(xs.size() > 4000000);
    REQUIRE(worst <= 1.0);
  }
}

TEMPLATE_TEST_CASE("row_max is the largest entry over lengths around whole and double packets", "[masked_softmax]",
                   float, double) {
  // Against std::max_element (the definition), the largest entry placed at every position in turn, the others
  // random; lengths 1 .. 3 packets + 3 of the widest level cover the two-chain loop, the single packet after it and
  // the partial tail on every level.
  constexpr Index size = attend::detail::row_packet_size<TestType>;
  for (attend::Isa isa : attend_test::levels()) {
    const auto& kernel = attend::detail::kernels_for<TestType>(isa);
    for (Index n = 1; n <= 3 * size + 3; ++n) {
      for (Index at = 0; at < n; ++at) {
        attend::Vector<TestType> row = attend::Vector<TestType>::Random(n).array() - TestType(5);  // in [-6, -4]
        row(at) = TestType(-3.5) - TestType(0.01) * at;
        CAPTURE(attend::isa_name(isa), n, at);
        REQUIRE(kernel.row_max(row.data(), n) == *std::max_element(row.data(), row.data() + n));
      }
    }
    const TestType minus_inf = -std::numeric_limits<TestType>::infinity();
    const TestType all_minus_inf[3] = {minus_inf, minus_inf, minus_inf};
    REQUIRE(kernel.row_max(all_minus_inf, 3) == minus_inf);
  }
}

TEMPLATE_TEST_CASE("every level's exp is 0 below exp_underflow and NaN for NaN, entry by entry", "[masked_softmax]",
                   float, double) {
  // The flush rule (exp_underflow's comment), over entries that mix flushed, kept and NaN ones, through exp_shifted
  // with m = 0. avx512's floats flush below 2^-126 (exp2_underflow), at x log2(e) < -126, the same point within
  // rounding: the entries below are at least an ulp under exp_underflow.
  const TestType lowest = attend::detail::exp_underflow<TestType>();
  const TestType below[] = {std::nextafter(std::nextafter(lowest, TestType(-1000)), TestType(-1000)), lowest - 1,
                            TestType(-1e6), -std::numeric_limits<TestType>::infinity()};
  const TestType nan = std::numeric_limits<TestType>::quiet_NaN();
  constexpr Index n = 3 * 16 + 2;
  TestType lanes[n];
  for (Index j = 0; j < n; ++j) lanes[j] = j % 3 == 0 ? below[(j / 3) % 4] : j % 3 == 1 ? nan : TestType(-1) * j;
  for (attend::Isa isa : attend_test::levels()) {
    TestType out[n];
    std::copy(lanes, lanes + n, out);
    attend::detail::kernels_for<TestType>(isa).exp_shifted(out, n, TestType(0));
    for (Index j = 0; j < n; ++j) {
      CAPTURE(attend::isa_name(isa), j, lanes[j], out[j]);
      if (j % 3 == 0) {
        REQUIRE(out[j] == TestType(0));
        REQUIRE(!std::signbit(out[j]));
      } else if (j % 3 == 1) {
        REQUIRE(std::isnan(out[j]));
      } else {
        REQUIRE_THAT(out[j], Catch::Matchers::WithinRel(std::exp(lanes[j]),
                                                        TestType(exp_bound) * std::numeric_limits<TestType>::epsilon()));
      }
    }
  }
}

TEMPLATE_TEST_CASE("exp_shifted writes exp(x - m) over lengths around whole packets, and nothing past them",
                   "[masked_softmax]", float, double) {
  // Against std::exp (the definition) within the levels' bound, every length from 1 to 3 packets + 3 of the widest
  // level: the packet loop and the partial last packet (a masked load and store). The entry after the row is a
  // sentinel that must survive, and the returned sum is the sum of the entries written.
  constexpr Index size = attend::detail::row_packet_size<TestType>;
  const TestType eps = std::numeric_limits<TestType>::epsilon();
  for (attend::Isa isa : attend_test::levels()) {
    for (Index n = 1; n <= 3 * size + 3; ++n) {
      attend::Vector<TestType> row = TestType(4) * attend::Vector<TestType>::Random(n + 1);  // in [-4, 4]
      row(n) = TestType(123);                                                                  // the sentinel
      const attend::Vector<TestType> before = row;
      const TestType m = TestType(4);
      const TestType sum = attend::detail::kernels_for<TestType>(isa).exp_shifted(row.data(), n, m);
      CAPTURE(attend::isa_name(isa), n);
      TestType expected_sum = 0;
      for (Index j = 0; j < n; ++j) {
        REQUIRE_THAT(row(j), Catch::Matchers::WithinRel(std::exp(before(j) - m), TestType(exp_bound) * eps));
        expected_sum += row(j);
      }
      REQUIRE_THAT(sum, Catch::Matchers::WithinRel(expected_sum, TestType(4) * n * eps));
      REQUIRE(row(n) == TestType(123));
    }
  }
}

TEMPLATE_TEST_CASE("every level's softmax_gradient_row is p (dp - D), 0 where p is 0, entry by entry",
                   "[masked_softmax]", float, double) {
  // Against the rule as written (softmax's backward: dS = P (dP - D), 0 for a key the row does not see), entry by
  // entry in Scalar, bit for bit, every length from 1 to 3 packets + 3 of the widest level: the packet loop and the
  // scalar tail. The weights mix positive values, +0 and -0 (each gives +0, even against an infinite or NaN dp), and a
  // NaN (which propagates); the entry after the row is a sentinel that must survive.
  constexpr Index size = attend::detail::row_packet_size<TestType>;
  const TestType inf = std::numeric_limits<TestType>::infinity(), nan = std::numeric_limits<TestType>::quiet_NaN();
  const TestType D = TestType(0.375);
  for (attend::Isa isa : attend_test::levels()) {
    for (Index n = 1; n <= 3 * size + 3; ++n) {
      attend::Vector<TestType> p = (attend::Vector<TestType>::Random(n).array() + TestType(1)) / TestType(2);
      attend::Vector<TestType> dp = attend::Vector<TestType>::Random(n + 1);
      dp(n) = TestType(123);  // the sentinel
      for (Index j = 0; j < n; ++j) {
        if (j % 5 == 1) p(j) = TestType(0);
        if (j % 5 == 3) p(j) = TestType(-0.0);
        if (j % 7 == 1) dp(j) = j % 2 == 0 ? inf : nan;
        if (j % 11 == 6) p(j) = nan;
      }
      attend::Vector<TestType> out = dp;
      attend::detail::kernels_for<TestType>(isa).softmax_gradient_row(p.data(), out.data(), n, D);
      for (Index j = 0; j < n; ++j) {
        CAPTURE(attend::isa_name(isa), n, j, p(j), dp(j), out(j));
        if (p(j) == TestType(0)) {
          REQUIRE(bits_of(out(j)) == bits_of(TestType(0)));
        } else {
          const TestType expected = p(j) * (dp(j) - D);
          if (std::isnan(expected)) {
            REQUIRE(std::isnan(out(j)));
          } else {
            REQUIRE(bits_of(out(j)) == bits_of(expected));
          }
        }
      }
      REQUIRE(out(n) == TestType(123));
    }
  }
}

TEMPLATE_TEST_CASE("every level's softmax_backward_row is (y (dy - s)) scale on the keys a row sees, 0 elsewhere",
                   "[masked_softmax]", float, double) {
  // Against the rule as written (softmax's backward pass, s = sum_k y_k dy_k over the visible keys), in double from
  // the same inputs: rows of every length from 0 to 3 packets + 3 of the widest level, visible ranges that start and
  // end inside a packet, a keep row with holes, a row that sees nothing; masked keys' dy hold NaN and inf, which must
  // not reach s; dx written over dy (in place, as the attention paths call it) and into a fresh row; the entry after
  // the row is a sentinel that must survive.
  constexpr Index size = attend::detail::row_packet_size<TestType>;
  const TestType inf = std::numeric_limits<TestType>::infinity(), nan = std::numeric_limits<TestType>::quiet_NaN();
  const TestType scale = TestType(0.125);
  const TestType eps = std::numeric_limits<TestType>::epsilon();
  for (attend::Isa isa : attend_test::levels()) {
    const auto& kernel = attend::detail::kernels_for<TestType>(isa);
    for (Index n = 0; n <= 3 * size + 3; ++n) {
      std::unique_ptr<bool[]> keep(new bool[static_cast<std::size_t>(n) + 1]);
      for (Index j = 0; j < n; ++j) keep[j] = j % 3 != 1;
      struct Case {
        Index first, last;
        bool holes;
      };
      const Case cases[] = {{0, n, false}, {n / 3, n - n / 4, false}, {1, n, false}, {0, n / 2, false}, {n, n, false},
                            {0, n, true},  {2, n - 1, true}};
      for (const Case& c : cases) {
        attend::VisibleKeys keys;
        keys.first = std::min(c.first, n);
        keys.last = std::max(keys.first, std::min(c.last, n));
        if (c.holes) keys.keep = keep.get();
        const attend::Vector<TestType> y = (attend::Vector<TestType>::Random(n).array() + TestType(1)) / TestType(2);
        attend::Vector<TestType> dy = attend::Vector<TestType>::Random(n + 1);
        for (Index j = 0; j < n; ++j)
          if (!keys.sees(j)) dy(j) = j % 2 == 0 ? nan : inf;
        dy(n) = TestType(123);  // the sentinel
        double s = 0;
        for (Index j = 0; j < n; ++j)
          if (keys.sees(j)) s += static_cast<double>(y(j)) * static_cast<double>(dy(j));
        double largest = 0;  // the scale of the row's terms: s's rounding is relative to it
        for (Index j = 0; j < n; ++j)
          if (keys.sees(j)) largest += std::abs(static_cast<double>(y(j)) * static_cast<double>(dy(j)));
        attend::Vector<TestType> in_place = dy, fresh = attend::Vector<TestType>::Constant(n + 1, TestType(7));
        fresh(n) = TestType(123);
        kernel.softmax_backward_row(y.data(), in_place.data(), in_place.data(), n, keys, scale);
        kernel.softmax_backward_row(y.data(), dy.data(), fresh.data(), n, keys, scale);
        for (Index j = 0; j < n; ++j) {
          CAPTURE(attend::isa_name(isa), n, c.first, c.last, c.holes, j);
          REQUIRE(bits_of(in_place(j)) == bits_of(fresh(j)));
          if (!keys.sees(j)) {
            REQUIRE(bits_of(fresh(j)) == bits_of(TestType(0)));
          } else {
            const double expected = static_cast<double>(y(j)) * (static_cast<double>(dy(j)) - s) * scale;
            // s within n eps of the sum of |terms|, then three roundings of the entry's own
            const double bound = (static_cast<double>(n) * largest + 4 * std::abs(static_cast<double>(dy(j)) - s)) *
                                 static_cast<double>(eps) * static_cast<double>(y(j)) * scale;
            REQUIRE(std::abs(static_cast<double>(fresh(j)) - expected) <= bound);
          }
        }
        REQUIRE(in_place(n) == TestType(123));
        REQUIRE(fresh(n) == TestType(123));
      }
    }
  }
}

TEMPLATE_TEST_CASE("masked_softmax_block gives every row the bits of masked_softmax_row", "[masked_softmax]", float,
                   double) {
  // Rows shorter than a packet take the block's own pass (one exp over the whole block); the test covers those
  // lengths, a packet and one more (the row path), under every kind of masking: none; valid lengths per query, 0
  // included; a keep tensor that empties rows, under both FullyMasked rules. Non-finite scores too: a NaN, +inf, a
  // row of -inf. The same block seen through a wider matrix (not contiguous) takes the row path: the same bits.
  using attend::FullyMasked;
  using attend::Mask;
  using Rows = attend::Matrix<TestType>;
  constexpr Index size = attend::detail::row_packet_size<TestType>;
  const Index num_queries = GENERATE(1, 3, 7);
  const int kind = GENERATE(0, 1, 2, 3);
  const attend::Isa isa = GENERATE(from_range(attend_test::levels()));
  const auto& kernel = attend::detail::kernels_for<TestType>(isa);
  for (Index num_keys = 1; num_keys <= size + 1; ++num_keys) {
    CAPTURE(attend::isa_name(isa), num_queries, num_keys, kind);
    Mask mask;
    if (kind == 1) {
      attend::Matrix<Index> lens(1, num_queries);  // (batch, queries): 0 .. num_keys + 1
      for (Index q = 0; q < num_queries; ++q) lens(0, q) = (q * 5 + 2) % (num_keys + 2);
      mask = Mask(ValidLens::per_query(lens));
    } else if (kind >= 2) {
      Tensor3<bool> keep(1, num_queries, num_keys);  // row q keeps the keys j with (q + j) % 3 != 0; row 1 none
      for (Index q = 0; q < num_queries; ++q)
        for (Index j = 0; j < num_keys; ++j) keep(0, q, j) = q != 1 && (q + j) % 3 != 0;
      mask = Mask::keep(keep);
      if (kind == 3) mask = mask.when_fully_masked(FullyMasked::zero);
    }
    Rows wide = TestType(5) * Rows::Random(num_queries, num_keys + 3);  // (queries, keys + 3), in [-5, 5]
    if (num_queries > 2) {
      wide(2, 0) = std::numeric_limits<TestType>::quiet_NaN();
      wide(2, num_keys - 1) = std::numeric_limits<TestType>::infinity();
    }
    if (num_queries > 6) wide.row(6).setConstant(-std::numeric_limits<TestType>::infinity());
    Rows block = wide.leftCols(num_keys);  // (queries, keys), contiguous
    Rows by_rows = block;
    for (Index q = 0; q < num_queries; ++q)
      kernel.masked_softmax_row(&by_rows(q, 0), num_keys, mask.visible_keys(0, q, num_queries, num_keys),
                                mask.fully_masked());
    std::vector<attend::VisibleKeys> keys;  // (queries)
    for (Index q = 0; q < num_queries; ++q) keys.push_back(mask.visible_keys(0, q, num_queries, num_keys));
    kernel.masked_softmax_block(block.data(), num_queries, num_keys, num_keys, keys.data(), mask.fully_masked(),
                                TestType(1));
    auto view = wide.leftCols(num_keys);  // the same scores, rows num_keys + 3 apart
    kernel.masked_softmax_block(view.data(), num_queries, num_keys, view.outerStride(), keys.data(),
                                mask.fully_masked(), TestType(1));
    // Bit for bit, but a NaN matches any NaN: its sign and payload depend on the order of an instruction's operands,
    // which the compiler may swap in a commutative multiply.
    const auto same = [](TestType a, TestType b) { return std::isnan(a) ? std::isnan(b) : bits_of(a) == bits_of(b); };
    for (Index q = 0; q < num_queries; ++q)
      for (Index j = 0; j < num_keys; ++j) {
        CAPTURE(q, j);
        REQUIRE(same(block(q, j), by_rows(q, j)));
        REQUIRE(same(wide(q, j), block(q, j)));
      }
  }
}
