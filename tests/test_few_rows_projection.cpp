// Projections of at most 8 rows (detail/avx512/few_rows_projection.hpp, through detail/project_rows.hpp): X W^T + b
// against the definition over the kernel's block shapes (rows 1-8 in one or two packets, inputs around its groups of 4
// steps, outputs around its blocks of 8 and groups of 4); several projections of one X in a call; infinities and NaNs
// where the definition puts them, nothing written past the outputs; the same kernel as a decoding step's scores
// (few_rows_scores: strided rows of queries and keys, blocks split anywhere give the same bits); and the path itself:
// taken for floats on the avx512 level, never elsewhere. The suite runs once per level (ATTEND_ISA), so these check
// every level's projections of few rows.
#include <algorithm>
#include <attend/detail/kernels.hpp>
#include <attend/detail/project_rows.hpp>
#include <attend/random.hpp>
#include <attend/threads.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <support/affine.hpp>
#include <support/checks.hpp>
#include <support/matchers.hpp>
#include <vector>

using attend::Index;
using attend::Matrix;
using attend::Vector;
using attend::detail::TransposedWeight;

namespace {

using attend_test::affine_by_definition;
using attend_test::random_matrix;

// |Y - definition| per element, over the tolerance that attend_test::Near would allow a result as large as the sum of
// the magnitudes |X[r, k] W[o, k]| and |b[o]|: a sum of in products loses accuracy to cancellation against those
// magnitudes, not against the result. The largest ratio over Y (rows, out); a match is at most 1.
template <class Scalar>
double worst_error_ratio(const Matrix<Scalar>& Y, const Matrix<Scalar>& X, const Matrix<Scalar>& W,
                         const Vector<Scalar>& bias) {
  const attend_test::Tolerance<Scalar> tol = attend_test::tolerance<Scalar>();
  const Matrix<double> expected = affine_by_definition(X, W, bias);  // (rows, out)
  double worst = 0;
  for (Index r = 0; r < X.rows(); ++r)
    for (Index o = 0; o < W.rows(); ++o) {
      double magnitude = bias.size() > 0 ? std::abs(static_cast<double>(bias[o])) : 0.0;
      for (Index k = 0; k < X.cols(); ++k) magnitude += std::abs(static_cast<double>(X(r, k)) * W(o, k));
      const double error = std::abs(static_cast<double>(Y(r, o)) - expected(r, o));
      worst = std::max(worst, error / (tol.abs + tol.rel * magnitude));
    }
  return worst;
}

// Y (rows, out) = X W^T + b by project_rows, into rows `stride` apart that start as 7; kept: the W^T it may keep.
template <class Scalar>
Matrix<Scalar> projected(const Matrix<Scalar>& X, const Matrix<Scalar>& W, const Vector<Scalar>& b, Index stride,
                         TransposedWeight<Scalar>& kept) {
  Matrix<Scalar> Y = Matrix<Scalar>::Constant(X.rows(), stride, Scalar(7));  // (rows, stride)
  attend::detail::Projection<Scalar> p = attend::detail::projection(W, b, Y.data(), &kept);
  p.y_stride = stride;
  attend::detail::project_rows<Scalar>(X, {p});
  return Y;
}

}  // namespace

TEMPLATE_TEST_CASE("project_rows on at most 8 rows gives X W^T + b, and writes nothing past the outputs",
                   "[few_rows_projection]", float, double) {
  // rows: one packet of 4 rows or two; in: around the groups of 4 steps, the seed's 100, around the width whose copy
  // of X fits on the stack, few_rows_max_in; out: around the blocks of 8 outputs and the groups of 4.
  const Index rows = GENERATE(1, 3, 4, 5, 8);
  const Index in = GENERATE(1, 2, 3, 4, 5, 7, 8, 100, attend::detail::tuning::few_rows_stack_in,
                            attend::detail::tuning::few_rows_stack_in + 1, attend::detail::tuning::few_rows_max_in);
  const Index out = GENERATE(1, 3, 4, 5, 8, 9, 13, 100);
  const bool bias = GENERATE(true, false);
  CAPTURE(rows, in, out, bias);
  const Matrix<TestType> X = random_matrix<TestType>(rows, in, 1);  // (rows, in)
  const Matrix<TestType> W = random_matrix<TestType>(out, in, 2);   // (out, in)
  const Vector<TestType> b = bias ? Vector<TestType>(random_matrix<TestType>(out, 1, 3)) : Vector<TestType>();
  TransposedWeight<TestType> kept;
  const Matrix<TestType> Y = projected(X, W, b, out + 3, kept);  // (rows, out + 3)
  REQUIRE(worst_error_ratio<TestType>(Y.leftCols(out), X, W, b) <= 1.0);
  REQUIRE((Y.rightCols(3).array() == TestType(7)).all());
}

TEMPLATE_TEST_CASE("project_rows on at most 8 rows: several projections of one X in a call, each its own X W^T + b",
                   "[few_rows_projection]", float, double) {
  // Q, K and V of self-attention share X's copy; here four projections in one call. Widths differ, each Y has its
  // own stride, one projection has no bias; each is the projection alone, bit for bit, and within the definition.
  const Index rows = GENERATE(3, 8), in = 37;
  CAPTURE(rows);
  const Matrix<TestType> X = random_matrix<TestType>(rows, in, 9);  // (rows, in)
  const Index outs[4] = {5, 16, 9, 21};
  std::vector<Matrix<TestType>> W, Y, alone;
  std::vector<Vector<TestType>> b;
  for (int i = 0; i < 4; ++i) {
    W.push_back(random_matrix<TestType>(outs[i], in, 10 + i));  // (out_i, in)
    b.push_back(i == 2 ? Vector<TestType>() : Vector<TestType>(random_matrix<TestType>(outs[i], 1, 20 + i)));
    Y.push_back(Matrix<TestType>::Constant(rows, outs[i] + i, TestType(7)));  // (rows, out_i + i)
    TransposedWeight<TestType> kept;
    alone.push_back(projected(X, W[i], b[i], outs[i] + i, kept));
  }
  std::vector<attend::detail::Projection<TestType>> p;
  for (int i = 0; i < 4; ++i) {
    p.push_back(attend::detail::projection(W[i], b[i], Y[i].data()));
    p.back().y_stride = outs[i] + i;
  }
  attend::detail::project_rows<TestType>(X, {p[0], p[1], p[2], p[3]});
  for (int i = 0; i < 4; ++i) {
    CAPTURE(i);
    REQUIRE(Y[i] == alone[i]);
    REQUIRE(worst_error_ratio<TestType>(Y[i].leftCols(outs[i]), X, W[i], b[i]) <= 1.0);
    REQUIRE((Y[i].rightCols(i).array() == TestType(7)).all());
  }
}

TEMPLATE_TEST_CASE("project_rows on at most 8 rows: infinities and NaNs reach only the outputs they are in",
                   "[few_rows_projection]", float, double) {
  // in = 6: the last group of steps has 2 of 4, the rest read as 0; W's last entry of a row is infinite, where a
  // 0 * inf from the missing entries would make NaN.
  const Index rows = 6, in = 6, out = 11;
  const TestType inf = std::numeric_limits<TestType>::infinity();
  Matrix<TestType> X = random_matrix<TestType>(rows, in, 4).cwiseAbs();  // (rows, in), positive
  Matrix<TestType> W = random_matrix<TestType>(out, in, 5);              // (out, in)
  W(2, in - 1) = inf;
  W(10, in - 1) = -inf;
  X(4, 1) = std::numeric_limits<TestType>::quiet_NaN();
  const Vector<TestType> none;
  TransposedWeight<TestType> kept;
  const Matrix<TestType> Y = projected(X, W, none, out, kept);  // (rows, out)
  const Matrix<double> expected = affine_by_definition(X, W, none);
  for (Index r = 0; r < rows; ++r)
    for (Index o = 0; o < out; ++o) {
      CAPTURE(r, o);
      if (r == 4) {
        REQUIRE(std::isnan(Y(r, o)));
      } else if (o == 2 || o == 10) {
        REQUIRE(Y(r, o) == (o == 2 ? inf : -inf));
      } else {
        REQUIRE(std::isfinite(Y(r, o)));
        REQUIRE(Y(r, o) == Approx(expected(r, o)).epsilon(1e-5));
      }
    }
}

TEMPLATE_TEST_CASE("project_rows on at most 8 rows reads W as it is: no W^T kept, a changed W seen",
                   "[few_rows_projection]", float, double) {
  const Index in = 100, out = 100;
  Matrix<TestType> W = random_matrix<TestType>(out, in, 6);  // (out, in)
  const Vector<TestType> b = random_matrix<TestType>(out, 1, 7);
  const Index rows = GENERATE(8, 9);
  CAPTURE(rows);
  const Matrix<TestType> X = random_matrix<TestType>(rows, in, 8);  // (rows, in)
  TransposedWeight<TestType> kept;
  const Matrix<TestType> first = projected(X, W, b, out, kept);
  const bool few = attend::detail::kernels<TestType>().few_rows_projection != nullptr &&
                   rows <= attend::detail::tuning::few_rows;
  // The kept W^T is made only by the other path: floats on the avx512 level, 8 rows, leave it empty.
  REQUIRE((kept.transposed().size() == 0) == few);
  W(99, 99) += TestType(1);
  const Matrix<TestType> second = projected(X, W, b, out, kept);
  REQUIRE_THAT(second, attend_test::Near(affine_by_definition(X, W, b), attend_test::tolerance<TestType>()));
  REQUIRE(second.leftCols(99) == first.leftCols(99));
  REQUIRE((second.col(99).array() != first.col(99).array()).all());
}

TEMPLATE_TEST_CASE("project_rows on a few rows gives the same bits on 1 and 2 threads",
                   "[few_rows_projection][threads]", float, double) {
  // Wide enough that its pieces of outputs are shared among the threads.
  const Index rows = GENERATE(1, 4), in = 1536, out = 1000;
  CAPTURE(rows);
  const Matrix<TestType> X = random_matrix<TestType>(rows, in, 11);  // (rows, in)
  const Matrix<TestType> W = random_matrix<TestType>(out, in, 12);   // (out, in)
  const Vector<TestType> b = random_matrix<TestType>(out, 1, 13);
  TransposedWeight<TestType> kept;
  const int threads = attend::num_threads();
  attend::set_num_threads(1);
  const Matrix<TestType> one = projected(X, W, b, out, kept);
  attend::set_num_threads(2);
  const Matrix<TestType> two = projected(X, W, b, out, kept);
  attend::set_num_threads(threads);
  REQUIRE(worst_error_ratio<TestType>(one, X, W, b) <= 1.0);
  REQUIRE(attend_test::same_bits(one, two));
}

TEST_CASE("few_rows_scores gives X K^T on strided rows, the same bits however the keys are split into calls",
          "[few_rows_projection]") {
  const auto& kernel = attend::detail::kernels<float>();
  if (kernel.few_rows_scores == nullptr) {
    SUCCEED("this level has no few-rows scores: the core transposes the keys instead");
    return;
  }
  // rows: one packet of 4 rows or two; d: around the groups of 4 steps and the usual head widths; n: around the
  // blocks of 8 keys and core_key_rows.
  const Index rows = GENERATE(1, 3, 4, 5, 8);
  const Index d = GENERATE(1, 5, 64, 100, 128);
  const Index n = GENERATE(1, 7, 8, 9, 37, 128);
  CAPTURE(rows, d, n);
  const Index ldx = d + 3, ldk = d + 5, ldy = n + 2, extra = 20;    // strides, and keys past the n scored
  const Matrix<float> X = random_matrix<float>(rows, ldx, 1);       // (rows, ldx), row-major: the queries, d used
  const Matrix<float> K = random_matrix<float>(n + extra, ldk, 2);  // (n + extra, ldk): the keys, d used
  Matrix<float> Y = Matrix<float>::Constant(rows, ldy, 7.0f);       // (rows, ldy)
  kernel.few_rows_scores(X.data(), ldx, rows, d, K.data(), ldk, n, n + extra, Y.data(), ldy);
  const Matrix<float> Xd = X.leftCols(d), Kd = K.topRows(n).leftCols(d);
  REQUIRE(worst_error_ratio<float>(Y.leftCols(n), Xd, Kd, Vector<float>()) <= 1.0);
  REQUIRE((Y.rightCols(2).array() == 7.0f).all());
  // The first `split` keys in one call and the rest in another (available: only the keys that exist from there on).
  const Index split = n / 2;
  Matrix<float> Z = Matrix<float>::Constant(rows, ldy, 7.0f);  // (rows, ldy)
  kernel.few_rows_scores(X.data(), ldx, rows, d, K.data(), ldk, split, split, Z.data(), ldy);
  kernel.few_rows_scores(X.data(), ldx, rows, d, K.data() + split * ldk, ldk, n - split, n - split, Z.data() + split,
                         ldy);
  REQUIRE(attend_test::same_bits(Y, Z));
}

TEST_CASE("The few-rows path exists exactly for floats on the avx512 level", "[few_rows_projection]") {
  using attend::Isa;
  using attend::detail::kernels_for;
#ifdef ATTEND_X86_DISPATCH
  REQUIRE(kernels_for<float>(Isa::avx512).few_rows_projection != nullptr);
  REQUIRE(kernels_for<float>(Isa::avx2).few_rows_projection == nullptr);
  REQUIRE(kernels_for<double>(Isa::avx512).few_rows_projection == nullptr);
  REQUIRE(kernels_for<float>(Isa::avx512).few_rows_scores != nullptr);
  REQUIRE(kernels_for<float>(Isa::avx2).few_rows_scores == nullptr);
  REQUIRE(kernels_for<double>(Isa::avx512).few_rows_scores == nullptr);
#endif
  REQUIRE(kernels_for<float>(Isa::generic).few_rows_projection == nullptr);
  REQUIRE(kernels_for<double>(Isa::generic).few_rows_projection == nullptr);
  REQUIRE(kernels_for<float>(Isa::generic).few_rows_scores == nullptr);
}
