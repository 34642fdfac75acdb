// bfloat16 (attend/tensor.hpp, detail/bf16_products.hpp): Linear<bfloat16> on every instruction-set level this CPU
// has, each forced in turn (the levels it lacks are named as skipped), against the definition in double on the same
// bfloat16 inputs, within the bound that rounding each output once and summing in float allow; its weights those of a
// Linear<float> from the same generator, rounded; the same bits for 1 and 2 threads; the conversions to and from
// float bit for bit against Eigen's; the kernel of packed pairs, which only AMD's CPUs dispatch, checked directly
// wherever the CPU has AVX512-BF16.
#include <attend/detail/bf16_products.hpp>
#include <attend/isa.hpp>
#include <attend/linear.hpp>
#include <attend/random.hpp>
#include <attend/safetensors.hpp>
#include <attend/threads.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <support/levels.hpp>
#include <support/temp_files.hpp>
#include <vector>

using attend::bfloat16;
using attend::Generator;
using attend::Index;
using attend::Isa;
using attend::Linear;
using attend::Tensor3;

namespace {

// The level in force until the scope ends, then the one before.
class ForcedLevel {
 public:
  explicit ForcedLevel(Isa isa) : before_(attend::active_isa()) { attend::set_isa(isa); }
  ~ForcedLevel() { attend::set_isa(before_); }
  ForcedLevel(const ForcedLevel&) = delete;
  ForcedLevel& operator=(const ForcedLevel&) = delete;

 private:
  Isa before_;
};

std::uint16_t bits_of(bfloat16 x) {
  std::uint16_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

// A (batch, steps, features) tensor of bfloat16 values drawn uniformly in [-1, 1) and rounded.
Tensor3<bfloat16> random_bf16(Index batch, Index steps, Index features, std::uint64_t seed) {
  Generator generator(seed);
  Tensor3<bfloat16> X(batch, steps, features);
  for (Index i = 0; i < X.size(); ++i) X.data()[i] = bfloat16(generator.uniform(-1.0f, 1.0f));
  return X;
}

// The largest ratio over Y of |Y - definition| to the bound for one output rounded once to bfloat16 from a float sum
// of `in` products and a bias: the sum's error at most (in + 1) 2^-24 times the sum of the magnitudes M = sum |x w| +
// |b| (each product is exact in float, each addition rounds once), the rounding at most 2^-8 of the result (bfloat16
// keeps 8 significant bits; to nearest: half a unit in the last place). The definition: the same bfloat16 values,
// multiplied and summed in double. A result within the bound gives at most 1.
double worst_error_ratio(const Tensor3<bfloat16>& X, const Linear<bfloat16>& layer, const Tensor3<bfloat16>& Y) {
  const auto& W = layer.weight();  // (out, in)
  const Index in = W.cols();
  double worst = 0;
  for (Index b = 0; b < X.dimension(0); ++b)
    for (Index t = 0; t < X.dimension(1); ++t)
      for (Index o = 0; o < W.rows(); ++o) {
        const double bias = layer.has_bias() ? static_cast<double>(layer.bias()[o]) : 0.0;
        double sum = bias, magnitude = std::abs(bias);
        for (Index i = 0; i < in; ++i) {
          const double product = static_cast<double>(X(b, t, i)) * static_cast<double>(W(o, i));
          sum += product;
          magnitude += std::abs(product);
        }
        const double summing = static_cast<double>(in + 1) * std::ldexp(1.0, -24) * magnitude;
        const double bound = summing + std::ldexp(1.0, -8) * (std::abs(sum) + summing);
        const double error = std::abs(static_cast<double>(Y(b, t, o)) - sum);
        worst = std::max(worst, bound > 0 ? error / bound : (error > 0 ? INFINITY : 0.0));
      }
  return worst;
}

struct Shape {
  Index batch, steps, in, out;
};

}  // namespace

TEST_CASE("the levels bfloat16 runs on, and those this CPU lacks", "[bfloat16]") {
  const std::vector<Isa> levels = attend_test::bf16_levels();
  for (Isa isa : attend::detail::all_isas)
    if (std::find(levels.begin(), levels.end(), isa) == levels.end())
      WARN("skipped: this CPU cannot run the " << attend::isa_name(isa) << " level");
  REQUIRE(levels.back() == Isa::generic);
}

TEST_CASE("Linear<bfloat16> is X W^T + b in float, rounded once, on every level", "[bfloat16]") {
  // Rows around the in-place kernels' blocks of 4 and tuning::bf16_in_place_rows, then the widened path's chunks of
  // tuning::rows_per_chunk; inputs around steps of 8, 16 and 32 elements and odd; outputs around blocks of 4 and the
  // pieces of tuning::few_rows_piece.
  const Shape shape = GENERATE(Shape{1, 1, 1, 1}, Shape{1, 1, 7, 5}, Shape{1, 3, 33, 17}, Shape{2, 5, 64, 40},
                               Shape{1, 32, 31, 37}, Shape{1, 33, 130, 50}, Shape{2, 300, 48, 70},
                               Shape{1, 2, 1000, 300});
  const bool bias = GENERATE(true, false);
  CAPTURE(shape.batch, shape.steps, shape.in, shape.out, bias);
  Generator generator(17);
  const Linear<bfloat16> layer(shape.in, shape.out, bias, generator);
  const Tensor3<bfloat16> X = random_bf16(shape.batch, shape.steps, shape.in, 23);  // (batch, steps, in)
  for (Isa isa : attend_test::bf16_levels()) {
    CAPTURE(attend::isa_name(isa));
    const ForcedLevel level(isa);
    const Tensor3<bfloat16> Y = layer.forward(X);  // (batch, steps, out)
    REQUIRE(Y.dimension(0) == shape.batch);
    REQUIRE(Y.dimension(1) == shape.steps);
    REQUIRE(Y.dimension(2) == shape.out);
    CHECK(worst_error_ratio(X, layer, Y) <= 1.0);
  }
}

TEST_CASE("Linear<bfloat16> in place: a TensorMap in and out, and operator() the same as forward()", "[bfloat16]") {
  Generator generator(5);
  Linear<bfloat16> layer(24, 10, true, generator);
  Tensor3<bfloat16> X = random_bf16(2, 3, 24, 6);  // (2, 3, 24)
  const Tensor3<bfloat16> Y = layer.forward(X);     // (2, 3, 10)
  const Tensor3<bfloat16> Y_call = layer(X);
  std::vector<bfloat16> out(2 * 3 * 10, bfloat16(7.0f));
  attend::TensorMap3<bfloat16> Y_view(out.data(), 2, 3, 10);
  layer.forward(attend::ConstTensorMap3<bfloat16>(X.data(), 2, 3, 24), Y_view);
  for (Index i = 0; i < Y.size(); ++i) {
    REQUIRE(bits_of(Y_call.data()[i]) == bits_of(Y.data()[i]));
    REQUIRE(bits_of(out[static_cast<std::size_t>(i)]) == bits_of(Y.data()[i]));
  }
  CHECK(worst_error_ratio(X, layer, Y) <= 1.0);
}

TEST_CASE("Linear<bfloat16>'s weights are Linear<float>'s from the same generator, rounded", "[bfloat16]") {
  const bool bias = GENERATE(true, false);
  Generator a(41), b(41);
  const Linear<float> wide(19, 23, bias, a);
  const Linear<bfloat16> narrow(19, 23, bias, b);
  REQUIRE(narrow.weight().rows() == 23);
  REQUIRE(narrow.weight().cols() == 19);
  REQUIRE(narrow.bias().size() == wide.bias().size());
  for (Index i = 0; i < wide.weight().size(); ++i)
    REQUIRE(bits_of(narrow.weight().data()[i]) == bits_of(bfloat16(wide.weight().data()[i])));
  for (Index i = 0; i < wide.bias().size(); ++i) REQUIRE(bits_of(narrow.bias()[i]) == bits_of(bfloat16(wide.bias()[i])));
}

TEST_CASE("Linear<bfloat16> loads a float model's weights from safetensors, each rounded once", "[bfloat16]") {
  Generator a(43), b(44);
  const Linear<float> wide(12, 9, true, a);
  Linear<bfloat16> narrow(12, 9, true, b);  // other values, to be replaced
  const std::string path = attend_test::safetensors_path<float>("linear_for_bf16");
  attend::save_safetensors(path, wide.state_dict());  // F32
  narrow.load_state_dict(attend::load_safetensors<bfloat16>(path));
  for (Index i = 0; i < wide.weight().size(); ++i)
    REQUIRE(bits_of(narrow.weight().data()[i]) == bits_of(bfloat16(wide.weight().data()[i])));
  for (Index i = 0; i < wide.bias().size(); ++i) REQUIRE(bits_of(narrow.bias()[i]) == bits_of(bfloat16(wide.bias()[i])));
}

TEST_CASE("Linear<bfloat16> gives the same bits on 1 and 2 threads, on every level", "[bfloat16]") {
  // Enough work for a team (tuning::worth_a_team): a decoding step's few rows and many rows.
  const Shape shape = GENERATE(Shape{1, 4, 1024, 1024}, Shape{2, 200, 128, 160});
  CAPTURE(shape.steps, shape.in, shape.out);
  Generator generator(3);
  const Linear<bfloat16> layer(shape.in, shape.out, true, generator);
  const Tensor3<bfloat16> X = random_bf16(shape.batch, shape.steps, shape.in, 4);
  const int threads_before = attend::num_threads();
  for (Isa isa : attend_test::bf16_levels()) {
    CAPTURE(attend::isa_name(isa));
    const ForcedLevel level(isa);
    attend::set_num_threads(1);
    const Tensor3<bfloat16> one = layer.forward(X);
    attend::set_num_threads(2);
    const Tensor3<bfloat16> two = layer.forward(X);
    attend::set_num_threads(threads_before);
    for (Index i = 0; i < one.size(); ++i) REQUIRE(bits_of(one.data()[i]) == bits_of(two.data()[i]));
  }
}

TEST_CASE("bfloat16 to float and back: exact, and to nearest even, as Eigen's conversions", "[bfloat16]") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> values = {0.0f, -0.0f, 1.0f, -1.0f, 1.00390625f /* 1 + 2^-8: a tie, to even (1) */,
                               1.01171875f /* 1 + 3 2^-8: a tie, to even (1 + 2^-6) */, 1.0039063f, 3.1415927f,
                               -2.7182817f, 1e-30f, -1e30f, 3.3895314e38f /* rounds to infinity */, inf, -inf, nan,
                               -nan, std::numeric_limits<float>::denorm_min(), 1.1754942e-38f};
  Generator generator(9);
  for (int i = 0; i < 200; ++i) values.push_back(generator.uniform(-1000.0f, 1000.0f));
  const Index count = static_cast<Index>(values.size());
  for (Isa isa : attend_test::bf16_levels()) {
    CAPTURE(attend::isa_name(isa));
    std::vector<bfloat16> narrowed(values.size());
    attend::detail::narrow(isa, values.data(), count, narrowed.data());
    std::vector<float> widened(values.size());
    attend::detail::widen(isa, narrowed.data(), count, widened.data());
    for (std::size_t i = 0; i < values.size(); ++i) {
      CAPTURE(values[i]);
      REQUIRE(bits_of(narrowed[i]) == bits_of(bfloat16(values[i])));
      const float expected = static_cast<float>(narrowed[i]);
      REQUIRE(std::memcmp(&widened[i], &expected, sizeof(float)) == 0);
    }
  }
}

#ifdef ATTEND_X86_DISPATCH
TEST_CASE("AVX512-BF16's packed pairs: X W^T + b within the bound, on CPUs that have them", "[bfloat16]") {
  if (!attend::detail::cpu_has(Isa::avx512_bf16)) {
    WARN("skipped: this CPU has no AVX512-BF16");
    return;
  }
  // Rows around the kernel's blocks of 6 and the chunks of tuning::rows_per_chunk; outputs around its panels of 16
  // and groups of tuning::bf16_panel_group panels; odd depths (the last pair half zero).
  const Shape shape = GENERATE(Shape{1, 1, 1, 1}, Shape{1, 7, 3, 17}, Shape{1, 13, 33, 130}, Shape{1, 300, 64, 300});
  CAPTURE(shape.steps, shape.in, shape.out);
  Generator generator(29);
  const Linear<bfloat16> layer(shape.in, shape.out, true, generator);
  const Tensor3<bfloat16> X = random_bf16(1, shape.steps, shape.in, 31);  // (1, steps, in)
  std::vector<float> bias(static_cast<std::size_t>(shape.out));
  for (Index o = 0; o < shape.out; ++o) bias[static_cast<std::size_t>(o)] = static_cast<float>(layer.bias()[o]);
  const ForcedLevel level(Isa::avx512_bf16);
  Tensor3<bfloat16> Y(1, shape.steps, shape.out);
  attend::detail::packed_pairs_product(X.data(), shape.in, shape.steps, shape.in, layer.weight().data(), shape.out,
                                       bias.data(), Y.data(), shape.out);
  CHECK(worst_error_ratio(X, layer, Y) <= 1.0);
}
#endif

TEST_CASE("Linear<bfloat16> refuses input of the wrong width, naming it", "[bfloat16]") {
  Generator generator(1);
  const Linear<bfloat16> layer(8, 4, true, generator);
  const Tensor3<bfloat16> X = random_bf16(1, 2, 7, 2);
  REQUIRE_THROWS_AS(layer.forward(X), std::invalid_argument);
  REQUIRE_THROWS_WITH(layer.forward(X), Catch::Contains("in_features"));
}
