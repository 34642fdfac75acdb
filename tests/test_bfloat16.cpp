// bfloat16 (attend/tensor.hpp, detail/bf16_products.hpp): Linear<bfloat16> on every instruction-set level this CPU
// has, each forced in turn (the levels it lacks are named as skipped), against the definition in double on the same
// bfloat16 inputs, within the bound that rounding each output once and summing in float allow; its weights those of a
// Linear<float> from the same generator, rounded; no gradient buffers; Embedding<bfloat16>'s lookup; RMSNorm's and
// LayerNorm's rows in float; the FFNs within the bounds of their roundings; the same bits for 1 and 2 threads; a float
// model's weights loaded from safetensors; the conversions to and from float bit for bit against Eigen's; the kernel
// of packed pairs, which only AMD's CPUs dispatch, checked directly wherever the CPU has AVX512-BF16. Attention in
// bfloat16: test_bfloat16_attention.cpp.
#include <attend/detail/bf16_products.hpp>
#include <attend/embedding.hpp>
#include <attend/gated_ffn.hpp>
#include <attend/layer_norm.hpp>
#include <attend/isa.hpp>
#include <attend/linear.hpp>
#include <attend/position_wise_ffn.hpp>
#include <attend/random.hpp>
#include <attend/rms_norm.hpp>
#include <attend/safetensors.hpp>
#include <attend/threads.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <support/bfloat16.hpp>
#include <support/levels.hpp>
#include <support/temp_files.hpp>
#include <vector>

using attend::bfloat16;
using attend::Generator;
using attend::Index;
using attend::Isa;
using attend::Linear;
using attend::Tensor3;
using attend_test::bits_of;
using attend_test::ForcedLevel;
using attend_test::random_bf16;

namespace {

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
  for (Index i = 0; i < wide.bias().size(); ++i)
    REQUIRE(bits_of(narrow.bias()[i]) == bits_of(bfloat16(wide.bias()[i])));
}

TEST_CASE("Linear<bfloat16> keeps no gradients: its weights are all the memory it takes", "[bfloat16]") {
  Generator generator(8);
  Linear<bfloat16> layer(6, 5, true, generator);
  CHECK(layer.weight_grad().size() == 0);
  CHECK(layer.bias_grad().size() == 0);
  layer.zero_grad();
  const std::vector<attend::Parameter<bfloat16>> parameters = layer.parameters();
  REQUIRE(parameters.size() == 2);
  CHECK(parameters[0].name == "weight");
  CHECK(parameters[0].value == layer.weight().data());
  CHECK(parameters[0].size == 30);
  CHECK(parameters[0].grad == nullptr);
  CHECK(parameters[1].name == "bias");
  CHECK(parameters[1].grad == nullptr);
  CHECK(parameters[0].still_valid());
  CHECK(layer.state_dict().size() == 2);
}

TEST_CASE("Embedding<bfloat16>: an Embedding<float>'s table rounded, rows copied as stored, no gradients",
          "[bfloat16]") {
  Generator a(12), b(12);
  const attend::Embedding<float> wide(11, 6, a);
  attend::Embedding<bfloat16> narrow(11, 6, b);
  for (Index i = 0; i < wide.weight().size(); ++i)
    REQUIRE(bits_of(narrow.weight().data()[i]) == bits_of(bfloat16(wide.weight().data()[i])));
  CHECK(narrow.weight_grad().size() == 0);
  attend::Matrix<Index> tokens(2, 3);  // (batch, steps)
  tokens << 3, 0, 10, 3, 7, 1;
  const Tensor3<bfloat16> Y = narrow(tokens);  // (2, 3, 6)
  for (Index b0 = 0; b0 < 2; ++b0)
    for (Index t = 0; t < 3; ++t)
      for (Index j = 0; j < 6; ++j) REQUIRE(bits_of(Y(b0, t, j)) == bits_of(narrow.weight()(tokens(b0, t), j)));
  tokens(1, 2) = 11;
  REQUIRE_THROWS_WITH(narrow.forward(tokens), Catch::Contains("tokens(1, 2) must be in [0, 11)"));
}

// The largest ratio over Y of |Y - definition| to the bound for a norm's output computed in float from the stored
// bfloat16 values and rounded once: the float stage within (n + 8) 2^-24 of the row's scale, (mean |x| + max |x|)
// rstd |w_j| + |b_j| (its sums of n terms, a square root, a division and the products), the rounding within 2^-8 of
// the result. The definition: PyTorch's (biased variance), in double on the same values.
// weight (n), bias (n, or empty for RMS: no mean either).
double worst_norm_ratio(const Tensor3<bfloat16>& X, const attend::Vector<bfloat16>& weight,
                        const attend::Vector<bfloat16>& bias, bfloat16 eps_stored, const Tensor3<bfloat16>& Y) {
  const Index n = X.dimension(2);
  const bool layer = bias.size() > 0;
  const double eps = static_cast<double>(eps_stored);
  double worst = 0;
  for (Index b = 0; b < X.dimension(0); ++b)
    for (Index t = 0; t < X.dimension(1); ++t) {
      double sum = 0, magnitude = 0, largest = 0;
      for (Index j = 0; j < n; ++j) {
        const double x = static_cast<double>(X(b, t, j));
        sum += x;
        magnitude += std::abs(x);
        largest = std::max(largest, std::abs(x));
      }
      const double mean = layer ? sum / n : 0.0;
      double squares = 0;
      for (Index j = 0; j < n; ++j) squares += std::pow(static_cast<double>(X(b, t, j)) - mean, 2);
      const double rstd = 1.0 / std::sqrt(squares / n + eps);
      for (Index j = 0; j < n; ++j) {
        const double w = static_cast<double>(weight[j]), shift = layer ? static_cast<double>(bias[j]) : 0.0;
        const double expected = (static_cast<double>(X(b, t, j)) - mean) * rstd * w + shift;
        const double scale = (magnitude / n + largest) * rstd * std::abs(w) + std::abs(shift);
        const double computing = static_cast<double>(n + 8) * std::ldexp(1.0, -24) * scale;
        const double bound = computing + std::ldexp(1.0, -8) * (std::abs(expected) + computing);
        worst = std::max(worst, std::abs(static_cast<double>(Y(b, t, j)) - expected) / bound);
      }
    }
  return worst;
}

TEST_CASE("RMSNorm<bfloat16> and LayerNorm<bfloat16>: each row in float, each output rounded once", "[bfloat16]") {
  const Index n = GENERATE(1, 7, 64, 1000);
  CAPTURE(n);
  Tensor3<bfloat16> X = random_bf16(2, 3, n, 51);  // (2, 3, n)
  for (Index i = 0; i < X.size(); ++i) X.data()[i] = bfloat16(static_cast<float>(X.data()[i]) * 4.0f + 0.5f);
  Generator generator(52);
  attend::RMSNorm<bfloat16> rms(n);
  attend::LayerNorm<bfloat16> layer(n);
  for (Index j = 0; j < n; ++j) {
    rms.weight()[j] = bfloat16(generator.uniform(0.5f, 1.5f));
    layer.weight()[j] = bfloat16(generator.uniform(0.5f, 1.5f));
    layer.bias()[j] = bfloat16(generator.uniform(-0.5f, 0.5f));
  }
  CHECK(rms.weight_grad().size() == 0);
  CHECK(layer.bias_grad().size() == 0);
  const attend::Vector<bfloat16> none;
  CHECK(worst_norm_ratio(X, rms.weight(), none, rms.eps(), rms(X)) <= 1.0);
  CHECK(worst_norm_ratio(X, layer.weight(), layer.bias(), layer.eps(), layer.forward(X)) <= 1.0);
  Tensor3<bfloat16> Y(2, 3, n);
  layer.forward(X, Y);
  CHECK(worst_norm_ratio(X, layer.weight(), layer.bias(), layer.eps(), Y) <= 1.0);
}

// A Linear of bfloat16 on the row x, by the definition in double, with the bound of its error when x itself is only
// known within dx (each |x_k - true x_k| <= dx[k]): the error carried through W, the float sum's, and the rounding to
// bfloat16 (see worst_error_ratio). value[o] and bound[o] for each output o.
void linear_with_bound(const Linear<bfloat16>& layer, const std::vector<double>& x, const std::vector<double>& dx,
                       std::vector<double>& value, std::vector<double>& bound) {
  const auto& W = layer.weight();  // (out, in)
  const Index in = W.cols();
  value.assign(static_cast<std::size_t>(W.rows()), 0.0);
  bound.assign(static_cast<std::size_t>(W.rows()), 0.0);
  for (Index o = 0; o < W.rows(); ++o) {
    const double bias = layer.has_bias() ? static_cast<double>(layer.bias()[o]) : 0.0;
    double sum = bias, magnitude = std::abs(bias), carried = 0;
    for (Index k = 0; k < in; ++k) {
      const double w = static_cast<double>(W(o, k));
      sum += x[static_cast<std::size_t>(k)] * w;
      magnitude += std::abs(x[static_cast<std::size_t>(k)] * w);
      carried += dx[static_cast<std::size_t>(k)] * std::abs(w);
    }
    const double before = carried + static_cast<double>(in + 1) * std::ldexp(1.0, -24) * (magnitude + carried);
    value[static_cast<std::size_t>(o)] = sum;
    bound[static_cast<std::size_t>(o)] = before + std::ldexp(1.0, -8) * (std::abs(sum) + before);
  }
}

// f(v) in double, and the bound of f's value from v known within dv: |f'| <= 1.13 for ReLU, GELU (both forms) and
// SiLU, float's evaluation of f within 16 units of 2^-24 of |f(v)| + |v|.
double activation_bound(double v, double dv, double fv) {
  return 1.13 * dv + 16 * std::ldexp(1.0, -24) * (std::abs(fv) + std::abs(v) + dv);
}

std::vector<double> row_of(const Tensor3<bfloat16>& X, Index b, Index t) {
  std::vector<double> x(static_cast<std::size_t>(X.dimension(2)));
  for (Index k = 0; k < X.dimension(2); ++k) x[static_cast<std::size_t>(k)] = static_cast<double>(X(b, t, k));
  return x;
}

TEST_CASE("PositionWiseFFN<bfloat16> and GatedFFN<bfloat16>: within the bound of their roundings", "[bfloat16]") {
  const Index steps = GENERATE(3, 40);  // in place, widened
  CAPTURE(steps);
  const Tensor3<bfloat16> X = random_bf16(2, steps, 24, 61);  // (2, steps, 24)
  const double to_even = std::ldexp(1.0, -8);
  SECTION("PositionWiseFFN: dense2(f(dense1(X)))") {
    const attend::Activation activation = GENERATE(attend::Activation::relu, attend::Activation::gelu);
    Generator generator(62);
    const attend::PositionWiseFFN<bfloat16> ffn(24, 40, 16, activation, generator);
    const Tensor3<bfloat16> Y = ffn.forward(X);  // (2, steps, 16)
    double worst = 0;
    for (Index b = 0; b < 2; ++b)
      for (Index t = 0; t < steps; ++t) {
        std::vector<double> h, dh, y, dy;
        linear_with_bound(ffn.dense1(), row_of(X, b, t), std::vector<double>(24, 0.0), h, dh);
        std::vector<double> a(h.size()), da(h.size());
        for (std::size_t k = 0; k < h.size(); ++k) {
          a[k] = static_cast<double>(attend::detail::activate(activation, h[k]));
          const double before = activation_bound(h[k], dh[k], a[k]);
          da[k] = before + to_even * (std::abs(a[k]) + before);
        }
        linear_with_bound(ffn.dense2(), a, da, y, dy);
        for (Index o = 0; o < 16; ++o)
          worst = std::max(worst, std::abs(static_cast<double>(Y(b, t, o)) - y[static_cast<std::size_t>(o)]) /
                                      dy[static_cast<std::size_t>(o)]);
      }
    CHECK(worst <= 1.0);
  }
  SECTION("GatedFFN: down_proj(silu(gate_proj(X)) * up_proj(X))") {
    Generator generator(63);
    attend::GatedFFN<bfloat16> ffn(24, 40, attend::Activation::silu, true, generator);
    const Tensor3<bfloat16> Y = ffn(X);  // (2, steps, 24)
    double worst = 0;
    for (Index b = 0; b < 2; ++b)
      for (Index t = 0; t < steps; ++t) {
        const std::vector<double> x = row_of(X, b, t), exact(24, 0.0);
        std::vector<double> g, dg, u, du, y, dy;
        linear_with_bound(ffn.gate_proj(), x, exact, g, dg);
        linear_with_bound(ffn.up_proj(), x, exact, u, du);
        std::vector<double> a(g.size()), da(g.size());
        for (std::size_t k = 0; k < g.size(); ++k) {
          const double f = g[k] / (1 + std::exp(-g[k]));
          a[k] = f * u[k];
          const double df = activation_bound(g[k], dg[k], f);
          const double before = (std::abs(f) + df) * du[k] + df * std::abs(u[k]) +
                                std::ldexp(1.0, -24) * (std::abs(a[k]) + df * (std::abs(u[k]) + du[k]));
          da[k] = before + to_even * (std::abs(a[k]) + before);
        }
        linear_with_bound(ffn.down_proj(), a, da, y, dy);
        for (Index o = 0; o < 24; ++o)
          worst = std::max(worst, std::abs(static_cast<double>(Y(b, t, o)) - y[static_cast<std::size_t>(o)]) /
                                      dy[static_cast<std::size_t>(o)]);
      }
    CHECK(worst <= 1.0);
  }
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
  for (Index i = 0; i < wide.bias().size(); ++i)
    REQUIRE(bits_of(narrow.bias()[i]) == bits_of(bfloat16(wide.bias()[i])));
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
    // Every length of tail around the kernels' steps of 8 and 16: the elements past `count` are left as they were.
    for (Index n = 0; n <= 40; ++n) {
      CAPTURE(n);
      std::vector<bfloat16> short_narrowed(values.size(), bfloat16(7.0f));
      std::vector<float> short_widened(values.size(), 7.0f);
      attend::detail::narrow(isa, values.data(), n, short_narrowed.data());
      attend::detail::widen(isa, narrowed.data(), n, short_widened.data());
      for (Index i = 0; i < 48; ++i) {
        const auto k = static_cast<std::size_t>(i);
        REQUIRE(bits_of(short_narrowed[k]) == bits_of(i < n ? narrowed[k] : bfloat16(7.0f)));
        const float expected = i < n ? widened[k] : 7.0f;
        REQUIRE(std::memcmp(&short_widened[k], &expected, sizeof(float)) == 0);
      }
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
