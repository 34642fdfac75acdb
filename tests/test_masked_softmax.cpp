// masked_softmax against d2l's PyTorch code (fixtures), the book's examples, and the seed's -1e6 rule.
#include <algorithm>
#include <attend/masked_softmax.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <support/fixture.hpp>
#include <support/lens.hpp>
#include <support/matchers.hpp>

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

TEMPLATE_TEST_CASE("flushed_exp_packet gives Eigen's vectorised exp bit for bit on [exp_underflow, 0]",
                   "[masked_softmax]", float, double) {
  // The softmax's exp (a shortened Eigen pexp on AVX-512 floats, Eigen's pexp elsewhere) against Eigen's pexp itself,
  // the reference, on evenly spaced bit patterns from -0 down to exp_underflow: every 64th float (17.5 million),
  // 4 million doubles; then both ends and a tiny value.
  namespace ei = Eigen::internal;
  using Packet = typename ei::packet_traits<TestType>::type;
  constexpr Index size = ei::packet_traits<TestType>::size;
  const TestType lowest = attend::detail::exp_underflow<TestType>();
  const Bits<TestType> step =
      sizeof(TestType) == 4 ? Bits<TestType>(64) : (bits_of(lowest) - bits_of(TestType(-0.0))) / 4000000;
  Index mismatches = 0, compared = 0;
  const auto compare = [&](const TestType* lanes) {
    TestType ours[size], eigen[size];
    const Packet x = ei::ploadu<Packet>(lanes);
    ei::pstoreu(ours, attend::detail::flushed_exp_packet(x));
    ei::pstoreu(eigen, ei::pexp(x));
    mismatches += std::memcmp(ours, eigen, sizeof ours) != 0;
    compared += size;
  };
  for_each_packet_down_to<TestType, size>(lowest, step, compare);
  TestType lanes[size];
  for (Index j = 0; j < size; ++j) lanes[j] = j % 3 == 0 ? lowest : j % 3 == 1 ? TestType(-0.0) : TestType(-1e-30);
  compare(lanes);
  CAPTURE(compared);
  REQUIRE(mismatches == 0);
}

TEMPLATE_TEST_CASE("row_max is the largest entry over lengths around whole and double packets", "[masked_softmax]",
                   float, double) {
  // Against std::max_element (the definition), the largest entry placed at every position in turn, the others
  // random; lengths 1 .. 3 packets + 3 cover the two-chain loop, the single packet after it and the partial tail.
  constexpr Index size = Eigen::internal::packet_traits<TestType>::size;
  for (Index n = 1; n <= 3 * size + 3; ++n) {
    for (Index at = 0; at < n; ++at) {
      attend::Vector<TestType> row = attend::Vector<TestType>::Random(n).array() - TestType(5);  // in [-6, -4]
      row(at) = TestType(-3.5) - TestType(0.01) * at;
      CAPTURE(n, at);
      REQUIRE(attend::detail::row_max(row.data(), n) == *std::max_element(row.data(), row.data() + n));
    }
  }
  const TestType minus_inf = -std::numeric_limits<TestType>::infinity();
  const TestType all_minus_inf[3] = {minus_inf, minus_inf, minus_inf};
  REQUIRE(attend::detail::row_max(all_minus_inf, 3) == minus_inf);
}

TEMPLATE_TEST_CASE("flushed_exp_packet is 0 below exp_underflow and NaN for NaN, lane by lane", "[masked_softmax]",
                   float, double) {
  // The flush rule of flushed_exp (exp_underflow's comment), in a packet that mixes flushed, kept and NaN lanes.
  namespace ei = Eigen::internal;
  using Packet = typename ei::packet_traits<TestType>::type;
  constexpr Index size = ei::packet_traits<TestType>::size;
  const TestType lowest = attend::detail::exp_underflow<TestType>();
  const TestType below[] = {std::nextafter(lowest, TestType(-1000)), lowest - 1, TestType(-1e6),
                            -std::numeric_limits<TestType>::infinity()};
  const TestType nan = std::numeric_limits<TestType>::quiet_NaN();
  TestType lanes[size], out[size];
  for (Index j = 0; j < size; ++j) lanes[j] = j % 3 == 0 ? below[(j / 3) % 4] : j % 3 == 1 ? nan : TestType(-1) * j;
  ei::pstoreu(out, attend::detail::flushed_exp_packet(ei::ploadu<Packet>(lanes)));
  for (Index j = 0; j < size; ++j) {
    CAPTURE(j, lanes[j], out[j]);
    if (j % 3 == 0) {
      REQUIRE(out[j] == TestType(0));
      REQUIRE(!std::signbit(out[j]));
    } else if (j % 3 == 1) {
      REQUIRE(std::isnan(out[j]));
    } else {
      REQUIRE_THAT(out[j], Catch::Matchers::WithinRel(std::exp(lanes[j]),
                                                      TestType(4) * std::numeric_limits<TestType>::epsilon()));
    }
  }
}

// The tiled kernel's exp through 2^(x log2 e) exists for floats with AVX-512 DQ only (exp_via_exp2); built without
// it, these tests check that it is off, which keeps the kernel on flushed_exp_packet (tested above).
#ifdef EIGEN_VECTORIZE_AVX512DQ
TEST_CASE("flushed_exp2_packet is within float's epsilon of 2^t on [exp2_underflow, 0]", "[masked_softmax]") {
  // Against std::exp2 in double (the definition, exact to far below float's precision), on every 64th float bit
  // pattern from -0 down to -126 (17.6 million), then the ends: the relative error, in units of float's epsilon
  // (2^-23, an ulp at 1; a result just under a power of two has ulps half as wide).
  namespace ei = Eigen::internal;
  STATIC_REQUIRE(attend::detail::exp_via_exp2<float>);
  STATIC_REQUIRE(!attend::detail::exp_via_exp2<double>);
  double worst = 0;
  float worst_at = 0;
  Index compared = 0;
  const auto compare = [&](const float* lanes) {
    float ours[16];
    ei::pstoreu(ours, attend::detail::flushed_exp2_packet(ei::ploadu<ei::Packet16f>(lanes)));
    for (int j = 0; j < 16; ++j) {
      const double exact = std::exp2(static_cast<double>(lanes[j]));
      const double relative = std::abs(static_cast<double>(ours[j]) - exact) / exact;
      const double error = relative / static_cast<double>(std::numeric_limits<float>::epsilon());
      if (error > worst) {
        worst = error;
        worst_at = lanes[j];
      }
    }
    compared += 16;
  };
  for_each_packet_down_to<float, 16>(attend::detail::exp2_underflow, 64, compare);
  float lanes[16];
  for (int j = 0; j < 16; ++j) lanes[j] = j % 4 == 0 ? -126.0f : j % 4 == 1 ? -0.0f : j % 4 == 2 ? -1e-30f : -1.0f * j;
  compare(lanes);
  CAPTURE(compared, worst, worst_at);
  REQUIRE(compared > 17000000);
  REQUIRE(worst <= 1.0);  // measured: 0.705, at t = -0.00036
}

TEST_CASE("flushed_exp2_packet is 0 below exp2_underflow and NaN for NaN, lane by lane", "[masked_softmax]") {
  // The flush rule of flushed_exp2_packet, in a packet that mixes flushed, kept and NaN lanes; 2^-126 itself is kept.
  namespace ei = Eigen::internal;
  const float lowest = attend::detail::exp2_underflow;
  const float below[] = {std::nextafter(lowest, -1000.0f), lowest - 1, -1e6f, -std::numeric_limits<float>::infinity()};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float lanes[16], out[16];
  for (int j = 0; j < 16; ++j) lanes[j] = j % 3 == 0 ? below[(j / 3) % 4] : j % 3 == 1 ? nan : -0.5f * j;
  lanes[2] = lowest;
  ei::pstoreu(out, attend::detail::flushed_exp2_packet(ei::ploadu<ei::Packet16f>(lanes)));
  for (int j = 0; j < 16; ++j) {
    CAPTURE(j, lanes[j], out[j]);
    if (j % 3 == 0) {
      REQUIRE(out[j] == 0.0f);
      REQUIRE(!std::signbit(out[j]));
    } else if (j % 3 == 1) {
      REQUIRE(std::isnan(out[j]));
    } else {
      REQUIRE_THAT(out[j], Catch::Matchers::WithinRel(std::exp2(lanes[j]), std::numeric_limits<float>::epsilon()));
    }
  }
  REQUIRE(out[2] == std::numeric_limits<float>::min());  // 2^-126, the smallest normal float
}

TEST_CASE("exp_shifted through exp2 writes exp(x - m) over lengths around whole packets, and nothing past them",
          "[masked_softmax]") {
  // As the base-e test below, against std::exp: the packet loop and the masked last packet. Within 1 ulp for the
  // polynomial and |x - m| / 2 <= 4 ulp for the rounding of (x - m) log2(e) (exp_via_exp2's comment).
  const float eps = std::numeric_limits<float>::epsilon();
  for (Index n = 1; n <= 3 * 16 + 3; ++n) {
    attend::Vector<float> row = 4.0f * attend::Vector<float>::Random(n + 1);  // in [-4, 4]
    row(n) = 123.0f;                                                          // the sentinel
    const attend::Vector<float> before = row;
    const float m = 4.0f;
    const float sum = attend::detail::exp_shifted<float, true>(row.data(), n, m);
    CAPTURE(n);
    float expected_sum = 0;
    for (Index j = 0; j < n; ++j) {
      REQUIRE_THAT(row(j), Catch::Matchers::WithinRel(std::exp(before(j) - m), 5 * eps));
      expected_sum += row(j);
    }
    REQUIRE_THAT(sum, Catch::Matchers::WithinRel(expected_sum, 4.0f * n * eps));
    REQUIRE(row(n) == 123.0f);
  }
}
#else
TEST_CASE("without AVX-512 DQ the tiled kernel's softmax stays in base e", "[masked_softmax]") {
  STATIC_REQUIRE(!attend::detail::exp_via_exp2<float>);
  STATIC_REQUIRE(!attend::detail::exp_via_exp2<double>);
}
#endif

TEMPLATE_TEST_CASE("exp_shifted writes exp(x - m) over lengths around whole packets, and nothing past them",
                   "[masked_softmax]", float, double) {
  // Against std::exp (the definition) within a few ulp, every length from 1 to 3 packets + 3: the packet loop and
  // the partial last packet (a masked load and store for float with AVX or AVX-512, a copy otherwise). The entry
  // after the row is a sentinel that must survive, and the returned sum is the sum of the entries written.
  constexpr Index size = Eigen::internal::packet_traits<TestType>::size;
  const TestType eps = std::numeric_limits<TestType>::epsilon();
  for (Index n = 1; n <= 3 * size + 3; ++n) {
    attend::Vector<TestType> row = TestType(4) * attend::Vector<TestType>::Random(n + 1);  // in [-4, 4]
    row(n) = TestType(123);                                                                  // the sentinel
    const attend::Vector<TestType> before = row;
    const TestType m = TestType(4);
    const TestType sum = attend::detail::exp_shifted(row.data(), n, m);
    CAPTURE(n);
    TestType expected_sum = 0;
    for (Index j = 0; j < n; ++j) {
      REQUIRE_THAT(row(j), Catch::Matchers::WithinRel(std::exp(before(j) - m), TestType(4) * eps));
      expected_sum += row(j);
    }
    REQUIRE_THAT(sum, Catch::Matchers::WithinRel(expected_sum, TestType(4) * n * eps));
    REQUIRE(row(n) == TestType(123));
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
  constexpr Index size = Eigen::internal::packet_traits<TestType>::size;
  const Index num_queries = GENERATE(1, 3, 7);
  const int kind = GENERATE(0, 1, 2, 3);
  for (Index num_keys = 1; num_keys <= size + 1; ++num_keys) {
    CAPTURE(num_queries, num_keys, kind);
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
      attend::detail::masked_softmax_row(&by_rows(q, 0), num_keys, mask.visible_prefix(0, q, num_queries, num_keys),
                                         mask.keep_row(0, q), mask.fully_masked());
    attend::detail::masked_softmax_block(block, mask, 0);
    auto view = wide.leftCols(num_keys);  // the same scores, rows num_keys + 3 apart
    attend::detail::masked_softmax_block(view, mask, 0);
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
