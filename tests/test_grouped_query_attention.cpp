// GroupedQueryAttention: against transformers' LlamaAttention and MistralAttention (fixtures of
// tests/reference/make_modern_fixtures.py: the whole-sequence output, the gradients, decoding with a cache), its
// backward pass against finite differences (rotary, bias, masks, score options, dropout), the reproducibility of its
// dropout, the cached call's checks (a call that throws leaves the cache and the module as they were), its promise
// to allocate nothing from the second call of a shape on, maps of the caller's memory, and its state_dict().
//
// The allocations are counted by tests/support/allocation_counter.hpp.
#include <attend/grouped_query_attention.hpp>
#include <catch2/catch.hpp>
#include <support/allocation_counter.hpp>
#include <support/checks.hpp>
#include <support/finite_difference.hpp>
#include <support/fixture.hpp>
#include <support/gradients.hpp>
#include <support/matchers.hpp>
#include <support/random_tensor.hpp>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

// ---- helpers -------------------------------------------------------------------------------------------------------

using attend::ConstTensorMap3;
using attend::GroupedQueryAttention;
using attend::Index;
using attend::KVCache;
using attend::Linear;
using attend::Mask;
using attend::Matrix;
using attend::RotaryEmbedding;
using attend::ScoreOptions;
using attend::Tensor3;
using attend::TensorMap3;
using attend::ValidLens;
using attend::Vector;
using attend_test::Near;
using attend_test::random_tensor;
using attend_test::same_bits;
using attend_test::require_invalid;

namespace {

const char* const layer_cases[] = {"llama_attention_gqa", "llama_attention_mqa_bias", "mistral_attention_window"};
const char* const projections[] = {"q_proj", "k_proj", "v_proj", "o_proj"};

template <class Scalar>
std::vector<Linear<Scalar>*> linears(GroupedQueryAttention<Scalar>& gqa) {
  return {&gqa.W_q(), &gqa.W_k(), &gqa.W_v(), &gqa.W_o()};
}

// The fixture's weights (q_proj -> W_q, ...) and rotary embedding.
template <class Scalar>
void load_fixture(GroupedQueryAttention<Scalar>& gqa, const attend_test::Fixture& fx) {
  const bool bias = fx.has("q_proj.bias");
  const auto layers = linears(gqa);
  for (std::size_t i = 0; i < 4; ++i) {
    layers[i]->weight() = fx.matrix<Scalar>(std::string(projections[i]) + ".weight");
    if (bias) layers[i]->bias() = fx.vector<Scalar>(std::string(projections[i]) + ".bias");
  }
  gqa.set_rotary(RotaryEmbedding<Scalar>(fx.index("head_dim"), fx.scalar("rope_theta")));
}

// HF's mask: causal, and with sliding_window W > 0 the W keys up to the query's own (attend's window(W - 1, 0)).
Mask fixture_mask(const attend_test::Fixture& fx) {
  const Index W = fx.index("sliding_window");
  return W > 0 ? Mask::causal() && Mask::window(W - 1, 0) : Mask::causal();
}

// X[:, lo:hi]
template <class Scalar>
Tensor3<Scalar> steps_of(const Tensor3<Scalar>& X, Index lo, Index hi) {
  Tensor3<Scalar> out(X.dimension(0), hi - lo, X.dimension(2));  // (batch, hi - lo, features)
  for (Index b = 0; b < X.dimension(0); ++b)
    for (Index t = lo; t < hi; ++t)
      for (Index f = 0; f < X.dimension(2); ++f) out(b, t - lo, f) = X(b, t, f);
  return out;
}

// Y[:, lo:lo + part.steps] = part
template <class Scalar>
void put_steps(Tensor3<Scalar>& Y, Index lo, const Tensor3<Scalar>& part) {
  for (Index b = 0; b < part.dimension(0); ++b)
    for (Index t = 0; t < part.dimension(1); ++t)
      for (Index f = 0; f < part.dimension(2); ++f) Y(b, lo + t, f) = part(b, t, f);
}

// Everything a cache holds: its size and its whole storage.
template <class Scalar>
struct Snapshot {
  Index size;
  Tensor3<Scalar> keys, values;
  explicit Snapshot(const KVCache<Scalar>& cache)
      : size(cache.size()), keys(cache.key_storage()), values(cache.value_storage()) {}
  bool same_as(const KVCache<Scalar>& cache) const {
    return cache.size() == size && same_bits(Tensor3<Scalar>(cache.key_storage()), keys) &&
           same_bits(Tensor3<Scalar>(cache.value_storage()), values);
  }
};

// Two caches hold the same steps (the rows in use; the rest of the storage is whatever it was).
template <class Scalar>
bool same_held(const KVCache<Scalar>& a, const KVCache<Scalar>& b) {
  if (a.size() != b.size() || a.batch() != b.batch() || a.width() != b.width()) return false;
  for (Index batch = 0; batch < a.batch(); ++batch)
    for (Index g = 0; g < a.num_kv_heads(); ++g)
      for (Index t = 0; t < a.size(); ++t)
        for (Index i = 0; i < a.head_dim(); ++i) {
          const Index row = g * a.capacity() + t;  // head g's step t
          if (a.key_storage()(batch, row, i) != b.key_storage()(batch, row, i) ||
              a.value_storage()(batch, row, i) != b.value_storage()(batch, row, i))
            return false;
        }
  return true;
}

// HF's decode_output computes the RoPE angles (and the softmax) in float32 where attend and the fixture's `output`
// compute them in float64 (the fixture's notes measure 1e-8 between the two): in double, agreement to 1e-6, not to
// rounding error; in float, float's own tolerance covers it.
template <class Scalar>
attend_test::Tolerance<Scalar> hf_decode_tolerance() {
  if constexpr (std::is_same_v<Scalar, double>) {
    return {1e-6, 1e-6};
  } else {
    return attend_test::tolerance<float>();
  }
}

// A small random layer: 6 hidden features, 4 query heads of 4 over 2 key/value heads, biases, rotary.
template <class Scalar>
struct SmallLayer {
  attend::Generator init;
  GroupedQueryAttention<Scalar> gqa;
  explicit SmallLayer(std::uint64_t seed, bool bias = true, Scalar dropout = Scalar(0))
      : init(seed), gqa(6, 4, 2, 4, bias, dropout, init) {
    gqa.set_rotary(RotaryEmbedding<Scalar>(4, 10.0));
  }
};

}  // namespace

// ---- 1. transformers' layers ---------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("GroupedQueryAttention matches transformers' Llama and Mistral attention: output and gradients",
                   "[grouped_query_attention][golden]", float, double) {
  const std::string name = GENERATE(from_range(std::begin(layer_cases), std::end(layer_cases)));
  CAPTURE(name);
  const attend_test::Fixture fx(name);
  const bool bias = fx.has("q_proj.bias");
  GroupedQueryAttention<TestType> gqa(fx.index("hidden_size"), fx.index("num_heads"), fx.index("num_kv_heads"),
                                      fx.index("head_dim"), bias);
  load_fixture(gqa, fx);
  const Mask mask = fixture_mask(fx);
  const Tensor3<TestType> X = fx.tensor3<TestType>("X");

  const Tensor3<TestType> Y = gqa(X, mask);
  REQUIRE_THAT(Y, Near(fx.tensor3<double>("output"), attend_test::tolerance<TestType>()));
  const Tensor3<TestType> dX = gqa.backward(fx.tensor3<TestType>("grad_output"));
  const auto gtol = attend_test::gradient_tolerance<TestType>();
  REQUIRE_THAT(dX, Near(fx.tensor3<double>("grad_input"), gtol));
  const auto layers = linears(gqa);
  for (std::size_t i = 0; i < 4; ++i) {
    const std::string p = projections[i];
    CAPTURE(p);
    REQUIRE_THAT(layers[i]->weight_grad(), Near(fx.matrix<double>(p + ".weight.grad"), gtol));
    REQUIRE(layers[i]->has_bias() == bias);
    if (bias) REQUIRE_THAT(layers[i]->bias_grad(), Near(fx.vector<double>(p + ".bias.grad"), gtol));
  }
}

TEMPLATE_TEST_CASE("GroupedQueryAttention decodes as transformers' layers do with a DynamicCache",
                   "[grouped_query_attention][golden][kv_cache]", float, double) {
  const std::string name = GENERATE(from_range(std::begin(layer_cases), std::end(layer_cases)));
  CAPTURE(name);
  const attend_test::Fixture fx(name);
  GroupedQueryAttention<TestType> gqa(fx.index("hidden_size"), fx.index("num_heads"), fx.index("num_kv_heads"),
                                      fx.index("head_dim"), fx.has("q_proj.bias"));
  load_fixture(gqa, fx);
  gqa.eval();
  const Mask mask = fixture_mask(fx);
  const Tensor3<TestType> X = fx.tensor3<TestType>("X");
  const Index B = X.dimension(0), n = X.dimension(1), prefix = fx.index("prefix");
  const Tensor3<double> output = fx.tensor3<double>("output"), decode_output = fx.tensor3<double>("decode_output");
  const auto tol = attend_test::tolerance<TestType>();

  KVCache<TestType> cache(B, fx.index("num_kv_heads"), fx.index("head_dim"), n);
  Tensor3<TestType> decoded(B, n, X.dimension(2));  // (batch, n, hidden): every step's output, decoded

  // The prefix in one call, then one step at a time.
  const Tensor3<TestType> first = gqa(steps_of(X, 0, prefix), cache, mask);
  REQUIRE(cache.size() == prefix);
  REQUIRE_THAT(first, Near(steps_of(output, 0, prefix), tol));
  put_steps(decoded, 0, first);
  for (Index t = prefix; t < n; ++t) {
    CAPTURE(t);
    const Tensor3<TestType> y = gqa(steps_of(X, t, t + 1), cache, mask);
    REQUIRE(cache.size() == t + 1);
    REQUIRE_THAT(y, Near(steps_of(output, t, t + 1), tol));  // the float64 recomputation
    REQUIRE_THAT(y, Near(steps_of(decode_output, t - prefix, t - prefix + 1), hf_decode_tolerance<TestType>()));
    put_steps(decoded, t, y);
  }

  // The whole sequence at once gives what decoding token by token gave, positions 0 .. n-1 both.
  gqa.train();
  REQUIRE_THAT(gqa(X, mask), Near(decoded, tol));
  REQUIRE_THAT(gqa.forward(X, mask), Near(decoded, tol));
}

// ---- 2. finite differences -----------------------------------------------------------------------------------------

TEST_CASE("GroupedQueryAttention::backward agrees with finite differences: rotary, bias, masks, score options",
          "[grouped_query_attention][gradients]") {
  const Tensor3<double> X0 = random_tensor<double>(2, 5, 6, 301), dY = random_tensor<double>(2, 5, 6, 302);
  const Mask masks[] = {Mask::causal(), Mask::causal() && Mask::window(2, 0), Mask::window(1, 1),
                        Mask(ValidLens{3, 5}) && Mask::causal()};
  const char* const mask_names[] = {"causal", "causal && window(2, 0)", "window(1, 1)", "lens {3, 5} && causal"};
  ScoreOptions<double> softcap;
  softcap.softcap = 0.8;
  ScoreOptions<double> alibi;
  alibi.alibi_slopes = {0.5, 0.25, 0.125, 0.0625};
  ScoreOptions<double> everything = alibi;
  everything.softcap = 1.2;
  everything.scale = 0.7;
  everything.bias = random_tensor<double>(1, 5, 5, 303);
  const ScoreOptions<double> options[] = {ScoreOptions<double>{}, softcap, alibi, everything};
  const char* const option_names[] = {"plain", "softcap 0.8", "ALiBi", "scale, softcap, ALiBi and a bias"};

  for (std::size_t m = 0; m < std::size(masks); ++m)
    for (std::size_t o = 0; o < std::size(options); ++o) {
      const std::string mask_name = mask_names[m], option_name = option_names[o];
      CAPTURE(mask_name, option_name);
      SmallLayer<double> layer(304);
      GroupedQueryAttention<double>& gqa = layer.gqa;
      gqa.set_score_options(options[o]);
      Tensor3<double> X = X0;
      const std::function<double()> loss = [&] { return attend_test::dot(dY, gqa(X, masks[m])); };
      loss();
      const Tensor3<double> dX = gqa.backward(dY);
      REQUIRE_THAT(dX, Near(attend_test::finite_difference(X, loss), attend_test::finite_difference_tolerance()));
      for (Linear<double>* linear : linears(gqa)) {
        const Matrix<double> dW = linear->weight_grad();
        const Vector<double> db = linear->bias_grad();
        REQUIRE_THAT(dW, Near(attend_test::finite_difference(linear->weight(), loss),
                              attend_test::finite_difference_tolerance()));
        REQUIRE_THAT(db, Near(attend_test::finite_difference(linear->bias(), loss),
                              attend_test::finite_difference_tolerance()));
      }
    }
}

// ---- 3. dropout ----------------------------------------------------------------------------------------------------

TEST_CASE("GroupedQueryAttention::backward with dropout agrees with finite differences of the same dropout pattern",
          "[grouped_query_attention][gradients][dropout]") {
  const Tensor3<double> X0 = random_tensor<double>(2, 5, 6, 311), dY = random_tensor<double>(2, 5, 6, 312);
  for (const Mask& mask : {Mask::causal(), Mask::causal() && Mask::window(2, 0), Mask()}) {
    SmallLayer<double> layer(313, true, 0.3);
    GroupedQueryAttention<double>& gqa = layer.gqa;
    REQUIRE(gqa.is_training());
    Tensor3<double> X = X0;
    // Each evaluation draws its pattern's seed from the reseeded generator: the same pattern every time.
    const std::function<double()> loss = [&] {
      gqa.generator().seed(314);
      return attend_test::dot(dY, gqa(X, mask));
    };
    loss();
    const Tensor3<double> dX = gqa.backward(dY);
    REQUIRE_THAT(dX, Near(attend_test::finite_difference(X, loss), attend_test::finite_difference_tolerance()));
    for (Linear<double>* linear : linears(gqa)) {
      const Matrix<double> dW = linear->weight_grad();
      const Vector<double> db = linear->bias_grad();
      REQUIRE_THAT(dW, Near(attend_test::finite_difference(linear->weight(), loss),
                            attend_test::finite_difference_tolerance()));
      REQUIRE_THAT(db, Near(attend_test::finite_difference(linear->bias(), loss),
                            attend_test::finite_difference_tolerance()));
    }
  }
}

TEMPLATE_TEST_CASE("GroupedQueryAttention's dropout: reproducible by seed, off in eval(), p = 0 is eval",
                   "[grouped_query_attention][dropout]", float, double) {
  const Tensor3<TestType> X = random_tensor<TestType>(2, 6, 6, 321);
  SmallLayer<TestType> layer(322, true, TestType(0.3));
  GroupedQueryAttention<TestType>& gqa = layer.gqa;
  REQUIRE(gqa.dropout() == TestType(0.3));

  gqa.generator().seed(7);
  const Tensor3<TestType> a = gqa(X);
  gqa.generator().seed(7);
  const Tensor3<TestType> b = gqa(X);
  CHECK(same_bits(a, b));
  const Tensor3<TestType> c = gqa(X);  // the generator moved on: another pattern
  CHECK_FALSE(same_bits(a, c));
  gqa.generator().seed(8);
  CHECK_FALSE(same_bits(a, gqa(X)));

  // The same seed reproduces the backward pass too.
  const Tensor3<TestType> dY = random_tensor<TestType>(2, 6, 6, 323);
  gqa.generator().seed(9);
  gqa(X);
  gqa.zero_grad();
  const Tensor3<TestType> dX1 = gqa.backward(dY);
  const std::vector<TestType> g1 = attend_test::gradients_of(gqa);
  gqa.generator().seed(9);
  gqa(X);
  gqa.zero_grad();
  const Tensor3<TestType> dX2 = gqa.backward(dY);
  CHECK(same_bits(dX1, dX2));
  CHECK(g1 == attend_test::gradients_of(gqa));

  // eval(): no dropout, whatever the generator.
  gqa.eval();
  gqa.generator().seed(7);
  const Tensor3<TestType> e1 = gqa(X);
  gqa.generator().seed(8);
  const Tensor3<TestType> e2 = gqa(X);
  CHECK(same_bits(e1, e2));
  CHECK_FALSE(same_bits(e1, a));
  CHECK(same_bits(e1, gqa.forward(X)));

  // p = 0 in training mode is eval(): the same weights (drawn from the same seed), the same bits.
  SmallLayer<TestType> plain(322, true, TestType(0));
  REQUIRE(same_bits(plain.gqa.W_q().weight(), gqa.W_q().weight()));
  REQUIRE(plain.gqa.is_training());
  CHECK(same_bits(plain.gqa(X), e1));
  const Tensor3<TestType> dX_train = plain.gqa.backward(dY);
  plain.gqa.eval();
  plain.gqa(X);
  CHECK(same_bits(plain.gqa.backward(dY), dX_train));

  // p = 1 is accepted (as by PyTorch and attend's other modules): every weight dropped, the output is o_proj's bias.
  SmallLayer<TestType> all(322, true, TestType(1));
  const Tensor3<TestType> y = all.gqa(X);
  bool bias_only = true;
  for (Index i = 0; i < y.size(); ++i)
    bias_only = bias_only && y.data()[i] == all.gqa.W_o().bias()(i % y.dimension(2));
  CHECK(bias_only);
  const Tensor3<TestType> dX_all = all.gqa.backward(dY);
  bool zero = true;
  for (Index i = 0; i < dX_all.size(); ++i) zero = zero && dX_all.data()[i] == TestType(0);
  CHECK(zero);
}

// ---- 4. the cached call's checks, and the others ------------------------------------------------------------------

TEMPLATE_TEST_CASE("GroupedQueryAttention's cached call: out-parameter overload, and calls that throw change nothing",
                   "[grouped_query_attention][kv_cache][bad_input]", float, double) {
  // hidden 8, 4 query heads of 4 over 2 key/value heads, biases, rotary.
  attend::Generator init(331);
  GroupedQueryAttention<TestType> gqa(8, 4, 2, 4, true, TestType(0), init);
  gqa.set_rotary(RotaryEmbedding<TestType>(4));
  gqa.eval();
  const Tensor3<TestType> prompt = random_tensor<TestType>(2, 3, 8, 332), next = random_tensor<TestType>(2, 1, 8, 333);
  const Mask mask = Mask::causal();

  SECTION("the out-parameter overload into a TensorMap3 gives the returning call's bits") {
    KVCache<TestType> c1(2, 2, 4, 6), c2(2, 2, 4, 6);
    const Tensor3<TestType> y1 = gqa(prompt, c1, mask);
    std::vector<TestType> buffer(2 * 3 * 8, TestType(-7));
    gqa(prompt, c2, mask, TensorMap3<TestType>(buffer.data(), 2, 3, 8));
    CHECK(std::memcmp(buffer.data(), y1.data(), buffer.size() * sizeof(TestType)) == 0);
    CHECK(same_held(c1, c2));
    // And into a Tensor3, for the next step.
    Tensor3<TestType> out(2, 1, 8);
    gqa(next, c2, mask, out);
    CHECK(same_bits(out, gqa(next, c1, mask)));
    CHECK(c1.size() == 4);
    CHECK(c2.size() == 4);
  }

  SECTION("a call that throws leaves the cache and the module as they were") {
    KVCache<TestType> cache(2, 2, 4, 5);
    gqa(prompt, cache, mask);
    REQUIRE(cache.size() == 3);
    const Snapshot<TestType> before(cache);
    KVCache<TestType> twin = cache;
    const Tensor3<TestType> expected_next = gqa(next, twin, mask);  // what the next step must give afterwards
    const Tensor3<TestType> expected_whole = gqa.forward(prompt, mask);

    // Caches of another batch, key/value head count, head_dim, or both (the same width).
    std::vector<KVCache<TestType>> others{KVCache<TestType>(1, 2, 4, 8), KVCache<TestType>(2, 1, 4, 8),
                                          KVCache<TestType>(2, 2, 2, 8), KVCache<TestType>(2, 4, 2, 8)};
    for (KVCache<TestType>& other : others) {
      CAPTURE(other.batch(), other.num_kv_heads(), other.head_dim());
      const std::string phrase = other.batch() != 2 ? "batch" : "key/value heads";
      require_invalid([&] { gqa(next, other, mask); }, {phrase});
      CHECK(other.size() == 0);
    }
    // Past the capacity: 3 held of 5, 3 more.
    require_invalid([&] { gqa(prompt, cache, mask); }, "cannot take 3 more");
    CHECK(before.same_as(cache));
    // X of the wrong width.
    require_invalid([&] { gqa(random_tensor<TestType>(2, 1, 7, 334), cache, mask); }, "features");
    CHECK(before.same_as(cache));
    // A mask of the wrong shape: 1 query over 4 keys, a keep tensor of 3 keys; lengths of another batch.
    Tensor3<bool> keep(1, 1, 3);
    keep.setConstant(true);
    require_invalid([&] { gqa(next, cache, Mask::keep(keep)); }, "keep tensor");
    CHECK(before.same_as(cache));
    require_invalid([&] { gqa(next, cache, Mask(ValidLens{1, 2, 3})); }, "");
    CHECK(before.same_as(cache));
    // A bias of the wrong shape in the score options (checked at the call: its shape depends on it).
    ScoreOptions<TestType> options;
    options.bias = Tensor3<TestType>(1, 1, 3);
    options.bias.setZero();
    gqa.set_score_options(options);
    require_invalid([&] { gqa(next, cache, mask); }, "bias");
    CHECK(before.same_as(cache));
    require_invalid([&] { gqa.forward(prompt, mask); }, "bias");
    gqa.set_score_options(ScoreOptions<TestType>{});
    // The out-parameter of the wrong shape.
    Tensor3<TestType> wrong_out(2, 2, 8);
    require_invalid([&] { gqa(next, cache, mask, wrong_out); }, "out");
    CHECK(before.same_as(cache));
    // Nothing changed: the next step and the whole-sequence output are as they would have been.
    CHECK(same_bits(gqa(next, cache, mask), expected_next));
    CHECK(Snapshot<TestType>(twin).same_as(cache));
    CHECK(same_bits(gqa.forward(prompt, mask), expected_whole));
  }

  SECTION("backward(): none recorded, dY of the wrong shape") {
    GroupedQueryAttention<TestType> fresh(8, 4, 2, 4, true);
    const Tensor3<TestType> dY = random_tensor<TestType>(2, 3, 8, 335);
    CHECK_THROWS_AS(fresh.backward(dY), std::logic_error);
    CHECK_THROWS_AS(gqa.backward(dY), std::logic_error);  // cached calls and forward() record nothing
    gqa.train();
    gqa(prompt, mask);
    require_invalid([&] { gqa.backward(random_tensor<TestType>(2, 3, 7, 336)); }, "dY");
    require_invalid([&] { gqa.backward(random_tensor<TestType>(2, 2, 8, 337)); }, "dY");
    require_invalid([&] { gqa(random_tensor<TestType>(2, 3, 7, 338), mask); }, "features");
    CHECK_NOTHROW(gqa.backward(dY));  // the failed call left the record alone
  }

  SECTION("constructor, set_rotary and set_score_options") {
    using G = GroupedQueryAttention<TestType>;
    require_invalid([] { G(8, 4, 3); }, "num_kv_heads");
    require_invalid([] { G(8, 4, 0); }, "num_kv_heads");
    require_invalid([] { G(8, 4, 8); }, "num_kv_heads");
    require_invalid([] { G(10, 4, 2); }, "must divide num_hiddens");
    require_invalid([] { G(8, 4, 2, -1); }, "head_dim");
    require_invalid([] { G(8, 0, 1); }, "num_heads");
    require_invalid([] { G(0, 4, 2); }, "num_hiddens");
    require_invalid([] { G(8, 4, 2, 0, false, TestType(-0.1)); }, "dropout");
    require_invalid([] { G(8, 4, 2, 0, false, TestType(1.5)); }, "dropout");
    CHECK_NOTHROW(G(10, 4, 2, 6));  // head_dim given: num_heads need not divide num_hiddens
    CHECK(G(10, 4, 2, 6).W_q().weight().rows() == 24);
    CHECK(G(8, 4, 2).head_dim() == 2);

    require_invalid([&] { gqa.set_rotary(RotaryEmbedding<TestType>(6)); }, "head_dim");
    CHECK(gqa.has_rotary());
    G no_rotary(8, 4, 2, 4);
    require_invalid([&] { no_rotary.set_rotary(RotaryEmbedding<TestType>(2)); }, "head_dim");
    CHECK_FALSE(no_rotary.has_rotary());

    ScoreOptions<TestType> alibi;
    alibi.alibi_slopes = {TestType(0.5), TestType(0.25), TestType(0.125)};  // 3 slopes, 4 heads
    require_invalid([&] { gqa.set_score_options(alibi); }, "alibi");
    CHECK(gqa.score_options().alibi_slopes.empty());
    alibi.alibi_slopes.push_back(TestType(0.0625));
    CHECK_NOTHROW(gqa.set_score_options(alibi));
    CHECK(gqa.score_options().alibi_slopes.size() == 4);
    require_invalid([] { Mask::window(-1, 0); }, "left");
  }
}

// ---- 5. allocation -------------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("GroupedQueryAttention's cached call allocates nothing from the second call of a shape on",
                   "[grouped_query_attention][kv_cache][allocation]", float, double) {
  ATTEND_TEST_START_COUNTING();
  struct Config {
    const char* name;
    Mask mask;
    bool options;
    Index steps;  // per call
  };
  const Config configs[] = {{"causal, one step a call", Mask::causal(), false, 1},
                            {"causal && window(63, 0), softcap and ALiBi, one step a call",
                             Mask::causal() && Mask::window(63, 0), true, 1},
                            {"causal, four steps a call", Mask::causal(), false, 4}};
  for (const Config& config : configs) {
    const std::string name = config.name;
    CAPTURE(name);
    attend::Generator init(341);
    GroupedQueryAttention<TestType> gqa(32, 4, 2, 8, true, TestType(0), init);
    gqa.set_rotary(RotaryEmbedding<TestType>(8));
    if (config.options) {
      ScoreOptions<TestType> options;
      options.softcap = TestType(5);
      options.alibi_slopes = {TestType(0.5), TestType(0.25), TestType(0.125), TestType(0.0625)};
      gqa.set_score_options(options);
    }
    gqa.eval();
    // A prompt, then steps through more than 1100 keys: past the decoding's key spans of 256 (detail/tuning.hpp),
    // where the cached call splits its keys, at 512, 768, 1024.
    const Index batch = 2, prompt_steps = 8, capacity = 1100 + 8;
    KVCache<TestType> cache(batch, 2, 8, capacity);
    gqa(random_tensor<TestType>(batch, prompt_steps, 32, 342), cache, config.mask);
    const Tensor3<TestType> X = random_tensor<TestType>(batch, config.steps, 32, 343);
    std::vector<TestType> buffer(static_cast<std::size_t>(batch * config.steps * 32));
    TensorMap3<TestType> out(buffer.data(), batch, config.steps, 32);
    gqa(X, cache, config.mask, out);  // the warm-up call of this shape

    std::vector<Index> allocating;  // the cache's size before each call that allocated
    long news = 0, mallocs = 0;
    while (cache.size() + config.steps <= capacity) {
      const Index keys_before = cache.size();
      alloc_counter::operator_news = 0;
      alloc_counter::mallocs = 0;
      alloc_counter::counting = true;
      gqa(X, cache, config.mask, out);
      alloc_counter::counting = false;
      if (alloc_counter::operator_news > 0 || alloc_counter::mallocs > 0) {
        allocating.push_back(keys_before);
        news += alloc_counter::operator_news;
        mallocs += alloc_counter::mallocs;
      }
    }
    std::string sizes;
    for (Index k : allocating) sizes += std::to_string(k) + " ";
    INFO("calls that allocated (cache size before the call): " << sizes << "; operator new " << news << ", malloc "
                                                               << mallocs);
    // Below 2 * 256 keys the cached call never splits its keys: no call there may allocate. Past it, the split
    // plan's number of spans grows with the cache, and the contract (no allocation from the second call of a shape
    // on, the cache growing a step a call) still holds: the capacity is known from the start.
    CHECK((allocating.empty() || allocating.front() + config.steps >= 512));
    CHECK(allocating.empty());
    // The counter counts: a Tensor3 and a std::vector allocate.
    alloc_counter::operator_news = 0;
    alloc_counter::mallocs = 0;
    alloc_counter::counting = true;
    {
      const std::vector<int> v(10);
      alloc_counter::escape = v.data();
    }
    {
      const Tensor3<TestType> t(2, 3, 4);
      alloc_counter::escape = t.data();
    }
    alloc_counter::counting = false;
    CHECK(alloc_counter::operator_news >= 1);
#ifdef ATTEND_TEST_COUNTS_MALLOC
    CHECK(alloc_counter::mallocs >= 2);
#endif
  }
}

// ---- 6. maps of the caller's memory --------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("GroupedQueryAttention reads ConstTensorMap3 inputs as it reads Tensor3s, bit for bit",
                   "[grouped_query_attention][views]", float, double) {
  attend::Generator init(351);
  GroupedQueryAttention<TestType> gqa(8, 4, 1, 4, true, TestType(0), init);
  gqa.set_rotary(RotaryEmbedding<TestType>(4, 500.0, true));
  ScoreOptions<TestType> options;
  options.softcap = TestType(3);
  gqa.set_score_options(options);
  const Tensor3<TestType> X = random_tensor<TestType>(2, 5, 8, 352), dY = random_tensor<TestType>(2, 5, 8, 353);
  const std::vector<TestType> memory(X.data(), X.data() + X.size());
  const ConstTensorMap3<TestType> map(memory.data(), 2, 5, 8);
  const Mask mask = Mask::causal() && Mask::window(2, 0);

  const Tensor3<TestType> y = gqa(X, mask);
  const Tensor3<TestType> dX = gqa.backward(dY);
  CHECK(same_bits(gqa(map, mask), y));
  CHECK(same_bits(gqa.backward(dY), dX));
  CHECK(same_bits(gqa.forward(map, mask), gqa.forward(X, mask)));
  CHECK(same_bits(gqa.forward(map, mask), y));
  std::vector<TestType> out(memory.size());
  gqa.forward(map, mask, TensorMap3<TestType>(out.data(), 2, 5, 8));
  CHECK(std::memcmp(out.data(), y.data(), out.size() * sizeof(TestType)) == 0);

  KVCache<TestType> c1(2, 1, 4, 5), c2(2, 1, 4, 5);
  CHECK(same_bits(gqa(map, c1, mask), gqa(X, c2, mask)));
  CHECK(same_held(c1, c2));
}

// ---- 7. state_dict and parameters ----------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("GroupedQueryAttention's state_dict() and parameters(): names, order and shapes",
                   "[grouped_query_attention][state_dict]", float, double) {
  const bool bias = GENERATE(false, true);
  CAPTURE(bias);
  // hidden 12, 6 query heads of 5 over 2 key/value heads: every shape distinct.
  GroupedQueryAttention<TestType> gqa(12, 6, 2, 5, bias);
  struct Expected {
    std::string name;
    std::vector<Index> shape;
  };
  std::vector<Expected> expected;
  const std::vector<std::tuple<std::string, Index, Index>> projections_shapes{
      {"W_q", 30, 12}, {"W_k", 10, 12}, {"W_v", 10, 12}, {"W_o", 12, 30}};
  for (const auto& [proj, out, in] : projections_shapes) {
    expected.push_back({proj + ".weight", {out, in}});
    if (bias) expected.push_back({proj + ".bias", {out}});
  }

  const auto params = gqa.parameters();
  REQUIRE(params.size() == (bias ? 8u : 4u));
  for (std::size_t i = 0; i < params.size(); ++i) {
    CAPTURE(i);
    CHECK(params[i].name == expected[i].name);
    Index size = 1;
    for (Index d : expected[i].shape) size *= d;
    CHECK(params[i].size == size);
  }
  CHECK(params[0].value == gqa.W_q().weight().data());
  CHECK(params[0].grad == gqa.W_q().weight_grad().data());

  const auto dict = gqa.state_dict();
  REQUIRE(dict.size() == expected.size());
  for (const Expected& e : expected) {
    CAPTURE(e.name);
    REQUIRE(dict.count(e.name) == 1);
    CHECK(dict.at(e.name).shape == e.shape);
  }
  const auto& w_o = dict.at("W_o.weight");
  CHECK(std::equal(w_o.values.begin(), w_o.values.end(), gqa.W_o().weight().data()));

  // And back: a state_dict loads into another layer, which then computes the same.
  GroupedQueryAttention<TestType> other(12, 6, 2, 5, bias);
  other.load_state_dict(dict);
  const Tensor3<TestType> X = random_tensor<TestType>(1, 4, 12, 361);
  CHECK(same_bits(other.forward(X), gqa.forward(X)));
}
