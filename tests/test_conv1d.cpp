// Conv1d: torch.nn.Conv1d(in, out, kernel_size, padding='same') on (batch, steps, channels), against PyTorch's
// fixtures and the definition Y[b, s, o] = bias[o] + sum_{i, t} W[o, i, t] X[b, s + t - left, i], left = (k - 1) / 2;
// its PyTorch initialisation and its checks.
#include <algorithm>
#include <attend/conv1d.hpp>
#include <attend/linear.hpp>
#include <attend/random.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <support/fixture.hpp>
#include <support/matchers.hpp>
#include <support/random_tensor.hpp>

using attend::Conv1d;
using attend::Generator;
using attend::Index;
using attend::Tensor3;
using Catch::Matchers::Message;

using attend_test::random_tensor;

namespace {

// The definition with explicit loops in double, for a given left padding:
//   Y[b, s, o] = bias[o] + sum_{i, t} W[o, i, t] X[b, s + t - left, i], X outside [0, steps) being 0.
// W: (out, in, k); bias: (out) or empty.
template <class ScalarX, class ScalarW>
Tensor3<double> conv_by_definition(const Tensor3<ScalarX>& X, const Tensor3<ScalarW>& W,
                                   const attend::Vector<ScalarW>& bias, Index left) {
  const Index batch = X.dimension(0), steps = X.dimension(1);
  const Index out = W.dimension(0), in = W.dimension(1), k = W.dimension(2);
  Tensor3<double> Y(batch, steps, out);  // (batch, steps, out)
  for (Index b = 0; b < batch; ++b)
    for (Index s = 0; s < steps; ++s)
      for (Index o = 0; o < out; ++o) {
        double sum = bias.size() > 0 ? static_cast<double>(bias[o]) : 0.0;
        for (Index t = 0; t < k; ++t) {
          const Index step = s + t - left;
          if (step < 0 || step >= steps) continue;
          for (Index i = 0; i < in; ++i) sum += static_cast<double>(W(o, i, t)) * static_cast<double>(X(b, step, i));
        }
        Y(b, s, o) = sum;
      }
  return Y;
}

// The input gradient by its definition, with explicit loops in double:
//   dX[b, p, i] = sum_{o, t} W[o, i, t] dY[b, p + left - t, o],   dY outside [0, steps) being 0.
template <class Scalar>
Tensor3<double> input_gradient_by_definition(const Tensor3<Scalar>& dY, const Tensor3<Scalar>& W, Index left) {
  const Index batch = dY.dimension(0), steps = dY.dimension(1);
  const Index out = W.dimension(0), in = W.dimension(1), k = W.dimension(2);
  Tensor3<double> dX(batch, steps, in);  // (batch, steps, in)
  for (Index b = 0; b < batch; ++b)
    for (Index p = 0; p < steps; ++p)
      for (Index i = 0; i < in; ++i) {
        double sum = 0;
        for (Index t = 0; t < k; ++t) {
          const Index s = p + left - t;
          if (s < 0 || s >= steps) continue;
          for (Index o = 0; o < out; ++o) sum += static_cast<double>(W(o, i, t)) * static_cast<double>(dY(b, s, o));
        }
        dX(b, p, i) = sum;
      }
  return dX;
}

// A Conv1d with the parameters of a fixture.
template <class Scalar>
Conv1d<Scalar> conv_from(const attend_test::Fixture& f) {
  const Tensor3<Scalar> W = f.tensor3<Scalar>("weight");  // (out, in, k)
  REQUIRE(W.dimension(2) == f.index("kernel_size"));
  Conv1d<Scalar> conv(W.dimension(1), W.dimension(0), W.dimension(2), f.has("bias"));
  conv.weight() = W;
  if (f.has("bias")) conv.bias() = f.vector<Scalar>("bias");
  return conv;
}

// The largest |a - e| over all elements; shapes must agree.
template <class Scalar>
double max_difference(const Tensor3<Scalar>& actual, const Tensor3<double>& expected) {
  REQUIRE(actual.dimensions() == expected.dimensions());
  double largest = 0;
  for (Index i = 0; i < actual.size(); ++i)
    largest = std::max(largest, std::abs(static_cast<double>(actual.data()[i]) - expected.data()[i]));
  return largest;
}

const char* const fixtures[] = {"conv1d_k1", "conv1d_k2",        "conv1d_k3",     "conv1d_k4",
                                "conv1d_k5", "conv1d_k4_nobias", "conv1d_k3_long"};

}  // namespace

TEMPLATE_TEST_CASE("Conv1d matches torch.nn.Conv1d(padding='same') on the fixtures", "[conv1d][golden]", float,
                   double) {
  const std::string name = GENERATE(from_range(std::begin(fixtures), std::end(fixtures)));
  CAPTURE(name);
  const attend_test::Fixture f(name);
  const Conv1d<TestType> conv = conv_from<TestType>(f);
  CHECK(conv.has_bias() == f.has("bias"));
  const Tensor3<TestType> Y = conv.forward(f.tensor3<TestType>("X"));
  REQUIRE_THAT(Y, attend_test::Near(f.tensor3<double>("output"), attend_test::tolerance<TestType>()));
}

TEST_CASE("the even-kernel fixtures pad (k - 1) / 2 steps on the left, the rest on the right", "[conv1d][golden]") {
  // PyTorch's 'same' puts the odd step of padding on the right. The fixtures tell the two choices apart, so the
  // fixture test above would fail with the padding mirrored.
  const std::string name = GENERATE("conv1d_k2", "conv1d_k4", "conv1d_k4_nobias");
  CAPTURE(name);
  const attend_test::Fixture f(name);
  const Tensor3<double> W = f.tensor3<double>("weight");  // (out, in, k)
  const attend::Vector<double> bias = f.has("bias") ? f.vector<double>("bias") : attend::Vector<double>();
  const Tensor3<double> X = f.tensor3<double>("X");
  const Tensor3<double> output = f.tensor3<double>("output");
  const Index k = f.index("kernel_size");
  CHECK(max_difference(conv_by_definition(X, W, bias, (k - 1) / 2), output) < 1e-12);
  CHECK(max_difference(conv_by_definition(X, W, bias, k / 2), output) > 1e-3);
  CHECK(Conv1d<double>(3, 4, k).left_padding() == (k - 1) / 2);
}

TEMPLATE_TEST_CASE("Conv1d pads (k - 1) / 2 steps on the left and keeps the length, k = 1 .. 6", "[conv1d]", float,
                   double) {
  const Index k = GENERATE(range(Index(1), Index(7)));
  CAPTURE(k);
  const Conv1d<TestType> conv(2, 3, k);
  CHECK(conv.left_padding() == (k - 1) / 2);
  CHECK(conv.right_padding() == k - 1 - (k - 1) / 2);
  CHECK(conv.left_padding() + conv.right_padding() == k - 1);
  for (Index steps : {1, 2, 5, 7}) {
    CAPTURE(steps);
    const Tensor3<TestType> Y = conv.forward(random_tensor<TestType>(2, steps, 2, 51));
    CHECK(Y.dimension(0) == 2);
    CHECK(Y.dimension(1) == steps);
    CHECK(Y.dimension(2) == 3);
  }
}

TEMPLATE_TEST_CASE("Conv1d with a one-hot kernel shifts the sequence by t - left, filling with zeros", "[conv1d]",
                   float, double) {
  // One channel in and out, no bias, W[0, 0, :] = e_t: Y[s] = X[s + t - left], 0 outside. X = 1 .. 6, exact.
  const Index k = GENERATE(range(Index(1), Index(7)));
  const Index steps = 6;
  Tensor3<TestType> X(1, steps, 1);  // (batch, steps, channels)
  for (Index s = 0; s < steps; ++s) X(0, s, 0) = static_cast<TestType>(s + 1);
  Conv1d<TestType> conv(1, 1, k, false);
  const Index left = (k - 1) / 2;
  for (Index t = 0; t < k; ++t) {
    CAPTURE(k, t);
    conv.weight().setZero();
    conv.weight()(0, 0, t) = TestType(1);
    const Tensor3<TestType> Y = conv(X);
    for (Index s = 0; s < steps; ++s) {
      CAPTURE(s);
      const Index from = s + t - left;
      CHECK(Y(0, s, 0) == (from >= 0 && from < steps ? static_cast<TestType>(from + 1) : TestType(0)));
    }
  }
}

TEMPLATE_TEST_CASE("Conv1d agrees with the definition written as loops", "[conv1d]", float, double) {
  const Index k = GENERATE(1, 2, 3, 4, 5, 6);
  const bool bias = GENERATE(true, false);
  Generator generator(61);
  const Conv1d<TestType> conv(3, 5, k, bias, generator);
  for (Index steps : {1, 2, 3, 8}) {
    CAPTURE(k, bias, steps);
    const Tensor3<TestType> X = random_tensor<TestType>(3, steps, 3, 62);
    REQUIRE_THAT(conv.forward(X), attend_test::Near(conv_by_definition(X, conv.weight(), conv.bias(), (k - 1) / 2),
                                            attend_test::tolerance<TestType>()));
  }
}

TEMPLATE_TEST_CASE("Conv1d agrees with the definition over every block shape of its product", "[conv1d]", float,
                   double) {
  // The product runs on the kernel table's correlate_rows (detail/kernels/products-inl.hpp) in chunks of 256 steps:
  // out_channels below, at and above whole packets (partial last packet, micro-panels of 1 to 4 packets) and step
  // counts that end a chunk early, exactly, or one step into the next, so that every row block (6, 4 and single
  // rows) meets every column block; against the definition written as loops. Kernels of 1 (no chunk reaches past
  // its batch row), 3, 4 and 6 (left 2, right 3): in the chunks at either end of a batch row the rows whose field
  // reaches past it go one at a time over the taps they reach; the second chunk of each of 601 steps has none.
  const Index out = GENERATE(5, 16, 37, 70);
  const Index k = GENERATE(1, 3, 4, 6);
  Generator generator(63);
  const Conv1d<TestType> conv(7, out, k, true, generator);
  for (Index steps : {255, 256, 257, 601}) {
    CAPTURE(out, k, steps);
    const Tensor3<TestType> X = random_tensor<TestType>(2, steps, 7, 64);
    REQUIRE_THAT(conv.forward(X), attend_test::Near(conv_by_definition(X, conv.weight(), conv.bias(), (k - 1) / 2),
                                            attend_test::tolerance<TestType>()));
  }
}

TEMPLATE_TEST_CASE("Conv1d agrees with the definition over several panels of channels, forward and backward",
                   "[conv1d]", float, double) {
  // The kernel packs a panel of every tap at once (tuning::product_panel_depth / k input channels by
  // product_panel_width output channels): 300 input channels (three panels and part of one, or four and part of
  // one) and 140 output channels (two panels of floats, three of doubles), over two chunks of steps; the input
  // gradient runs on the same kernel with the channels swapped, against input_gradient_by_definition.
  const Index k = GENERATE(3, 4);
  const Index in = 300, out = 140, steps = 260, left = (k - 1) / 2;
  CAPTURE(k);
  Generator generator(65);
  Conv1d<TestType> conv(in, out, k, true, generator);
  const Tensor3<TestType> X = random_tensor<TestType>(2, steps, in, 66);    // (2, steps, in)
  const Tensor3<TestType> dY = random_tensor<TestType>(2, steps, out, 67);  // (2, steps, out)
  // Sums of in * k (or out * k) products of entries within [-1, 1] by weights within 1/sqrt(in * k): abs grows with
  // the number of terms.
  const attend_test::Tolerance<TestType> tol{attend_test::tolerance<TestType>().rel,
                                             attend_test::tolerance<TestType>().abs * static_cast<double>(out * k)};
  REQUIRE_THAT(conv(X), attend_test::Near(conv_by_definition(X, conv.weight(), conv.bias(), left), tol));
  REQUIRE_THAT(conv.backward(dY), attend_test::Near(input_gradient_by_definition(dY, conv.weight(), left), tol));
}

TEMPLATE_TEST_CASE("Conv1d agrees with the definition when its taps outnumber a packed panel's rows",
                   "[conv1d]", float, double) {
  // The kernel packs the taps of a panel together, at most tuning::product_panel_depth of them (256): 257 and 300
  // taps run in two groups, each with its own rows near the ends of a batch row. Sequences shorter than the kernel
  // (every output step's field reaches past both ends) and longer than a chunk of steps; forward and input gradient.
  const Index k = GENERATE(257, 300);
  const Index steps = GENERATE(5, 300);
  const Index in = 3, out = 20, left = (k - 1) / 2;
  CAPTURE(k, steps);
  Generator generator(68);
  Conv1d<TestType> conv(in, out, k, true, generator);
  const Tensor3<TestType> X = random_tensor<TestType>(2, steps, in, 69);    // (2, steps, in)
  const Tensor3<TestType> dY = random_tensor<TestType>(2, steps, out, 70);  // (2, steps, out)
  const attend_test::Tolerance<TestType> tol{attend_test::tolerance<TestType>().rel,
                                             attend_test::tolerance<TestType>().abs * static_cast<double>(out * k)};
  REQUIRE_THAT(conv(X), attend_test::Near(conv_by_definition(X, conv.weight(), conv.bias(), left), tol));
  REQUIRE_THAT(conv.backward(dY),
               attend_test::Near(input_gradient_by_definition(dY, conv.weight(), left), tol));
}

TEMPLATE_TEST_CASE("Conv1d with a kernel of width 1 is a Linear on the channels", "[conv1d]", float, double) {
  // Conv1d(in, out, 1) and Linear(in, out) draw the same numbers in the same order with the same bound
  // 1/sqrt(in * 1), so from equal seeds they have equal parameters and compute the same function.
  const bool bias = GENERATE(true, false);
  CAPTURE(bias);
  Generator for_conv(71), for_linear(71);
  const Conv1d<TestType> conv(4, 6, 1, bias, for_conv);
  const attend::Linear<TestType> linear(4, 6, bias, for_linear);
  for (Index o = 0; o < 6; ++o)
    for (Index i = 0; i < 4; ++i) CHECK(conv.weight()(o, i, 0) == linear.weight()(o, i));
  CHECK(conv.bias() == linear.bias());

  const Tensor3<TestType> X = random_tensor<TestType>(3, 5, 4, 72);
  Tensor3<double> expected = linear.forward(X).template cast<double>();
  REQUIRE_THAT(conv.forward(X), attend_test::Near(expected, attend_test::tolerance<TestType>()));
}

TEMPLATE_TEST_CASE("Conv1d's output does not depend on the mode", "[conv1d]", float, double) {
  Conv1d<TestType> conv(3, 4, 3);
  REQUIRE(conv.is_training());
  const Tensor3<TestType> X = random_tensor<TestType>(2, 5, 3, 81);
  const Tensor3<TestType> in_training = conv(X);
  conv.eval();
  REQUIRE_FALSE(conv.is_training());
  const Tensor3<TestType> in_evaluation = conv(X);
  REQUIRE(in_training.size() == in_evaluation.size());
  for (Index i = 0; i < in_training.size(); ++i) CHECK(in_training.data()[i] == in_evaluation.data()[i]);
}

TEMPLATE_TEST_CASE("Conv1d gives an empty result of the right shape for zero steps or zero batch rows", "[conv1d]",
                   float, double) {
  const Conv1d<TestType> conv(3, 4, 5);
  const Tensor3<TestType> no_steps = conv.forward(Tensor3<TestType>(2, 0, 3));
  CHECK(no_steps.dimension(0) == 2);
  CHECK(no_steps.dimension(1) == 0);
  CHECK(no_steps.dimension(2) == 4);
  const Tensor3<TestType> no_rows = conv.forward(Tensor3<TestType>(0, 7, 3));
  CHECK(no_rows.dimension(0) == 0);
  CHECK(no_rows.dimension(1) == 7);
  CHECK(no_rows.dimension(2) == 4);
}

TEMPLATE_TEST_CASE("Conv1d counts its multiply-adds", "[conv1d]", float, double) {
  const Conv1d<TestType> conv(3, 4, 5);
  CHECK(conv.multiply_adds(2, 7) == 2 * 7 * 4 * 3 * 5);
  CHECK(conv.multiply_adds(0, 7) == 0);
}

TEMPLATE_TEST_CASE("Conv1d is initialised uniformly within 1/sqrt(in * k), as PyTorch", "[conv1d][init]", float,
                   double) {
  // torch.nn.Conv1d.reset_parameters: kaiming_uniform_(a=sqrt(5)) on W gives bound 1/sqrt(fan_in) with
  // fan_in = in_channels * kernel_size, and the bias bound is the same. in = 4, k = 25, out = 64 give 1/10, far
  // from 1/sqrt(in) = 1/2, 1/sqrt(k) = 1/5 and 1/sqrt(out * k) = 1/40.
  Generator generator(3);
  const Conv1d<TestType> conv(4, 64, 25, true, generator);
  const TestType bound = TestType(0.1);
  const auto& W = conv.weight();
  REQUIRE(W.dimension(0) == 64);
  REQUIRE(W.dimension(1) == 4);
  REQUIRE(W.dimension(2) == 25);
  const Eigen::Tensor<TestType, 0, Eigen::RowMajor> lowest = W.minimum(), highest = W.maximum(), mean = W.mean();
  CHECK(lowest() >= -bound);
  CHECK(highest() < bound);
  // 6400 uniform draws: the extremes come within 1% of the bound (for a random seed the chance they do not is
  // 2 * 0.995^6400, about 2e-14) and the mean is within 5 sigma of 0 (sigma = bound / sqrt(3 * 6400)).
  CHECK(lowest() < TestType(-0.99) * bound);
  CHECK(highest() > TestType(0.99) * bound);
  CHECK(std::abs(static_cast<double>(mean())) < 5 * static_cast<double>(bound) / std::sqrt(3.0 * 6400));

  const auto& b = conv.bias();
  REQUIRE(b.size() == 64);
  CHECK(b.minCoeff() >= -bound);
  CHECK(b.maxCoeff() < bound);
  // 64 draws: the extremes come within 25% of the bound (chance they do not, 2 * 0.875^64, about 4e-4).
  CHECK(b.minCoeff() < TestType(-0.75) * bound);
  CHECK(b.maxCoeff() > TestType(0.75) * bound);
}

TEMPLATE_TEST_CASE("Conv1d draws W in its (out, in, k) row-major order, then the bias", "[conv1d][init]", float,
                   double) {
  Generator generator(42);
  const Conv1d<TestType> conv(2, 3, 4, true, generator);
  Generator replay(42);
  const TestType bound = TestType(1) / std::sqrt(TestType(8));
  for (Index o = 0; o < 3; ++o)
    for (Index i = 0; i < 2; ++i)
      for (Index t = 0; t < 4; ++t) {
        CAPTURE(o, i, t);
        CHECK(conv.weight()(o, i, t) == replay.uniform<TestType>(-bound, bound));
      }
  for (Index o = 0; o < 3; ++o) {
    CAPTURE(o);
    CHECK(conv.bias()[o] == replay.uniform<TestType>(-bound, bound));
  }
}

TEMPLATE_TEST_CASE("Conv1d's parameters are deterministic for a given generator seed", "[conv1d][init]", float,
                   double) {
  Generator seven_a(7), seven_b(7), eight(8);
  const Conv1d<TestType> a(3, 4, 3, true, seven_a);
  const Conv1d<TestType> b(3, 4, 3, true, seven_b);
  const Conv1d<TestType> c(3, 4, 3, true, eight);
  const auto same = [](const Tensor3<TestType>& x, const Tensor3<TestType>& y) {
    for (Index i = 0; i < x.size(); ++i)
      if (x.data()[i] != y.data()[i]) return false;
    return x.dimensions() == y.dimensions();
  };
  CHECK(same(a.weight(), b.weight()));
  CHECK(a.bias() == b.bias());
  CHECK_FALSE(same(a.weight(), c.weight()));
  CHECK(a.bias() != c.bias());

  attend::manual_seed(99);
  const Conv1d<TestType> from_default(3, 4, 3);
  Generator ninety_nine(99);
  const Conv1d<TestType> from_explicit(3, 4, 3, true, ninety_nine);
  CHECK(same(from_default.weight(), from_explicit.weight()));
  CHECK(from_default.bias() == from_explicit.bias());
}

TEMPLATE_TEST_CASE("Conv1d without bias has an empty bias and adds nothing", "[conv1d]", float, double) {
  Conv1d<TestType> conv(1, 1, 3, false);
  CHECK_FALSE(conv.has_bias());
  CHECK(conv.bias().size() == 0);
  conv.weight().setZero();
  Tensor3<TestType> X(1, 4, 1);
  X.setConstant(TestType(2));
  const Tensor3<TestType> Y = conv(X);
  for (Index s = 0; s < 4; ++s) CHECK(Y(0, s, 0) == TestType(0));
}

TEMPLATE_TEST_CASE("Conv1d rejects sizes below 1", "[conv1d][errors]", float, double) {
  REQUIRE_THROWS_MATCHES(Conv1d<TestType>(0, 4, 3), std::invalid_argument,
                         Message("Conv1d: in_channels must be at least 1, got 0"));
  REQUIRE_THROWS_MATCHES(Conv1d<TestType>(3, -1, 3), std::invalid_argument,
                         Message("Conv1d: out_channels must be at least 1, got -1"));
  REQUIRE_THROWS_MATCHES(Conv1d<TestType>(3, 4, 0), std::invalid_argument,
                         Message("Conv1d: kernel_size must be at least 1, got 0"));
}

TEMPLATE_TEST_CASE("Conv1d rejects X with the wrong channel count, naming X and both counts", "[conv1d][errors]", float,
                   double) {
  const Conv1d<TestType> conv(3, 4, 3);
  Tensor3<TestType> X(2, 7, 4);
  X.setZero();
  REQUIRE_THROWS_MATCHES(conv.forward(X), std::invalid_argument,
                         Message("Conv1d: X must have 3 features (in_channels) (axis 2), got shape (2, 7, 4)"));
  REQUIRE_THROWS_MATCHES(conv.forward(Tensor3<TestType>(2, 0, 1)), std::invalid_argument,
                         Message("Conv1d: X must have 3 features (in_channels) (axis 2), got shape (2, 0, 1)"));
}

TEMPLATE_TEST_CASE("Conv1d parameters resized from outside make the call throw, naming both shapes", "[conv1d][errors]",
                   float, double) {
  Tensor3<TestType> X(2, 7, 3);
  X.setZero();
  SECTION("weight with another kernel size") {
    Conv1d<TestType> conv(3, 4, 5);
    conv.weight().resize(4, 3, 4);
    REQUIRE_THROWS_MATCHES(
        conv(X), std::invalid_argument,
        Message("Conv1d: weight must have shape (4, 3, 5) (out_channels, in_channels, kernel_size), got (4, 3, 4)"));
  }
  SECTION("weight with in and out swapped") {
    Conv1d<TestType> conv(3, 4, 5);
    conv.weight().resize(3, 4, 5);
    REQUIRE_THROWS_MATCHES(
        conv(X), std::invalid_argument,
        Message("Conv1d: weight must have shape (4, 3, 5) (out_channels, in_channels, kernel_size), got (3, 4, 5)"));
  }
  SECTION("bias shorter") {
    Conv1d<TestType> conv(3, 4, 5);
    conv.bias().resize(3);
    REQUIRE_THROWS_MATCHES(conv(X), std::invalid_argument, Message("Conv1d: bias must have shape (4,), got (3,)"));
  }
  SECTION("without bias: given one") {
    Conv1d<TestType> conv(3, 4, 5, false);
    conv.bias().setOnes(4);
    REQUIRE_THROWS_MATCHES(conv(X), std::invalid_argument, Message("Conv1d: bias must have shape (0,), got (4,)"));
  }
}
