// The attention core (detail/core/attention.hpp), the tiled path of MultiHeadAttention and DotProductAttention, against
// detail::scaled_dot_product_heads, the direct path that materialises the weights and follows d2l step by step
// (itself tested against d2l's PyTorch code in test_dot_product_attention, test_multi_head_attention and test_mask).
// Random inputs over many shapes (across the core's query and key blocks, its decoding branch and its split of the
// keys), every kind of mask with both rules for a fully masked query, the keys no row can see never read (NaN there
// changes nothing), large scores, NaN scores, and the same bits whatever the number of threads.
#include <attend/detail/attend_rows.hpp>
#include <attend/detail/core/attention.hpp>
#include <attend/detail/heads.hpp>
#include <attend/mask.hpp>
#include <catch2/catch.hpp>
#include <support/matchers.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

using attend::FullyMasked;
using attend::Index;
using attend::Mask;
using attend::Matrix;
using attend::Tensor3;
using attend::ValidLens;
using attend::detail::heads_of;

namespace {

template <class Scalar>
attend_test::Tolerance<Scalar> exact() {
  return {0, 0};
}

struct Shape {
  Index batch, num_queries, num_keys, num_heads, d, dv;
};

std::string describe(const Shape& s) {
  return attend::detail::message("batch ", s.batch, ", queries ", s.num_queries, ", keys ", s.num_keys, ", heads ",
                                 s.num_heads, ", d ", s.d, ", dv ", s.dv);
}

// Projected inputs of a shape: Q (batch * queries, heads * d), K (batch * keys, heads * d), V (batch * keys, heads * dv).
template <class Scalar>
struct Inputs {
  Matrix<Scalar> Q, K, V;
};

template <class Scalar>
Matrix<Scalar> uniform_matrix(Index rows, Index cols, std::mt19937& rng, double low = -1, double high = 1) {
  std::uniform_real_distribution<double> dist(low, high);
  Matrix<Scalar> M(rows, cols);
  for (Index i = 0; i < M.size(); ++i) M.data()[i] = static_cast<Scalar>(dist(rng));
  return M;
}

template <class Scalar>
Inputs<Scalar> random_inputs(const Shape& s, std::mt19937& rng) {
  return {uniform_matrix<Scalar>(s.batch * s.num_queries, s.num_heads * s.d, rng),
          uniform_matrix<Scalar>(s.batch * s.num_keys, s.num_heads * s.d, rng),
          uniform_matrix<Scalar>(s.batch * s.num_keys, s.num_heads * s.dv, rng)};
}

// The direct path: weights materialised, masked softmax as d2l, evaluation mode.
template <class Scalar>
Matrix<Scalar> direct(const Inputs<Scalar>& in, const Shape& s, const Mask& mask) {
  Matrix<Scalar> output(s.batch * s.num_queries, s.num_heads * s.dv);  // (batch * queries, heads * dv)
  Tensor3<Scalar> weights;                                              // (batch * heads, queries, keys)
  attend::detail::scaled_dot_product_heads<Scalar>(heads_of(in.Q, s.batch, s.num_queries, s.num_heads),
                                                   heads_of(in.K, s.batch, s.num_keys, s.num_heads),
                                                   heads_of(in.V, s.batch, s.num_keys, s.num_heads), mask, weights,
                                                   heads_of(output, s.batch, s.num_queries, s.num_heads));
  return output;
}

// The core, on an output filled with NaN first: every element must be written.
template <class Scalar>
Matrix<Scalar> core(const Inputs<Scalar>& in, const Shape& s, const Mask& mask) {
  Matrix<Scalar> output =  // (batch * queries, heads * dv)
      Matrix<Scalar>::Constant(s.batch * s.num_queries, s.num_heads * s.dv, std::numeric_limits<Scalar>::quiet_NaN());
  attend::detail::core::Buffers<Scalar> buffers;
  const auto call = attend::detail::core::scaled_call<Scalar>(heads_of(in.Q, s.batch, s.num_queries, s.num_heads),
                                                               heads_of(in.K, s.batch, s.num_keys, s.num_heads),
                                                               heads_of(in.V, s.batch, s.num_keys, s.num_heads), mask,
                                                               {});
  attend::detail::core::forward<Scalar>(call, heads_of(output, s.batch, s.num_queries, s.num_heads), nullptr, buffers);
  return output;
}

// A keep tensor (rows, queries, keys) of random booleans, true with probability p; query 0 of every row keeps no key.
Tensor3<bool> random_keep(Index rows, Index num_queries, Index num_keys, double p, std::mt19937& rng) {
  std::bernoulli_distribution keeps(p);
  Tensor3<bool> keep(rows, num_queries, num_keys);
  for (Index r = 0; r < rows; ++r)
    for (Index q = 0; q < num_queries; ++q)
      for (Index j = 0; j < num_keys; ++j) keep(r, q, j) = q != 0 && keeps(rng);
  return keep;
}

// Lengths per batch row, cycling through 0, over-long, 1, all keys and a random one.
ValidLens lens_per_batch(const Shape& s, std::mt19937& rng) {
  std::uniform_int_distribution<Index> any(0, s.num_keys);
  std::vector<Index> lens;
  const Index choices[] = {0, s.num_keys + 5, 1, s.num_keys};
  for (Index b = 0; b < s.batch; ++b) lens.push_back(b < 4 ? choices[b] : any(rng));
  if (s.batch == 1) lens[0] = any(rng);
  return ValidLens::per_batch(lens);
}

// Lengths per query, random in [0, keys + 3]: 0 and over-long included.
ValidLens lens_per_query(const Shape& s, std::mt19937& rng) {
  std::uniform_int_distribution<Index> any(0, s.num_keys + 3);
  Matrix<Index> lens(s.batch, s.num_queries);
  for (Index i = 0; i < lens.size(); ++i) lens.data()[i] = any(rng);
  if (lens.size() > 1) lens(0, 0) = 0;
  return ValidLens::per_query(lens);
}

const char* const mask_kinds[] = {"none",
                                  "lens (batch,)",
                                  "lens (batch, queries)",
                                  "causal",
                                  "keep (batch, queries, keys)",
                                  "keep (1, queries, keys)",
                                  "lens (batch,) && causal",
                                  "lens (batch, queries) && keep",
                                  "causal && keep (1, ...)",
                                  "lens (batch,) && causal && keep",
                                  "sparse keep (batch, queries, keys)"};
constexpr int num_mask_kinds = static_cast<int>(sizeof(mask_kinds) / sizeof(mask_kinds[0]));

Mask make_mask(int kind, const Shape& s, std::mt19937& rng) {
  switch (kind) {
    case 0: return {};
    case 1: return lens_per_batch(s, rng);
    case 2: return lens_per_query(s, rng);
    case 3: return Mask::causal();
    case 4: return Mask::keep(random_keep(s.batch, s.num_queries, s.num_keys, 0.7, rng));
    case 5: return Mask::keep(random_keep(1, s.num_queries, s.num_keys, 0.5, rng));
    case 6: return Mask(lens_per_batch(s, rng)) && Mask::causal();
    case 7: return Mask(lens_per_query(s, rng)) && Mask::keep(random_keep(s.batch, s.num_queries, s.num_keys, 0.6, rng));
    case 8: return Mask::causal() && Mask::keep(random_keep(1, s.num_queries, s.num_keys, 0.8, rng));
    case 9:
      return Mask(lens_per_batch(s, rng)) && Mask::causal() &&
             Mask::keep(random_keep(s.batch, s.num_queries, s.num_keys, 0.7, rng));
    default: return Mask::keep(random_keep(s.batch, s.num_queries, s.num_keys, 0.03, rng));
  }
}

const Shape shapes[] = {
    {1, 1, 1, 1, 1, 1},      {2, 4, 4, 5, 20, 20},    {2, 7, 13, 3, 5, 4},     {3, 37, 53, 2, 8, 6},
    {2, 130, 70, 1, 16, 16}, {1, 70, 130, 4, 32, 24}, {2, 65, 129, 2, 64, 64}, {1, 200, 300, 1, 64, 32},
    {2, 5, 0, 2, 4, 3},      {1, 0, 6, 2, 4, 4},      {1, 6, 600, 2, 16, 16},  {2, 3, 1030, 1, 8, 8},
};

}  // namespace

TEMPLATE_TEST_CASE("the core matches the direct path on every shape and mask", "[core_paths]", float, double) {
  const Shape s = GENERATE(from_range(std::begin(shapes), std::end(shapes)));
  const int kind = GENERATE(range(0, num_mask_kinds));
  const FullyMasked rule = GENERATE(FullyMasked::uniform, FullyMasked::zero);
  CAPTURE(describe(s), mask_kinds[kind], attend::to_string(rule));
  std::mt19937 rng(static_cast<unsigned>(1000 * kind + s.num_queries + 7 * s.num_keys));
  const auto in = random_inputs<TestType>(s, rng);
  Mask mask = make_mask(kind, s, rng);
  if (rule == FullyMasked::zero) mask = mask.when_fully_masked(rule);
  REQUIRE_THAT(core(in, s, mask), attend_test::Near(direct(in, s, mask), attend_test::path_tolerance<TestType>()));
}

TEMPLATE_TEST_CASE("the core gives a query that sees no key the mask's rule", "[core_paths]", float, double) {
  const Shape s{2, 6, 9, 3, 4, 5};
  std::mt19937 rng(5);
  const auto in = random_inputs<TestType>(s, rng);
  Matrix<Index> lens(2, 6);  // (batch, queries): query 2 of row 0 and queries 0, 5 of row 1 see no key
  lens << 4, 9, 0, 1, 12, 3, 0, 2, 7, 9, 1, 0;
  const Mask mask = ValidLens::per_query(lens);
  const auto uniform = core(in, s, mask);
  const auto zero = core(in, s, mask.when_fully_masked(FullyMasked::zero));
  const std::pair<Index, Index> masked[] = {{0, 2}, {1, 0}, {1, 5}};
  for (const auto& [b, q] : masked) {
    CAPTURE(b, q);
    // d2l: every score -1e6, every weight 1 / keys: the mean of all value rows of the head.
    const Matrix<TestType> mean = in.V.middleRows(b * s.num_keys, s.num_keys).colwise().mean();  // (1, heads * dv)
    REQUIRE_THAT(Matrix<TestType>(uniform.row(b * s.num_queries + q)),
                 attend_test::Near(mean, attend_test::path_tolerance<TestType>()));
    REQUIRE_THAT(Matrix<TestType>(zero.row(b * s.num_queries + q)),
                 attend_test::Near(Matrix<TestType>(Matrix<TestType>::Zero(1, s.num_heads * s.dv)), exact<TestType>()));
  }
  REQUIRE_THAT(uniform, attend_test::Near(direct(in, s, mask), attend_test::path_tolerance<TestType>()));
  REQUIRE_THAT(zero, attend_test::Near(direct(in, s, mask.when_fully_masked(FullyMasked::zero)),
                                       attend_test::path_tolerance<TestType>()));
}

TEMPLATE_TEST_CASE("the core never reads the keys and values no query can see", "[core_paths]", float, double) {
  // NaN in every K and V row past the last key any query of a batch row sees (and, with a keep tensor, before the
  // first): a kernel that read them would return NaN. The expected output is the direct path on inputs cut to the
  // visible keys.
  const Shape s{3, 40, 300, 2, 16, 12};
  const int kind = GENERATE(0, 1, 2);  // lens (batch,), lens (batch, queries), keep with a visible window
  const FullyMasked rule = GENERATE(FullyMasked::uniform, FullyMasked::zero);
  CAPTURE(kind, attend::to_string(rule));
  std::mt19937 rng(static_cast<unsigned>(11 + kind));
  auto in = random_inputs<TestType>(s, rng);

  // Batch row b's visible window [first[b], last[b]), and its mask on the cut inputs.
  const Index first[] = {0, 0, 0}, last_lens[] = {37, 150, 1};
  const Index window_first[] = {3, 0, 130}, window_last[] = {37, 150, 131};
  const bool zero_rule = rule == FullyMasked::zero;
  Mask mask;
  std::vector<Mask> cut_masks;
  std::vector<Index> cut_first, cut_last;
  if (kind == 0) {
    mask = ValidLens::per_batch({last_lens[0], last_lens[1], last_lens[2]});
    for (Index b = 0; b < 3; ++b) cut_masks.push_back(ValidLens::per_batch({last_lens[b]}));
    cut_first.assign(first, first + 3);
    cut_last.assign(last_lens, last_lens + 3);
  } else if (kind == 1) {
    // Per query lengths up to the row's last; 0 only under the zero rule (under the uniform rule a query that sees
    // no key averages every value row, the unseen ones included).
    Matrix<Index> lens(s.batch, s.num_queries);
    for (Index b = 0; b < 3; ++b) {
      std::uniform_int_distribution<Index> any(zero_rule ? 0 : 1, last_lens[b]);
      for (Index q = 0; q < s.num_queries; ++q) lens(b, q) = any(rng);
      lens(b, 1) = last_lens[b];
    }
    mask = ValidLens::per_query(lens);
    for (Index b = 0; b < 3; ++b) cut_masks.push_back(ValidLens::per_query(Matrix<Index>(lens.row(b))));
    cut_first.assign(first, first + 3);
    cut_last.assign(last_lens, last_lens + 3);
  } else {
    Tensor3<bool> keep(s.batch, s.num_queries, s.num_keys);  // true only inside the row's window
    keep.setConstant(false);
    std::bernoulli_distribution keeps(0.6);
    for (Index b = 0; b < 3; ++b) {
      Tensor3<bool> cut(1, s.num_queries, window_last[b] - window_first[b]);
      for (Index q = 0; q < s.num_queries; ++q)
        for (Index j = window_first[b]; j < window_last[b]; ++j) {
          // Every query keeps its window's ends unless the zero rule lets some query see nothing.
          const bool end = j == window_first[b] || j == window_last[b] - 1;
          keep(b, q, j) = zero_rule && q % 7 == 3 ? false : (end || keeps(rng));
          cut(0, q, j - window_first[b]) = keep(b, q, j);
        }
      cut_masks.push_back(Mask::keep(cut));
    }
    mask = Mask::keep(keep);
    cut_first.assign(window_first, window_first + 3);
    cut_last.assign(window_last, window_last + 3);
  }
  if (zero_rule) {
    mask = mask.when_fully_masked(rule);
    for (auto& m : cut_masks) m = m.when_fully_masked(rule);
  }

  const TestType nan = std::numeric_limits<TestType>::quiet_NaN();
  for (Index b = 0; b < 3; ++b)
    for (Index j = 0; j < s.num_keys; ++j)
      if (j < cut_first[static_cast<std::size_t>(b)] || j >= cut_last[static_cast<std::size_t>(b)]) {
        in.K.row(b * s.num_keys + j).setConstant(nan);
        in.V.row(b * s.num_keys + j).setConstant(nan);
      }
  const auto output = core(in, s, mask);
  for (Index b = 0; b < 3; ++b) {
    CAPTURE(b);
    const Index kf = cut_first[static_cast<std::size_t>(b)], kl = cut_last[static_cast<std::size_t>(b)];
    const Shape cut_shape{1, s.num_queries, kl - kf, s.num_heads, s.d, s.dv};
    const Inputs<TestType> cut{in.Q.middleRows(b * s.num_queries, s.num_queries),
                               in.K.middleRows(b * s.num_keys + kf, kl - kf),
                               in.V.middleRows(b * s.num_keys + kf, kl - kf)};
    const Matrix<TestType> expected = direct(cut, cut_shape, cut_masks[static_cast<std::size_t>(b)]);
    REQUIRE_THAT(Matrix<TestType>(output.middleRows(b * s.num_queries, s.num_queries)),
                 attend_test::Near(expected, attend_test::path_tolerance<TestType>()));
  }
}

TEMPLATE_TEST_CASE("the core stays finite and exact with scores up to 1e4", "[core_paths]", float, double) {
  // Integer Q and K entries and d = 16 (scale 1/4) make every score exact in both paths, up to |s| = 16 * 50^2 / 4 =
  // 1e4, so the two paths differ only in the softmax: running maxima far apart force rescaling by exp(m_old - m_new)
  // that underflows to 0, and most weights flush to 0.
  const Shape s = GENERATE(Shape{2, 50, 77, 2, 16, 8}, Shape{1, 130, 300, 2, 16, 8}, Shape{2, 4, 600, 2, 16, 8});
  const int kind = GENERATE(0, 1, 3, 9);
  CAPTURE(describe(s), mask_kinds[kind]);
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> integer(-50, 50);
  Inputs<TestType> in = random_inputs<TestType>(s, rng);
  for (auto* M : {&in.Q, &in.K})
    for (Index i = 0; i < M->size(); ++i) M->data()[i] = static_cast<TestType>(integer(rng));
  in.Q.row(3).setConstant(50);  // scores of +-1e4 exactly with keys of +-50
  in.K.row(10).setConstant(50);
  in.K.row(11).setConstant(-50);
  const Mask mask = make_mask(kind, s, rng);
  const auto output = core(in, s, mask);
  REQUIRE(output.allFinite());
  REQUIRE_THAT(output, attend_test::Near(direct(in, s, mask), attend_test::path_tolerance<TestType>()));
}

TEMPLATE_TEST_CASE("the core writes only its output's columns", "[core_paths]", float, double) {
  // The output is a strided block of a wider matrix: the columns around it keep their values.
  const Shape s{2, 33, 21, 3, 8, 4};
  std::mt19937 rng(17);
  const auto in = random_inputs<TestType>(s, rng);
  Matrix<TestType> wide = Matrix<TestType>::Constant(s.batch * s.num_queries, s.num_heads * s.dv + 5, 7);
  const Mask causal = Mask::causal();
  attend::detail::core::Buffers<TestType> buffers;
  attend::detail::core::forward<TestType>(
      attend::detail::core::scaled_call<TestType>(heads_of(in.Q, s.batch, s.num_queries, s.num_heads),
                                                  heads_of(in.K, s.batch, s.num_keys, s.num_heads),
                                                  heads_of(in.V, s.batch, s.num_keys, s.num_heads), causal, {}),
      heads_of(wide.middleCols(2, s.num_heads * s.dv), s.batch, s.num_queries, s.num_heads), nullptr, buffers);
  REQUIRE((wide.leftCols(2).array() == TestType(7)).all());
  REQUIRE((wide.rightCols(3).array() == TestType(7)).all());
  REQUIRE_THAT(Matrix<TestType>(wide.middleCols(2, s.num_heads * s.dv)),
               attend_test::Near(direct(in, s, Mask::causal()), attend_test::path_tolerance<TestType>()));
}

#ifdef _OPENMP
TEMPLATE_TEST_CASE("the core gives the same bits on 1 and 2 threads", "[core_paths][threads]", float, double) {
  const Shape s = GENERATE(Shape{2, 130, 70, 3, 16, 16}, Shape{1, 300, 300, 1, 64, 64}, Shape{1, 20, 40, 1, 8, 8},
                           Shape{1, 3, 1100, 2, 16, 16});
  const int kind = GENERATE(0, 3, 9);
  CAPTURE(describe(s), mask_kinds[kind]);
  std::mt19937 rng(23);
  const auto in = random_inputs<TestType>(s, rng);
  const Mask mask = make_mask(kind, s, rng);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = core(in, s, mask);
  omp_set_num_threads(2);
  const auto two = core(in, s, mask);
  omp_set_num_threads(threads);
  REQUIRE_THAT(two, attend_test::Near(one, exact<TestType>()));
  REQUIRE(std::memcmp(one.data(), two.data(), sizeof(TestType) * static_cast<std::size_t>(one.size())) == 0);
}
#endif

TEMPLATE_TEST_CASE("the core: a keep tensor that keeps every key gives the bits of no mask", "[core_paths]", float,
                   double) {
  // A keep tensor sends every row through the keep row's holes, which it has none of: the same scores, maxima,
  // exponentials, rescaling factors and products as no mask. Scores up to about 8 in size, so that maxima grow from
  // block to block; blocks of a whole number of packets and not, the decoding branch and its split of the keys.
  const Shape s = GENERATE(Shape{2, 130, 600, 2, 32, 32}, Shape{1, 40, 257, 3, 16, 8}, Shape{1, 9, 33, 1, 5, 3},
                           Shape{1, 4, 700, 2, 16, 8});
  CAPTURE(describe(s));
  std::mt19937 rng(41);
  Inputs<TestType> in = random_inputs<TestType>(s, rng);
  in.Q *= TestType(3);
  Tensor3<bool> keep(s.batch, s.num_queries, s.num_keys);
  keep.setConstant(true);
  const auto unmasked = core(in, s, Mask{});
  const auto kept = core(in, s, Mask::keep(keep));
  REQUIRE(std::memcmp(unmasked.data(), kept.data(), sizeof(TestType) * static_cast<std::size_t>(kept.size())) == 0);
  REQUIRE_THAT(unmasked, attend_test::Near(direct(in, s, Mask{}), attend_test::path_tolerance<TestType>()));
}

TEMPLATE_TEST_CASE("the core: NaN scores make their rows NaN", "[core_paths]", float, double) {
  // As on the direct path, where the softmax of a row with a NaN score is NaN: the last 3 keys' rows are NaN, inside a
  // block of finite scores (7 and 40 keys), a block of their own after a whole one (131 = 128 + 3), and the last of
  // the decoding branch's spans (771 = 3 * 256 + 3, with 5 queries); with and without a mask.
  const Index num_keys = GENERATE(7, 40, 131, 771);
  const Index num_queries = GENERATE(5, 70);
  const int kind = GENERATE(0, 1, 4);
  const Shape s{1, num_queries, num_keys, 1, 4, 3};
  CAPTURE(num_keys, num_queries, mask_kinds[kind]);
  std::mt19937 rng(47);
  Inputs<TestType> in = random_inputs<TestType>(s, rng);
  in.K.bottomRows(3).setConstant(std::numeric_limits<TestType>::quiet_NaN());
  Tensor3<bool> keep(1, s.num_queries, num_keys);
  keep.setConstant(true);
  const Mask mask = kind == 0 ? Mask{} : kind == 1 ? Mask(ValidLens::per_batch({num_keys})) : Mask::keep(keep);
  const Matrix<TestType> expected = direct(in, s, mask);
  REQUIRE(expected.array().isNaN().all());
  REQUIRE(core(in, s, mask).array().isNaN().all());
}

TEMPLATE_TEST_CASE("both paths read heads through a view: grouped key/value heads and a cache with spare rows",
                   "[core_paths][heads]", float, double) {
  // Grouped-query attention: 4 query heads on 2 key/value heads, query head h reading key/value head h / 2, must give
  // the bits of ordinary multi-head attention on keys and values whose head h is a copy of head h / 2. And the keys
  // and values read in place from a cache with room for 7 more steps per batch row (NaN there: never read).
  const Index dv = GENERATE(8, 5);  // 5: the core packs the values' blocks, padded to whole packets
  const int kind = GENERATE(0, 6, 9);
  const Shape s{2, 37, 29, 4, 8, dv};
  const Index kv_heads = 2, group = s.num_heads / kv_heads, spare = 7;
  CAPTURE(dv, mask_kinds[kind]);
  std::mt19937 rng(53);
  const Matrix<TestType> Q = uniform_matrix<TestType>(s.batch * s.num_queries, s.num_heads * s.d, rng);
  const Matrix<TestType> K = uniform_matrix<TestType>(s.batch * s.num_keys, kv_heads * s.d, rng);
  const Matrix<TestType> V = uniform_matrix<TestType>(s.batch * s.num_keys, kv_heads * dv, rng);
  const Mask mask = make_mask(kind, s, rng);

  // Every query head's own copy of its key/value head: (batch * keys, heads * d) and (batch * keys, heads * dv).
  Inputs<TestType> repeated{Q, Matrix<TestType>(K.rows(), s.num_heads * s.d), Matrix<TestType>(V.rows(), s.num_heads * dv)};
  for (Index h = 0; h < s.num_heads; ++h) {
    repeated.K.middleCols(h * s.d, s.d) = K.middleCols(h / group * s.d, s.d);
    repeated.V.middleCols(h * dv, dv) = V.middleCols(h / group * dv, dv);
  }
  // The cache: (batch * (keys + spare), kv_heads * d), batch row b's steps from row b * (keys + spare).
  const TestType nan = std::numeric_limits<TestType>::quiet_NaN();
  Matrix<TestType> K_cache = Matrix<TestType>::Constant(s.batch * (s.num_keys + spare), K.cols(), nan);
  Matrix<TestType> V_cache = Matrix<TestType>::Constant(s.batch * (s.num_keys + spare), V.cols(), nan);
  for (Index b = 0; b < s.batch; ++b) {
    K_cache.middleRows(b * (s.num_keys + spare), s.num_keys) = K.middleRows(b * s.num_keys, s.num_keys);
    V_cache.middleRows(b * (s.num_keys + spare), s.num_keys) = V.middleRows(b * s.num_keys, s.num_keys);
  }
  using Heads = attend::detail::Heads<const TestType>;
  const Heads Qh = heads_of(Q, s.batch, s.num_queries, s.num_heads);
  const Heads grouped[2][2] = {
      {heads_of(K, s.batch, s.num_keys, kv_heads), heads_of(V, s.batch, s.num_keys, kv_heads)},
      {Heads{K_cache.data(), K_cache.cols(), s.num_keys + spare, s.batch, s.num_keys, kv_heads, s.d, s.d},
       Heads{V_cache.data(), V_cache.cols(), s.num_keys + spare, s.batch, s.num_keys, kv_heads, dv, dv}}};

  const Matrix<TestType> expected_direct = direct(repeated, s, mask);
  const Matrix<TestType> expected_core = core(repeated, s, mask);
  for (const auto& kv : grouped) {
    Matrix<TestType> output = Matrix<TestType>::Constant(Q.rows(), s.num_heads * dv, nan);  // (batch * q, heads * dv)
    const auto out = heads_of(output, s.batch, s.num_queries, s.num_heads);
    Tensor3<TestType> weights;
    attend::detail::scaled_dot_product_heads<TestType>(Qh, kv[0], kv[1], mask, weights, out);
    REQUIRE_THAT(output, attend_test::Near(expected_direct, exact<TestType>()));
    output.setConstant(nan);
    attend::detail::core::Buffers<TestType> buffers;
    const auto call = attend::detail::core::scaled_call<TestType>(Qh, kv[0], kv[1], mask, {});
    attend::detail::core::forward<TestType>(call, out, nullptr, buffers);
    REQUIRE_THAT(output, attend_test::Near(expected_core, exact<TestType>()));
  }
}
