// The attention core's products on bfloat16 storage (detail/avx512_bf16/attention.hpp, the kernel table's bf16_*
// entries), against their definitions in double on the same bfloat16 values:
// - a decoding step's, read in place: the scores X K^T of a few query rows and the weighted sum Y + P V, over the
//   kernels' block shapes (rows 1-8 in one packet of 4 or two, depths around the groups of 8 steps and past the copy
//   kept on the stack, keys around the blocks of 8; rows around the blocks of 8 and 4, columns around the packets of
//   16), with the same bits however the keys are split into calls;
// - more rows', on blocks packed into pairs: the scores from the keys' pairs, and the weights rounded to bfloat16 in
//   place times the values' pairs (rows around the blocks of 6, depths and keys around the pairs and the panels of 16,
//   stored and added);
// strided operands and nothing written past the outputs. The entries exist for floats on avx512_bf16 only. The suite
// runs once per level (ATTEND_ISA): on the others these cases say they were skipped.
#include <attend/detail/kernels.hpp>
#include <attend/random.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <support/checks.hpp>
#include <vector>

using attend::bfloat16;
using attend::Index;
using attend::Matrix;

namespace {

// A (rows, cols) row-major matrix of bfloat16 values uniform in [-1, 1).
Matrix<bfloat16> random_bf16_matrix(Index rows, Index cols, std::uint64_t seed) {
  attend::Generator generator(seed);
  Matrix<bfloat16> M(rows, cols);
  for (Index i = 0; i < M.size(); ++i) M.data()[i] = bfloat16(generator.uniform(-1.0f, 1.0f));
  return M;
}

double value(bfloat16 x) { return static_cast<double>(static_cast<float>(x)); }

constexpr double unit = 1.0 / (1 << 24);  // float's unit roundoff, 2^-24

bool same_bf16(bfloat16 a, bfloat16 b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// A (rows, cols) row-major matrix of floats uniform in [low, high), from `generator`.
Matrix<float> uniform_matrix(Index rows, Index cols, float low, float high, attend::Generator& generator) {
  Matrix<float> M(rows, cols);
  for (Index i = 0; i < M.size(); ++i) M.data()[i] = generator.uniform(low, high);
  return M;
}

// The largest ratio over Y's first n columns of |Y - (Y0 + X K^T)| to the bound of a float sum of d exact products
// (and the one addition to Y0): (d + 2) 2^-24 of the sum of their magnitudes. X (rows, d used), K (n, d used); Y0
// null for a product stored rather than added.
double worst_scores_ratio(const Matrix<bfloat16>& X, const Matrix<bfloat16>& K, Index d, Index n,
                          const Matrix<float>& Y, const Matrix<float>* Y0) {
  double worst = 0;
  for (Index r = 0; r < X.rows(); ++r)
    for (Index o = 0; o < n; ++o) {
      double sum = Y0 != nullptr ? (*Y0)(r, o) : 0.0, magnitude = std::abs(sum);
      for (Index k = 0; k < d; ++k) {
        const double product = value(X(r, k)) * value(K(o, k));
        sum += product;
        magnitude += std::abs(product);
      }
      const double bound = static_cast<double>(d + 2) * unit * magnitude + 1e-30;
      worst = std::max(worst, std::abs(static_cast<double>(Y(r, o)) - sum) / bound);
    }
  return worst;
}

}  // namespace

TEST_CASE("bf16_scores gives X K^T of bfloat16 rows read in place, the same bits however the keys are split",
          "[bf16_core]") {
  const auto& kernel = attend::detail::kernels<float>();
  if (kernel.bf16_scores == nullptr) {
    SUCCEED("skipped: this level has no bfloat16 dot products, and a decoding step widens the cache to float");
    return;
  }
  const Index rows = GENERATE(1, 3, 4, 5, 8);
  const Index d = GENERATE(1, 7, 8, 9, 64, 100, 128, 600);
  const Index n = GENERATE(1, 7, 8, 9, 37, 128);
  CAPTURE(rows, d, n);
  const Index ldx = d + 3, ldk = d + 5, ldy = n + 2, extra = 20;        // strides, and keys past the n scored
  const Matrix<bfloat16> X = random_bf16_matrix(rows, ldx, 1);          // (rows, ldx): the queries, d used
  const Matrix<bfloat16> K = random_bf16_matrix(n + extra, ldk, 2);     // (n + extra, ldk): the keys, d used
  Matrix<float> Y = Matrix<float>::Constant(rows, ldy, 7.0f);          // (rows, ldy)
  kernel.bf16_scores(X.data(), ldx, rows, d, K.data(), ldk, n, n + extra, Y.data(), ldy);
  CHECK(worst_scores_ratio(X, K, d, n, Y, nullptr) <= 1.0);
  CHECK((Y.rightCols(2).array() == 7.0f).all());
  // The first `split` keys in one call and the rest in another (available: only the keys that exist from there on).
  const Index split = n / 2;
  Matrix<float> Z = Matrix<float>::Constant(rows, ldy, 7.0f);  // (rows, ldy)
  kernel.bf16_scores(X.data(), ldx, rows, d, K.data(), ldk, split, split, Z.data(), ldy);
  kernel.bf16_scores(X.data(), ldx, rows, d, K.data() + split * ldk, ldk, n - split, n - split, Z.data() + split, ldy);
  CHECK(attend_test::same_bits(Y, Z));
}

TEST_CASE("bf16_weighted_values adds P V with bfloat16 values read in place, the same bits however the keys are split",
          "[bf16_core]") {
  const auto& kernel = attend::detail::kernels<float>();
  if (kernel.bf16_weighted_values == nullptr) {
    SUCCEED("skipped: this level has no bfloat16 dot products, and a decoding step widens the cache to float");
    return;
  }
  const Index rows = GENERATE(1, 4, 5, 8, 9, 17);
  const Index columns = GENERATE(1, 15, 16, 33, 64, 100, 128);
  const Index n = GENERATE(1, 7, 37, 128);
  CAPTURE(rows, columns, n);
  const Index ldp = n + 1, ldv = columns + 3, ldy = columns + 2;
  attend::Generator generator(3);
  const Matrix<float> P = uniform_matrix(rows, ldp, 0.0f, 1.0f, generator);    // (rows, ldp): the weights, n used
  const Matrix<bfloat16> V = random_bf16_matrix(n, ldv, 4);                     // (n, ldv): the values, `columns` used
  const Matrix<float> Y0 = uniform_matrix(rows, ldy, -1.0f, 1.0f, generator);  // (rows, ldy): what the sum adds to
  Matrix<float> Y = Y0;
  kernel.bf16_weighted_values(P.data(), ldp, rows, n, V.data(), ldv, columns, Y.data(), ldy);
  // The definition, and the bound of a float chain of n multiply-adds: (n + 1) 2^-24 of the magnitudes it adds.
  double worst = 0;
  for (Index r = 0; r < rows; ++r)
    for (Index c = 0; c < columns; ++c) {
      double sum = Y0(r, c), magnitude = std::abs(Y0(r, c));
      for (Index j = 0; j < n; ++j) {
        sum += static_cast<double>(P(r, j)) * value(V(j, c));
        magnitude += std::abs(static_cast<double>(P(r, j)) * value(V(j, c)));
      }
      const double bound = static_cast<double>(n + 1) * unit * magnitude + 1e-30;
      worst = std::max(worst, std::abs(static_cast<double>(Y(r, c)) - sum) / bound);
    }
  CHECK(worst <= 1.0);
  CHECK(attend_test::same_bits(Matrix<float>(Y.rightCols(2)), Matrix<float>(Y0.rightCols(2))));
  // The first `split` keys in one call, the rest in another.
  const Index split = n / 2;
  Matrix<float> Z = Y0;
  kernel.bf16_weighted_values(P.data(), ldp, rows, split, V.data(), ldv, columns, Z.data(), ldy);
  kernel.bf16_weighted_values(P.data() + split, ldp, rows, n - split, V.data() + split * ldv, ldv, columns, Z.data(),
                              ldy);
  CHECK(attend_test::same_bits(Y, Z));
}

TEST_CASE("bf16_packed_scores gives X K^T from a block of keys packed into pairs, stored or added", "[bf16_core]") {
  const auto& kernel = attend::detail::kernels<float>();
  if (kernel.bf16_packed_scores == nullptr) {
    SUCCEED("skipped: this level has no bfloat16 dot products, and attention widens its operands to float");
    return;
  }
  const Index rows = GENERATE(1, 5, 6, 7, 13);
  const Index d = GENERATE(1, 2, 7, 31, 32, 33, 64, 128);
  const Index n = GENERATE(1, 15, 16, 17, 128);
  const bool added = GENERATE(false, true);
  CAPTURE(rows, d, n, added);
  const Index ldx = d + 3, ldk = d + 5, ldy = n + 2;
  const Matrix<bfloat16> X = random_bf16_matrix(rows, ldx, 5);  // (rows, ldx): the queries, d used
  const Matrix<bfloat16> K = random_bf16_matrix(n, ldk, 6);     // (n, ldk): the keys, d used
  std::vector<std::uint32_t> pairs(static_cast<std::size_t>((n + 15) / 16 * 16 * ((d + 1) / 2)));
  kernel.bf16_pack_keys(K.data(), ldk, n, d, pairs.data());
  attend::Generator generator(7);
  const Matrix<float> Y0 = uniform_matrix(rows, ldy, -1.0f, 1.0f, generator);  // what an added product adds to
  Matrix<float> Y = Y0;                                                          // (rows, ldy)
  kernel.bf16_packed_scores(X.data(), ldx, rows, d, pairs.data(), n,
                            added ? attend::detail::y_added(Y.data(), ldy) : attend::detail::y_into(Y.data(), ldy));
  CHECK(worst_scores_ratio(X, K, d, n, Y, added ? &Y0 : nullptr) <= 1.0);
  CHECK(attend_test::same_bits(Matrix<float>(Y.rightCols(2)), Matrix<float>(Y0.rightCols(2))));
}

TEST_CASE("bf16_rounded_weights_times_values adds round(P) V from a block of values packed into pairs",
          "[bf16_core]") {
  const auto& kernel = attend::detail::kernels<float>();
  if (kernel.bf16_rounded_weights_times_values == nullptr) {
    SUCCEED("skipped: this level has no bfloat16 dot products, and attention widens its operands to float");
    return;
  }
  const Index rows = GENERATE(1, 5, 6, 7, 13);
  const Index n = GENERATE(1, 2, 15, 33, 128);  // keys: the depth of the product, odd or even
  const Index dv = GENERATE(1, 15, 16, 17, 64, 100);
  CAPTURE(rows, n, dv);
  const Index ldv = dv + 3, ldy = dv + 2;
  attend::Generator generator(8);
  Matrix<float> P = uniform_matrix(rows, n, 0.0f, 1.0f, generator);  // (rows, n), rows n apart: the weights
  const Matrix<float> weights = P;
  const Matrix<bfloat16> V = random_bf16_matrix(n, ldv, 9);  // (n, ldv): the values, dv used
  std::vector<std::uint32_t> pairs(static_cast<std::size_t>((dv + 15) / 16 * 16 * ((n + 1) / 2)));
  kernel.bf16_pack_values(V.data(), ldv, n, dv, pairs.data());
  const Matrix<float> Y0 = uniform_matrix(rows, ldy, -1.0f, 1.0f, generator);  // (rows, ldy): what the product adds to
  Matrix<float> Y = Y0;
  kernel.bf16_rounded_weights_times_values(P.data(), rows, n, pairs.data(), dv, attend::detail::y_added(Y.data(), ldy));
  // Each weight rounded to bfloat16 (to nearest even, as bfloat16(float) rounds), in place: row i as n bfloat16 from
  // (bfloat16*) P + 2 i n.
  const auto* rounded = reinterpret_cast<const bfloat16*>(P.data());
  bool in_place = true;
  for (Index r = 0; r < rows; ++r)
    for (Index j = 0; j < n; ++j)
      in_place = in_place && same_bf16(rounded[2 * r * n + j], bfloat16(weights(r, j)));
  CHECK(in_place);
  // The definition on the rounded weights, and the bound of a float sum of n exact products added to Y.
  double worst = 0;
  for (Index r = 0; r < rows; ++r)
    for (Index c = 0; c < dv; ++c) {
      double sum = 0, magnitude = 0;
      for (Index j = 0; j < n; ++j) {
        const double product = value(bfloat16(weights(r, j))) * value(V(j, c));
        sum += product;
        magnitude += std::abs(product);
      }
      const double expected = Y0(r, c) + sum;
      const double bound = static_cast<double>(n + 2) * unit * (magnitude + std::abs(Y0(r, c))) + 1e-30;
      worst = std::max(worst, std::abs(static_cast<double>(Y(r, c)) - expected) / bound);
    }
  CHECK(worst <= 1.0);
  CHECK(attend_test::same_bits(Matrix<float>(Y.rightCols(2)), Matrix<float>(Y0.rightCols(2))));
}

TEST_CASE("The products on bfloat16 storage exist for floats on avx512_bf16 only", "[bf16_core]") {
  using attend::Isa;
  using attend::detail::kernels_for;
#ifdef ATTEND_X86_DISPATCH
  CHECK(kernels_for<float>(Isa::avx512_bf16).bf16_scores != nullptr);
  CHECK(kernels_for<float>(Isa::avx512_bf16).bf16_weighted_values != nullptr);
  CHECK(kernels_for<float>(Isa::avx512_bf16).bf16_pack_keys != nullptr);
  CHECK(kernels_for<float>(Isa::avx512_bf16).bf16_pack_values != nullptr);
  CHECK(kernels_for<float>(Isa::avx512_bf16).bf16_packed_scores != nullptr);
  CHECK(kernels_for<float>(Isa::avx512_bf16).bf16_rounded_weights_times_values != nullptr);
  CHECK(kernels_for<double>(Isa::avx512_bf16).bf16_packed_scores == nullptr);
  CHECK(kernels_for<float>(Isa::avx512).bf16_packed_scores == nullptr);
  CHECK(kernels_for<double>(Isa::avx512_bf16).bf16_scores == nullptr);
  CHECK(kernels_for<float>(Isa::avx512).bf16_scores == nullptr);
  CHECK(kernels_for<float>(Isa::avx512).bf16_weighted_values == nullptr);
  CHECK(kernels_for<float>(Isa::avx2).bf16_scores == nullptr);
  // avx512_bf16's float kernels are avx512's
  CHECK(kernels_for<float>(Isa::avx512_bf16).isa == Isa::avx512);
  CHECK(kernels_for<float>(Isa::avx512_bf16).few_rows_scores == kernels_for<float>(Isa::avx512).few_rows_scores);
#endif
  CHECK(kernels_for<float>(Isa::generic).bf16_scores == nullptr);
  CHECK(kernels_for<float>(Isa::generic).bf16_weighted_values == nullptr);
}
