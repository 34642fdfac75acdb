// The kept transposed weight (detail/transposed_weight.hpp): Y = X W^T + b from W^T kept between calls, against the
// definition; the same bits whatever the number of rows per call; never stale when W changes between calls, through
// MultiHeadAttention's workspace too. And the kernels under it (times_matrix and packed_times_matrix, their operands
// from detail/operands.hpp) in their accumulating mode and over no inner dimension, with X given transposed, with B
// read in place in any layout and with B packed once by its caller (the tiled kernel's K^T and V blocks, in
// packet-aligned buffers), and the blocked transpose (detail/transpose.hpp).
#include <algorithm>
#include <attend/detail/operands.hpp>
#include <attend/detail/packet_buffer.hpp>
#include <attend/detail/products.hpp>
#include <attend/detail/project_rows.hpp>
#include <attend/detail/transpose.hpp>
#include <attend/detail/transposed_weight.hpp>
#include <attend/isa.hpp>
#include <attend/multi_head_attention.hpp>
#include <attend/random.hpp>
#include <catch2/catch.hpp>
#include <cstdint>
#include <support/affine.hpp>
#include <support/matchers.hpp>
#include <support/random_tensor.hpp>
#include <utility>

#ifdef _OPENMP
#include <omp.h>
#endif

using attend::Index;
using attend::Matrix;
using attend::Tensor3;
using attend::Vector;
using attend::detail::b_columns;
using attend::detail::b_packed;
using attend::detail::b_padded_rows;
using attend::detail::b_rows;
using attend::detail::b_strided;
using attend::detail::kernels;
using attend::detail::TransposedWeight;
using attend::detail::x_columns;
using attend::detail::x_rows;
using attend::detail::y_added;
using attend::detail::y_into;

namespace {

using attend_test::affine_by_definition;
using attend_test::random_matrix;

// Y (rows, out) from the kept W^T, refreshed first.
template <class Scalar>
Matrix<Scalar> times_kept(const Matrix<Scalar>& X, const Matrix<Scalar>& W, const Vector<Scalar>& bias,
                          TransposedWeight<Scalar>& kept) {
  kept.refresh(W.data(), W.rows(), W.cols());
  Matrix<Scalar> Y(X.rows(), W.rows());  // (rows, out)
  attend::detail::times_transposed(X.data(), X.cols(), X.rows(), X.cols(), kept, W.rows(),
                                   bias.size() > 0 ? bias.data() : nullptr, Y.data(), Y.cols());
  return Y;
}

// The tolerance of a sum of `in` rounded products, each factor within [-1, 1]: abs grows with in.
template <class Scalar>
attend_test::Tolerance<Scalar> tolerance_of_sums(Index in) {
  return {attend_test::tolerance<Scalar>().rel, attend_test::tolerance<Scalar>().abs * static_cast<double>(in)};
}

}  // namespace

TEMPLATE_TEST_CASE("A kept W^T gives X W^T + b", "[transposed_weight]", float, double) {
  // Widths around the packet sizes (4, 8 and 16 lanes) and the seed's 100; rows around the block of 4.
  const Index rows = GENERATE(1, 3, 4, 5, 8, 13);
  const Index out = GENERATE(1, 7, 16, 17, 33, 100);
  const Index in = GENERATE(1, 5, 100);
  const bool bias = GENERATE(true, false);
  CAPTURE(rows, out, in, bias);
  const Matrix<TestType> X = random_matrix<TestType>(rows, in, 1);  // (rows, in)
  const Matrix<TestType> W = random_matrix<TestType>(out, in, 2);   // (out, in)
  const Vector<TestType> b = bias ? Vector<TestType>(random_matrix<TestType>(out, 1, 3)) : Vector<TestType>();
  TransposedWeight<TestType> kept;
  REQUIRE_THAT(times_kept(X, W, b, kept),
               attend_test::Near(affine_by_definition(X, W, b), attend_test::tolerance<TestType>()));
  // Padded to whole packets, zero past W's rows.
  constexpr Index lanes = TransposedWeight<TestType>::packet_size;
  REQUIRE(kept.transposed().rows() == in);
  REQUIRE(kept.transposed().cols() % lanes == 0);
  REQUIRE(kept.transposed().cols() - out < lanes);
  REQUIRE(kept.transposed().rightCols(kept.transposed().cols() - out).isZero(0));
}

TEMPLATE_TEST_CASE("A row's result does not depend on the rows computed with it", "[transposed_weight]", float,
                   double) {
  // out = 13: one block of 8 rows (at most 2 packets of columns), then 3 single rows; out = 45: 4, 4, then 3.
  const Index out = GENERATE(13, 45);
  CAPTURE(out);
  const Matrix<TestType> X = random_matrix<TestType>(11, 37, 4);   // (11, 37)
  const Matrix<TestType> W = random_matrix<TestType>(out, 37, 5);  // (out, 37)
  const Vector<TestType> b = random_matrix<TestType>(out, 1, 6);   // (out)
  TransposedWeight<TestType> kept;
  const Matrix<TestType> all = times_kept(X, W, b, kept);  // (11, out)
  for (Index r = 0; r < X.rows(); ++r) {
    CAPTURE(r);
    const Matrix<TestType> one = times_kept<TestType>(X.row(r), W, b, kept);  // a single row
    REQUIRE(one == all.row(r));
  }
}

TEMPLATE_TEST_CASE("A kept W^T is rebuilt when W changes, never stale", "[transposed_weight]", float, double) {
  const Matrix<TestType> X = random_matrix<TestType>(5, 20, 7);  // (5, 20)
  Matrix<TestType> W = random_matrix<TestType>(30, 20, 8);       // (30, 20)
  const Vector<TestType> none;
  TransposedWeight<TestType> kept;
  const Matrix<TestType> before = times_kept(X, W, none, kept);
  SECTION("one entry changes in place") {
    W(29, 19) += TestType(1);
  }
  SECTION("the sign of a zero flips (same value, other bits)") {
    W(0, 0) = TestType(0);
    times_kept(X, W, none, kept);
    W(0, 0) = -TestType(0);
  }
  SECTION("W is replaced by one of another shape") {
    W = random_matrix<TestType>(17, 20, 9);
  }
  TransposedWeight<TestType> fresh;
  const Matrix<TestType> after = times_kept(X, W, none, kept);
  REQUIRE(after == times_kept(X, W, none, fresh));
  REQUIRE_THAT(after, attend_test::Near(affine_by_definition(X, W, none), attend_test::tolerance<TestType>()));
  if (after.cols() == before.cols()) REQUIRE(after != before);
}

TEMPLATE_TEST_CASE("A W^T made for one call (transpose_only) is never taken for a kept one", "[transposed_weight]",
                   float, double) {
  // refresh(W1), then transpose_only(W2) over the same object, then refresh(W1) again: the last must give W1^T, not
  // the W2^T left by transpose_only (W1 is still the W the object last kept).
  const Matrix<TestType> X = random_matrix<TestType>(5, 20, 17);   // (5, 20)
  const Matrix<TestType> W1 = random_matrix<TestType>(30, 20, 18);  // (30, 20)
  const Matrix<TestType> W2 = random_matrix<TestType>(30, 20, 19);  // (30, 20)
  const Vector<TestType> none;
  TransposedWeight<TestType> weight, fresh;
  weight.refresh(W1.data(), W1.rows(), W1.cols());
  weight.transpose_only(W2.data(), W2.rows(), W2.cols());
  Matrix<TestType> Y(X.rows(), W2.rows());  // (5, 30)
  attend::detail::times_transposed(X.data(), X.cols(), X.rows(), X.cols(), weight, W2.rows(),
                                   static_cast<const TestType*>(nullptr), Y.data(), Y.cols());
  REQUIRE(Y == times_kept(X, W2, none, fresh));
  REQUIRE(times_kept(X, W1, none, weight) == times_kept(X, W1, none, fresh));
}

TEMPLATE_TEST_CASE("project_rows: a kept W^T gives the bits of a W^T made for the call", "[transposed_weight]", float,
                   double) {
  // 300 rows: two chunks of project_rows (256 + 44); 9: just past the rows that may take
  // detail/avx512/few_rows_projection.hpp instead. Both run the row kernel over the same W^T: the same bits.
  const Index rows = GENERATE(9, 300);
  CAPTURE(rows);
  const Matrix<TestType> X = random_matrix<TestType>(rows, 64, 10);  // (rows, 64)
  const Matrix<TestType> W = random_matrix<TestType>(48, 64, 11);    // (48, 64)
  const Vector<TestType> b = random_matrix<TestType>(48, 1, 12);
  Matrix<TestType> by_call(rows, 48), by_kept(rows, 48);  // (rows, 48)
  TransposedWeight<TestType> kept;
  attend::detail::project_rows<TestType>(X, {attend::detail::projection(W, b, by_call.data())});
  attend::detail::project_rows<TestType>(X, {attend::detail::projection(W, b, by_kept.data(), &kept)});
  REQUIRE(by_kept == by_call);
  REQUIRE_THAT(by_kept, attend_test::Near(affine_by_definition(X, W, b), attend_test::tolerance<TestType>()));
}

TEMPLATE_TEST_CASE("project_rows: a kept W^T is packed anew when the level changes between calls",
                   "[transposed_weight]", float, double) {
  // The kept copy is packed in the micro-panels of the level that ran: a later call on another level (set_isa) must
  // not read that layout. Each level's result from the kept copy is its result from a fresh one, bit for bit.
  const attend::Isa original = attend::active_isa();
  const Matrix<TestType> X = random_matrix<TestType>(300, 70, 14);  // (300, 70): past the few-rows kernel's rows
  const Matrix<TestType> W = random_matrix<TestType>(90, 70, 15);   // (90, 70)
  const Vector<TestType> b = random_matrix<TestType>(90, 1, 16);
  TransposedWeight<TestType> kept;
  for (int pass = 0; pass < 2; ++pass) {
    for (const attend::Isa isa : attend::available_isas()) {
      CAPTURE(pass, attend::isa_name(isa));
      attend::set_isa(isa);
      Matrix<TestType> by_kept(300, 90), by_fresh(300, 90);  // (300, 90)
      TransposedWeight<TestType> fresh;
      attend::detail::project_rows<TestType>(X, {attend::detail::projection(W, b, by_kept.data(), &kept)});
      attend::detail::project_rows<TestType>(X, {attend::detail::projection(W, b, by_fresh.data(), &fresh)});
      CHECK(by_kept == by_fresh);
      CHECK_THAT(by_kept, attend_test::Near(affine_by_definition(X, W, b), attend_test::tolerance<TestType>()));
    }
  }
  attend::set_isa(original);
}

TEMPLATE_TEST_CASE("MultiHeadAttention sees a weight changed through a reference kept across calls",
                   "[transposed_weight]", float, double) {
  attend::Generator generator(13);
  attend::MultiHeadAttention<TestType> attention(100, 100, 100, 100, 5, TestType(0), false, generator);
  attention.eval();
  // The seed's shape (floats on the avx512 level then keep no W^T: detail/avx512/few_rows_projection.hpp), and 10 rows, which do.
  const Index steps = GENERATE(4, 5);
  CAPTURE(steps);
  const Tensor3<TestType> X = attend_test::random_tensor<TestType>(2, steps, 100, 14);
  Matrix<TestType>& W_k = attention.W_k().weight();  // held across the calls
  Matrix<TestType>& W_o = attention.W_o().weight();
  const Tensor3<TestType> first = attention(X, X, X);
  W_k(3, 7) *= TestType(-2);
  W_o(99, 0) += TestType(0.5);
  const Tensor3<TestType> second = attention(X, X, X);
  // A module with the changed weights that never ran before: no kept copy at all.
  attend::MultiHeadAttention<TestType> fresh = attention;
  fresh.load_state_dict(attention.state_dict());
  attend::AttentionWorkspace<TestType> new_workspace;
  const Tensor3<TestType> expected = fresh.forward(X, X, X, {}, new_workspace);
  const auto same = [](const Tensor3<TestType>& a, const Tensor3<TestType>& b) {
    return attend::detail::as_matrix(a) == attend::detail::as_matrix(b);
  };
  REQUIRE_FALSE(same(first, second));
  REQUIRE(same(second, expected));
}

TEMPLATE_TEST_CASE("times_matrix gives X B + bias, or adds X B to Y, with B padded or not", "[transposed_weight]",
                   float, double) {
  // rows around the blocks of rows (4, 8 with 16 vector registers; 4, 6, 12 with 32), out around the packet widths
  // (4, 8 and 16 lanes) and past the blocks of 4 packets.
  const Index rows = GENERATE(1, 4, 6, 7, 8, 12, 13, 19, 25, 31);
  const Index out = GENERATE(3, 16, 21, 32, 33, 64, 100);
  const bool accumulate = GENERATE(true, false);
  const bool padded = GENERATE(true, false);  // false: B's rows end at out, so the kernel must not read past it
  CAPTURE(rows, out, accumulate, padded);
  constexpr Index lanes = attend::detail::row_packet_size<TestType>;
  const Index in = 9, width = padded ? (out + lanes - 1) / lanes * lanes : out;
  const Matrix<TestType> X = random_matrix<TestType>(rows, in, 15);   // (rows, in)
  const Matrix<TestType> B = random_matrix<TestType>(in, width, 16);  // (in, width): columns past out never used
  const Matrix<TestType> Y0 = random_matrix<TestType>(rows, out, 17);  // (rows, out)
  const Vector<TestType> bias = random_matrix<TestType>(1, out, 18).transpose();  // (out)
  Matrix<TestType> Y = Y0;                                                      // (rows, out)
  if (accumulate) {
    kernels<TestType>().times_matrix(x_rows(X.data(), in, rows), in, {B.data(), width, 1, padded}, out,
                                     y_added(Y.data(), out));
  } else {
    kernels<TestType>().times_matrix(x_rows(X.data(), in, rows), in, {B.data(), width, 1, padded}, out,
                                     y_into(Y.data(), out, bias.data()));
  }
  Matrix<double> expected(rows, out);  // (rows, out): Y0 + X B, or X B + bias, by definition
  for (Index r = 0; r < rows; ++r)
    for (Index o = 0; o < out; ++o) {
      double sum = static_cast<double>(accumulate ? Y0(r, o) : bias(o));
      for (Index k = 0; k < in; ++k) sum += static_cast<double>(X(r, k)) * static_cast<double>(B(k, o));
      expected(r, o) = sum;
    }
  REQUIRE_THAT(Y, attend_test::Near(expected, attend_test::tolerance<TestType>()));
}

TEMPLATE_TEST_CASE("times_matrix over no inner dimension gives the bias, or leaves Y, and reads no operand",
                   "[transposed_weight]", float, double) {
  // in = 0 (a head of width 0 in the tiled kernel): X and B have no entries, and their pointers may be null.
  const Index rows = GENERATE(1, 7, 13);
  const Index out = GENERATE(3, 33, 64);
  CAPTURE(rows, out);
  const Matrix<TestType> Y0 = random_matrix<TestType>(rows, out, 19);             // (rows, out)
  const Vector<TestType> bias = random_matrix<TestType>(1, out, 20).transpose();  // (out)
  for (const bool padded : {true, false}) {
    Matrix<TestType> Y = Y0;  // (rows, out)
    kernels<TestType>().times_matrix(x_rows<TestType>(nullptr, 0, rows), 0, {nullptr, out, 1, padded}, out,
                                     y_added(Y.data(), out));
    REQUIRE(Y == Y0);  // + an empty sum: unchanged
    kernels<TestType>().times_matrix(x_rows<TestType>(nullptr, 0, rows), 0, {nullptr, out, 1, padded}, out,
                                     y_into(Y.data(), out, bias.data()));
    REQUIRE(Y == bias.transpose().replicate(rows, 1));  // an empty sum plus the bias
    kernels<TestType>().times_matrix(x_rows<TestType>(nullptr, 0, rows), 0, {nullptr, out, 1, padded}, out,
                                     y_into(Y.data(), out));
    REQUIRE(Y == Matrix<TestType>::Zero(rows, out));  // an empty sum
  }
}

TEMPLATE_TEST_CASE("times_matrix of X = A^T gives A^T B + bias, or adds it, with the bits of a product on A^T copied",
                   "[transposed_weight]", float, double) {
  // rows of Y around the row blocks and past tuning::packed_product_rows; in (A's rows) past a panel's depth
  // (tuning::product_panel_depth), out around the packets and past a panel's width.
  const Index rows = GENERATE(1, 5, 6, 7, 13, 64, 70);
  const Index in = GENERATE(1, 9, 300);
  const Index out = GENERATE(3, 16, 33, 130);
  const bool accumulate = GENERATE(true, false);
  CAPTURE(rows, in, out, accumulate);
  const Index lda = rows + 3;                                              // A's rows: columns past `rows` unused
  const Matrix<TestType> A = random_matrix<TestType>(in, lda, 22);         // (in, lda)
  const Matrix<TestType> B = random_matrix<TestType>(in, out, 23);         // (in, out), rows ending at out
  const Matrix<TestType> Y0 = random_matrix<TestType>(rows, out, 24);      // (rows, out)
  const Vector<TestType> bias = random_matrix<TestType>(1, out, 25).transpose();  // (out)
  const TestType* b = accumulate ? nullptr : bias.data();
  Matrix<TestType> Y = Y0;  // (rows, out)
  Matrix<TestType> copied = Y0;  // (rows, out): the same through a copy of A^T
  const Matrix<TestType> At = A.leftCols(rows).transpose();  // (rows, in)
  if (accumulate) {
    kernels<TestType>().times_matrix(x_columns(A.data(), lda, rows), in, b_rows(B.data(), out), out,
                                     y_added(Y.data(), out, b));
    kernels<TestType>().times_matrix(x_rows(At.data(), in, rows), in, b_rows(B.data(), out), out,
                                     y_added(copied.data(), out, b));
  } else {
    kernels<TestType>().times_matrix(x_columns(A.data(), lda, rows), in, b_rows(B.data(), out), out,
                                     y_into(Y.data(), out, b));
    kernels<TestType>().times_matrix(x_rows(At.data(), in, rows), in, b_rows(B.data(), out), out,
                                     y_into(copied.data(), out, b));
  }
  // (rows, out): Y0 + A^T B, or A^T B + bias, by definition
  const Matrix<TestType> Bt = B.transpose();  // (out, in)
  const Matrix<double> expected = accumulate ? Matrix<double>(Y0.template cast<double>() +
                                                              affine_by_definition(At, Bt, Vector<TestType>()))
                                             : affine_by_definition(At, Bt, bias);
  REQUIRE_THAT(Y, attend_test::Near(expected, tolerance_of_sums<TestType>(in)));
  REQUIRE(Y == copied);  // bit for bit
}

TEMPLATE_TEST_CASE("times and transposed_times give A B and A^T B in chunks of rows and of columns, the same bits on 1 "
                   "and 2 threads", "[transposed_weight][threads]", float, double) {
  // C's rows within one chunk (tuning::rows_per_chunk) and past it; its columns within one panel of the row kernel
  // (tuning::product_panel_width) and over several; depth past a panel's (tuning::product_panel_depth), and enough
  // work for a team of threads (tuning::worth_a_team).
  const Index m = GENERATE(7, 256, 300);
  const Index n = GENERATE(130, 300);
  const Index k = 1100;
  CAPTURE(m, n);
  const Matrix<TestType> A = random_matrix<TestType>(m, k, 31);    // (m, k)
  const Matrix<TestType> At = random_matrix<TestType>(k, m, 32);   // (k, m): transposed_times' A
  const Matrix<TestType> B = random_matrix<TestType>(k, n, 33);    // (k, n)
  const Matrix<TestType> C0 = random_matrix<TestType>(m, n, 34);   // (m, n): what transposed_times adds to
  const auto both = [&] {
    Matrix<TestType> C(m, n), D = C0;  // (m, n) each: A B, and C0 + At^T B
    attend::detail::times<TestType>(false, A.data(), k, m, k, B.data(), n, n, C.data(), n);
    attend::detail::transposed_times<TestType>(true, At, B, D);
    return std::make_pair(C, D);
  };
#ifdef _OPENMP
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = both();
  omp_set_num_threads(2);
  const auto two = both();
  omp_set_num_threads(threads);
  REQUIRE(two.first == one.first);  // bit for bit
  REQUIRE(two.second == one.second);
#else
  const auto two = both();
#endif
  const Vector<TestType> none;
  const Matrix<TestType> Bt = B.transpose();  // (n, k)
  REQUIRE_THAT(two.first, attend_test::Near(affine_by_definition(A, Bt, none), tolerance_of_sums<TestType>(k)));
  const Matrix<TestType> Att = At.transpose();  // (m, k)
  const Matrix<double> expected = C0.template cast<double>() + affine_by_definition(Att, Bt, none);
  REQUIRE_THAT(two.second, attend_test::Near(expected, tolerance_of_sums<TestType>(k)));
}

TEMPLATE_TEST_CASE("times_matrix reads B in any layout, with the bits of a product on a row-major copy of B",
                   "[transposed_weight]", float, double) {
  // rows of Y around the row blocks and past tuning::packed_product_rows; in past a panel's depth, out around the
  // packets and past a panel's width; B stored by rows, by columns (W^T read from W), and as taps of a convolution's
  // (out, in, 3) weight, forward (strides 3, 3 in) and flipped for the input gradient (strides 3 out, 3).
  const Index rows = GENERATE(1, 6, 13, 64, 70);
  const Index in = GENERATE(1, 9, 300);
  const Index out = GENERATE(3, 16, 33, 130);
  const int layout = GENERATE(0, 1, 2, 3);
  const bool accumulate = GENERATE(true, false);
  CAPTURE(rows, in, out, layout, accumulate);
  const Index offsets[] = {0, 0, 1, 2};
  const Index row_strides[] = {out + 2, 1, 3, 3 * out};
  const Index column_strides[] = {1, in + 1, 3 * in, 3};
  const Index offset = offsets[layout], row_stride = row_strides[layout], column_stride = column_strides[layout];
  const Index stored = offset + (in - 1) * row_stride + (out - 1) * column_stride + 1;
  const Matrix<TestType> storage = random_matrix<TestType>(1, stored, 31);       // (1, stored): B's entries within
  const Matrix<TestType> X = random_matrix<TestType>(rows, in + 2, 32);          // (rows, in + 2): in to in + 2 unused
  const Matrix<TestType> Y0 = random_matrix<TestType>(rows, out, 33);            // (rows, out)
  const Vector<TestType> bias = random_matrix<TestType>(1, out, 34).transpose();  // (out)
  Matrix<TestType> B(in, out);                                                    // (in, out), row-major
  for (Index k = 0; k < in; ++k)
    for (Index o = 0; o < out; ++o) B(k, o) = storage(0, offset + k * row_stride + o * column_stride);
  const auto strided = b_strided(storage.data() + offset, row_stride, column_stride);  // B (in, out)
  Matrix<TestType> Y = Y0;       // (rows, out)
  Matrix<TestType> copied = Y0;  // (rows, out): the same from the row-major copy of B
  if (accumulate) {
    kernels<TestType>().times_matrix(x_rows(X.data(), in + 2, rows), in, strided, out,
                                     y_added(Y.data(), out, bias.data()));
    kernels<TestType>().times_matrix(x_rows(X.data(), in + 2, rows), in, b_rows(B.data(), out), out,
                                     y_added(copied.data(), out, bias.data()));
  } else {
    kernels<TestType>().times_matrix(x_rows(X.data(), in + 2, rows), in, strided, out,
                                     y_into(Y.data(), out, bias.data()));
    kernels<TestType>().times_matrix(x_rows(X.data(), in + 2, rows), in, b_rows(B.data(), out), out,
                                     y_into(copied.data(), out, bias.data()));
  }
  // (rows, out): (Y0 +) X B + bias, by definition
  Matrix<double> expected = affine_by_definition(Matrix<TestType>(X.leftCols(in)), Matrix<TestType>(B.transpose()),
                                                 bias);
  if (accumulate) expected += Y0.template cast<double>();
  REQUIRE_THAT(Y, attend_test::Near(expected, tolerance_of_sums<TestType>(in)));
  REQUIRE(Y == copied);  // bit for bit
}

TEMPLATE_TEST_CASE("packed_times_matrix over part of a panel pack_panel packed gives the bits of times_matrix",
                   "[transposed_weight]", float, double) {
  // A panel packed `depth` steps deep and `stored` columns wide (B stored by rows, or by columns as W^T read from W),
  // read over some of its steps from `first` on and its columns from c0 on (0, or the first micro-panel past the
  // level's packed_width), as the tiled kernel reads a last key block cut short and the direct path the keys a block
  // of rows sees; rows around the row blocks, columns around the micro-panels (16 to 64 lanes) and past a panel's
  // width (tuning::product_panel_width); X as stored, or as A^T read from A.
  const Index rows = GENERATE(1, 5, 6, 13, 70);
  const Index depth = GENERATE(1, 9, 300);
  const Index stored = GENERATE(3, 16, 33, 130, 200);
  const bool all_steps = GENERATE(true, false), all_columns = GENERATE(true, false);
  const bool by_rows = GENERATE(true, false), accumulate = GENERATE(true, false);
  const bool transposed = GENERATE(false, true), past_a_micro_panel = GENERATE(false, true);
  const attend::detail::Kernels<TestType>& kernel = attend::detail::kernels<TestType>();
  const Index c0 = past_a_micro_panel && stored > kernel.packed_width ? kernel.packed_width : 0;
  const Index first = all_steps ? 0 : depth / 3, steps = all_steps ? depth : depth - depth / 3 - depth / 4;
  const Index columns = all_columns ? stored - c0 : stored - c0 - (stored - c0) / 3;
  CAPTURE(rows, depth, stored, first, steps, c0, columns, by_rows, accumulate, transposed);
  const Matrix<TestType> B = random_matrix<TestType>(depth, stored, 41);  // (depth, stored)
  const Matrix<TestType> Bt = B.transpose();                               // (stored, depth): B by columns
  attend::detail::PacketBuffer<TestType> packed;
  packed.resize(depth * attend::detail::padded_to_packets<TestType>(stored));
  if (by_rows) {
    kernel.pack_panel(b_rows(B.data(), stored), depth, stored, packed.data());
  } else {
    kernel.pack_panel(b_columns(Bt.data(), depth), depth, stored, packed.data());
  }
  const Matrix<TestType> X = random_matrix<TestType>(rows, steps + 2, 42);  // (rows, steps + 2)
  Matrix<TestType> A = Matrix<TestType>::Zero(steps, rows + 3);             // (steps, rows + 3): X^T, and 3 more
  A.leftCols(rows) = X.leftCols(steps).transpose();
  const Matrix<TestType> Y0 = random_matrix<TestType>(rows, columns, 43);             // (rows, columns)
  const Vector<TestType> bias = random_matrix<TestType>(1, columns, 44).transpose();  // (columns)
  const Matrix<TestType> part = B.block(first, c0, steps, columns);                   // (steps, columns)
  Matrix<TestType> Y = Y0, copied = Y0;                                               // (rows, columns)
  kernel.packed_times_matrix({transposed ? A.data() : X.data(), transposed ? rows + 3 : steps + 2, rows, transposed},
                             steps, b_packed(packed.data() + c0 * depth, depth, stored - c0, first), columns,
                             {Y.data(), columns, accumulate, bias.data()});
  kernels<TestType>().times_matrix(x_rows(X.data(), steps + 2, rows), steps, b_rows(part.data(), columns), columns,
                                   {copied.data(), columns, accumulate, bias.data()});
  Matrix<double> expected =
      affine_by_definition(Matrix<TestType>(X.leftCols(steps)), Matrix<TestType>(part.transpose()), bias);
  if (accumulate) expected += Y0.template cast<double>();
  REQUIRE_THAT(Y, attend_test::Near(expected, tolerance_of_sums<TestType>(steps)));
  REQUIRE(Y == copied);  // bit for bit
}

TEMPLATE_TEST_CASE("A PacketBuffer starts on a packet boundary, and a copy of one starts empty", "[transposed_weight]",
                   float, double) {
  attend::detail::PacketBuffer<TestType> buffer;
  REQUIRE(buffer.data() == nullptr);
  buffer.resize(100);
  TestType* first = buffer.data();
  REQUIRE(reinterpret_cast<std::uintptr_t>(first) % attend::detail::tuning::widest_packet_bytes == 0);
  buffer.resize(60);  // room enough: the same memory
  REQUIRE(buffer.data() == first);
  const attend::detail::PacketBuffer<TestType> copy = buffer;
  REQUIRE(copy.data() == nullptr);
  attend::detail::PacketBuffer<TestType> moved = std::move(buffer);
  REQUIRE(moved.data() == first);
  REQUIRE(buffer.data() == nullptr);  // NOLINT(bugprone-use-after-move): a moved-from buffer is empty
  buffer.resize(10);
  REQUIRE(buffer.data() != nullptr);
}

TEMPLATE_TEST_CASE("A PacketMatrix is a row-major view on a packet boundary, and a copy of one starts empty",
                   "[transposed_weight]", float, double) {
  attend::detail::PacketMatrix<TestType> tile;
  REQUIRE(tile.rows() == 0);
  tile.resize(3, 32);
  REQUIRE(tile.rows() == 3);
  REQUIRE(tile.cols() == 32);
  REQUIRE(tile.outerStride() == 32);
  REQUIRE(reinterpret_cast<std::uintptr_t>(tile.data()) % attend::detail::tuning::widest_packet_bytes == 0);
  tile.view().setZero();
  tile.topLeftCorner(2, 3).setConstant(TestType(5));
  REQUIRE(tile.data()[32 + 2] == TestType(5));  // row 1, column 2: rows 32 apart
  REQUIRE(tile.data()[32 + 3] == TestType(0));
  REQUIRE(tile.topRows(2).rows() == 2);
  const attend::detail::PacketMatrix<TestType> copy = tile;
  REQUIRE(copy.rows() == 0);
  REQUIRE(copy.cols() == 0);
  TestType* first = tile.data();
  attend::detail::PacketMatrix<TestType> moved = std::move(tile);
  REQUIRE(moved.data() == first);
  REQUIRE(moved.rows() == 3);
  REQUIRE(tile.rows() == 0);  // NOLINT(bugprone-use-after-move): a moved-from matrix is empty
}

TEMPLATE_TEST_CASE("times_matrix of X = A^T or a strided B over no inner dimension, or into no rows, reads no operand",
                   "[transposed_weight]", float, double) {
  const Index out = GENERATE(3, 33);
  CAPTURE(out);
  const Matrix<TestType> Y0 = random_matrix<TestType>(7, out, 26);                // (7, out)
  const Vector<TestType> bias = random_matrix<TestType>(1, out, 27).transpose();  // (out)
  Matrix<TestType> Y = Y0;                                                        // (7, out)
  kernels<TestType>().times_matrix(x_columns<TestType>(nullptr, 7, 7), 0, b_rows<TestType>(nullptr, out), out,
                                   y_added(Y.data(), out));
  REQUIRE(Y == Y0);
  kernels<TestType>().times_matrix(x_columns<TestType>(nullptr, 7, 7), 0, b_rows<TestType>(nullptr, out), out,
                                   y_into(Y.data(), out, bias.data()));
  REQUIRE(Y == bias.transpose().replicate(7, 1));
  kernels<TestType>().times_matrix(x_columns<TestType>(nullptr, 7, 0), 5, b_rows<TestType>(nullptr, out), out,
                                   y_into<TestType>(nullptr, out));
  const auto none = b_strided<TestType>(nullptr, 3, 3 * out);
  Y = Y0;
  kernels<TestType>().times_matrix(x_rows<TestType>(nullptr, 7, 7), 0, none, out, y_added(Y.data(), out));
  REQUIRE(Y == Y0);
  kernels<TestType>().times_matrix(x_rows<TestType>(nullptr, 7, 7), 0, none, out, y_into(Y.data(), out, bias.data()));
  REQUIRE(Y == bias.transpose().replicate(7, 1));
  kernels<TestType>().times_matrix(x_rows<TestType>(nullptr, 7, 0), 5, none, out, y_into<TestType>(nullptr, out));
}

TEMPLATE_TEST_CASE("transpose_into copies A^T into B, and nothing else", "[transposed_weight]", float, double) {
  // rows and cols around the packet blocks (4, 8 and 16 lanes, the blocks P x P) and their edges.
  const Index rows = GENERATE(0, 1, 3, 4, 8, 15, 16, 17, 33, 40);
  const Index cols = GENERATE(0, 1, 2, 7, 16, 21, 32);
  CAPTURE(rows, cols);
  const Index lda = cols + 3, ldb = rows + 5;  // strides past the used columns: those must not be written
  const Matrix<TestType> A = random_matrix<TestType>(std::max(rows, Index(1)), lda, 21);  // (rows, lda)
  Matrix<TestType> B = Matrix<TestType>::Constant(std::max(cols, Index(1)), ldb, TestType(7));  // (cols, ldb)
  attend::detail::transpose_into<TestType>(A.data(), lda, rows, cols, B.data(), ldb);
  REQUIRE(B.topLeftCorner(cols, rows) == A.topLeftCorner(rows, cols).transpose());  // exact: a copy
  REQUIRE((B.rightCols(ldb - rows).array() == TestType(7)).all());
  if (cols == 0) REQUIRE((B.array() == TestType(7)).all());
}
