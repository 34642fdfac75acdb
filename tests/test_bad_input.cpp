// Bad input at every public entry point, in one table. Each row is a call that must throw, and the phrases its
// message must hold: the function, the argument, the value it expected and the value it got (API.md, "bad input":
// std::invalid_argument naming the argument, the expected and the actual value; a malformed or unwritable file
// throws attend::SafetensorsError instead, a std::runtime_error, see safetensors.hpp).
//
// Rows on a module also check what the throw leaves behind. The module has made one successful call first; after
// the throw
//   1. it is exactly as it was: every parameter (visit_parameters, shape and values bit for bit), the attention
//      weights of that earlier call, P, and its dropout generator (the next draw of a copy) — a call that throws at
//      the door draws no random number;
//   2. it keeps working: after the row's repair (if the row broke a parameter through its reference), a valid call
//      gives, bit for bit, what the same call gives on an untouched copy that made the same earlier call.
// Modules run in training mode with dropout 0.5 where they have dropout, so that 1 and 2 see the generator.
// Rows on a constructor pass it a Generator of their own and check that the throw drew nothing from it: a failed
// construction must not shift the parameters of the modules built after it (manual_seed reproducibility).
//
// Every expected phrase comes from the row's own arguments (the shape or value it passes, the size it was built with).
#include <attend/attend.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <support/named_tensors.hpp>
#include <support/random_tensor.hpp>
#include <support/temp_files.hpp>
#include <type_traits>
#include <utility>
#include <vector>

using attend::AdditiveAttention;
using attend::CNNEncoder;
using attend::Conv1d;
using attend::DotProductAttention;
using attend::FullyMasked;
using attend::Generator;
using attend::Index;
using attend::Linear;
using attend::Mask;
using attend::Matrix;
using attend::MultiHeadAttention;
using attend::NamedTensor;
using attend::PositionalEncoding;
using attend::RNN;
using attend::RNNEncoder;
using attend::SelfAttentionEncoder;
using attend::StateDict;
using attend::Tensor3;
using attend::ValidLens;
using attend::Vector;
using attend_test::counting_tensor;
using attend_test::random_tensor;
using attend_test::same;
using attend_test::temp_dir;

namespace {

using Shape = std::vector<Index>;
using Phrases = std::vector<std::string>;

// ---- the row ------------------------------------------------------------------------------------------------------

enum class Throws { invalid_argument, safetensors_error };

struct Row {
  std::string name;
  std::function<void()> call;  // must throw
  Phrases phrases;             // each must appear in what(): the argument, the expected and the actual value
  Throws kind = Throws::invalid_argument;
  std::function<void()> setup;  // run first; must not throw
  std::function<void()> after;  // run after the throw: CHECKs on what it left behind
};

Row plain(std::string name, Phrases phrases, std::function<void()> call, Throws kind = Throws::invalid_argument) {
  Row row;
  row.name = std::move(name);
  row.phrases = std::move(phrases);
  row.call = std::move(call);
  row.kind = kind;
  return row;
}

// ---- what a module holds ------------------------------------------------------------------------------------------

// Every piece of a module's state, flattened: parameters, attention weights, P, the dropout generator's next draw.
template <class Scalar>
struct Fingerprint {
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  std::vector<std::vector<Scalar>> values;
  std::vector<std::uint64_t> draws;  // the next draw of a copy of each generator
  std::vector<bool> training;
  std::vector<int> paths;  // path(), for the attention modules that choose one

  void add(const std::string& name, Shape shape, const Scalar* data, Index size) {
    names.push_back(name);
    shapes.push_back(std::move(shape));
    values.emplace_back(data, data + size);
  }
  // Exact equality: no NaN is ever stored in these modules' state here.
  bool operator==(const Fingerprint& other) const {
    return names == other.names && shapes == other.shapes && values == other.values && draws == other.draws &&
           training == other.training && paths == other.paths;
  }
};

template <class Scalar>
Shape dims(const Matrix<Scalar>& M) {
  return {M.rows(), M.cols()};
}
template <class Scalar>
Shape dims(const Vector<Scalar>& v) {
  return {v.size()};
}
template <class Scalar>
Shape dims(const Tensor3<Scalar>& X) {
  return {X.dimension(0), X.dimension(1), X.dimension(2)};
}

// A visitor that does nothing: what the detection below hands to visit_parameters.
struct NullVisit {
  template <class Parameter>
  void operator()(const std::string&, const Parameter&, const Shape&) const {}
};

template <class M, class = void>
struct has_visit : std::false_type {};
template <class M>
struct has_visit<M, std::void_t<decltype(std::declval<const M&>().visit_parameters(std::declval<NullVisit&>()))>>
    : std::true_type {};
template <class M, class = void>
struct has_weights : std::false_type {};
template <class M>
struct has_weights<M, std::void_t<decltype(std::declval<const M&>().attention_weights())>> : std::true_type {};
template <class M, class = void>
struct has_generator : std::false_type {};
template <class M>
struct has_generator<M, std::void_t<decltype(std::declval<M&>().generator())>> : std::true_type {};
template <class M, class = void>
struct has_path : std::false_type {};
template <class M>
struct has_path<M, std::void_t<decltype(std::declval<const M&>().path())>> : std::true_type {};
template <class M, class = void>
struct has_P : std::false_type {};
template <class M>
struct has_P<M, std::void_t<decltype(std::declval<const M&>().P())>> : std::true_type {};

template <class Scalar, class M>
void add_module(Fingerprint<Scalar>& f, M& module, const std::string& prefix) {
  if constexpr (has_visit<M>::value) {
    const M& reader = module;
    reader.visit_parameters([&](const std::string& name, const auto& parameter, const Shape&) {
      f.add(prefix + name, dims(parameter), parameter.data(), parameter.size());
    });
  }
  if constexpr (has_weights<M>::value) {
    const auto& weights = module.attention_weights();
    f.add(prefix + "attention_weights()", dims(weights), weights.data(), weights.size());
  }
  if constexpr (has_P<M>::value) f.add(prefix + "P()", dims(module.P()), module.P().data(), module.P().size());
  if constexpr (has_generator<M>::value) {
    Generator copy = module.generator();
    f.draws.push_back(copy.next());
  }
  if constexpr (std::is_base_of<attend::Module, M>::value) f.training.push_back(module.is_training());
  if constexpr (has_path<M>::value) f.paths.push_back(static_cast<int>(module.path()));
}

template <class Scalar, class M>
Fingerprint<Scalar> fingerprint(M& module) {
  Fingerprint<Scalar> f;
  add_module(f, module, "");
  return f;
}
template <class Scalar>
Fingerprint<Scalar> fingerprint(SelfAttentionEncoder<Scalar>& encoder) {
  Fingerprint<Scalar> f;
  const auto& P = encoder.positional_encoding().P();
  f.add("P()", dims(P), P.data(), P.size());
  for (Index l = 0; l < encoder.num_layers(); ++l)
    add_module(f, encoder.attention(l), "layer " + std::to_string(l) + ".");
  return f;
}
template <class Scalar>
Fingerprint<Scalar> fingerprint(RNNEncoder<Scalar>& encoder) {
  Fingerprint<Scalar> f;
  for (Index l = 0; l < encoder.num_layers(); ++l) add_module(f, encoder.rnn(l), "layer " + std::to_string(l) + ".");
  return f;
}
template <class Scalar>
Fingerprint<Scalar> fingerprint(CNNEncoder<Scalar>& encoder) {
  Fingerprint<Scalar> f;
  for (Index l = 0; l < encoder.num_layers(); ++l) add_module(f, encoder.conv(l), "layer " + std::to_string(l) + ".");
  return f;
}

// A row on a module: make() builds it (twice: the one the row calls, and an untouched copy), good() is a valid call,
// bad() the one that must throw; break_it() runs before bad() and repair() after it (a parameter resized through its
// reference, then put back).
template <class Scalar, class M>
Row module_row(std::string name, Phrases phrases, std::function<M()> make, std::function<Tensor3<Scalar>(M&)> good,
               std::function<void(M&)> bad, std::function<void(M&)> break_it = {},
               std::function<void(M&)> repair = {}) {
  struct State {
    std::optional<M> module, untouched;
    Fingerprint<Scalar> before;
  };
  auto state = std::make_shared<State>();
  Row row;
  row.name = std::move(name);
  row.phrases = std::move(phrases);
  row.setup = [=] {
    state->module.emplace(make());
    state->untouched.emplace(make());
    (void)good(*state->module);  // a successful call: its attention weights must survive the throw
    (void)good(*state->untouched);
    if (break_it) break_it(*state->module);
    state->before = fingerprint<Scalar>(*state->module);
  };
  row.call = [=] { bad(*state->module); };
  row.after = [=] {
    {
      INFO("after the throw the module is exactly as it was (parameters, attention weights, generator)");
      CHECK(fingerprint<Scalar>(*state->module) == state->before);
    }
    if (repair) repair(*state->module);
    const Tensor3<Scalar> got = good(*state->module);
    const Tensor3<Scalar> expected = good(*state->untouched);
    INFO("then a valid call gives what it gives on an untouched copy, and leaves the same state");
    CHECK(same(got, expected));
    CHECK(fingerprint<Scalar>(*state->module) == fingerprint<Scalar>(*state->untouched));
  };
  return row;
}

// A row on a constructor: build(generator) must throw, and draw nothing from the generator.
Row ctor_row(std::string name, Phrases phrases, std::function<void(Generator&)> build) {
  constexpr std::uint64_t seed = 2024;
  auto generator = std::make_shared<Generator>(seed);
  Row row;
  row.name = std::move(name);
  row.phrases = std::move(phrases);
  row.call = [=] { build(*generator); };
  row.after = [=] {
    Generator fresh(seed);
    INFO("a constructor that throws draws nothing from the generator it was given");
    CHECK(generator->next() == fresh.next());
  };
  return row;
}

// ---- inputs -------------------------------------------------------------------------------------------------------

// `value`, hidden from the optimiser: a negative size written as a constant is folded by GCC into the allocation that
// the throw prevents, and -Walloc-size-larger-than (an error here) fires on that path.
template <class V>
V opaque(V value) {
  volatile V hidden = value;
  return hidden;
}

template <class Scalar>
Tensor3<Scalar> X(Index batch, Index steps, Index features, std::uint64_t seed = 1) {
  return random_tensor<Scalar>(batch, steps, features, seed);
}

Tensor3<bool> keep_all(Index batch, Index queries, Index keys) {
  Tensor3<bool> keep(batch, queries, keys);
  keep.setConstant(true);
  return keep;
}

Matrix<Index> lens_matrix(Index rows, Index cols, Index value) { return Matrix<Index>::Constant(rows, cols, value); }

// An nn.MultiheadAttention(4, heads, bias=True) state dict: packed in_proj (12, 4), out_proj (4, 4).
template <class Scalar>
StateDict<Scalar> torch_mha() {
  return {{"in_proj_weight", counting_tensor<Scalar>({12, 4})},
          {"in_proj_bias", counting_tensor<Scalar>({12})},
          {"out_proj.weight", counting_tensor<Scalar>({4, 4})},
          {"out_proj.bias", counting_tensor<Scalar>({4})}};
}

// ---- the table ----------------------------------------------------------------------------------------------------

template <class T>
std::vector<Row> table() {
  std::vector<Row> rows;
  const T nan = std::numeric_limits<T>::quiet_NaN();

  // -- masked_softmax, ValidLens, Mask --
  rows.push_back(plain("masked_softmax: per-batch valid_lens of the wrong batch",
                       {"masked_softmax", "valid_lens", "(2,)", "(3,)"}, [] {
                         (void)attend::masked_softmax(X<T>(2, 3, 4), ValidLens{1, 2, 3});
                       }));
  rows.push_back(plain("masked_softmax: per-query valid_lens of the wrong number of queries",
                       {"masked_softmax", "valid_lens", "(2, 3)", "(2, 2)"}, [] {
                         (void)attend::masked_softmax(X<T>(2, 3, 4), ValidLens::per_query(lens_matrix(2, 2, 1)));
                       }));
  rows.push_back(plain(
      "masked_softmax: per-query valid_lens of the wrong batch", {"masked_softmax", "valid_lens", "(2, 3)", "(1, 3)"},
      [] { (void)attend::masked_softmax(X<T>(2, 3, 4), ValidLens::per_query(lens_matrix(1, 3, 1))); }));
  rows.push_back(plain("masked_softmax: keep tensor with the wrong number of keys",
                       {"masked_softmax", "keep tensor", "(2, 3, 4)", "(2, 3, 5)"},
                       [] { (void)attend::masked_softmax(X<T>(2, 3, 4), Mask::keep(keep_all(2, 3, 5))); }));
  rows.push_back(plain("masked_softmax: keep tensor with the wrong batch",
                       {"masked_softmax", "keep tensor", "(2, 3, 4)", "(3, 3, 4)"},
                       [] { (void)attend::masked_softmax(X<T>(2, 3, 4), Mask::keep(keep_all(3, 3, 4))); }));
  rows.push_back(plain("masked_softmax: keep tensor of batch 2 for scores of batch 1",
                       {"masked_softmax", "keep tensor", "(1, 3, 4)", "(2, 3, 4)"},
                       [] { (void)attend::masked_softmax(X<T>(1, 3, 4), Mask::keep(keep_all(2, 3, 4))); }));
  rows.push_back(plain("masked_softmax: causal && a keep tensor of the wrong queries",
                       {"masked_softmax", "keep tensor", "(2, 3, 4)", "(2, 4, 4)"}, [] {
                         (void)attend::masked_softmax(X<T>(2, 3, 4), Mask::causal() && Mask::keep(keep_all(2, 4, 4)));
                       }));
  rows.push_back(plain("ValidLens: a negative length in braces", {"ValidLens::per_batch", "lengths", ">= 0", "-2"}, [] {
    (void)ValidLens{3, -2};
  }));
  rows.push_back(plain("ValidLens::per_batch: a negative length", {"ValidLens::per_batch", "lengths", ">= 0", "-1"},
                       [] { (void)ValidLens::per_batch({-1}); }));
  rows.push_back(
      plain("ValidLens::per_query: a negative length", {"ValidLens::per_query", "lengths", ">= 0", "-3"}, [] {
        Matrix<Index> lens = lens_matrix(2, 2, 1);
        lens(1, 0) = -3;
        (void)ValidLens::per_query(lens);
      }));
  rows.push_back(plain("ValidLens::length: a batch row out of range", {"ValidLens::length", "b", "[0, 2)", "2"}, [] {
    (void)ValidLens{3, 2}.length(2, 0);
  }));
  rows.push_back(plain("ValidLens::length: a query out of range", {"ValidLens::length", "q", "[0, 3)", "3"},
                       [] { (void)ValidLens::per_query(lens_matrix(2, 3, 1)).length(1, 3); }));
  rows.push_back(plain("Mask &&: valid lengths of different batches", {"Mask &&", "valid_lens", "(2,)", "(3,)"}, [] {
    (void)(Mask(ValidLens{1, 2}) && Mask(ValidLens{1, 2, 3}));
  }));
  rows.push_back(
      plain("Mask &&: per-query valid lengths of different queries", {"Mask &&", "valid_lens", "(2, 3)", "(2, 4)"}, [] {
        (void)(Mask(ValidLens::per_query(lens_matrix(2, 3, 1))) && Mask(ValidLens::per_query(lens_matrix(2, 4, 1))));
      }));
  rows.push_back(plain("Mask &&: keep tensors of different keys", {"Mask &&", "keep tensors", "(1, 2, 3)", "(1, 2, 4)"},
                       [] { (void)(Mask::keep(keep_all(1, 2, 3)) && Mask::keep(keep_all(1, 2, 4))); }));
  rows.push_back(plain("Mask &&: keep tensors of batches 2 and 3",
                       {"Mask &&", "keep tensors", "(2, 2, 3)", "(3, 2, 3)"},
                       [] { (void)(Mask::keep(keep_all(2, 2, 3)) && Mask::keep(keep_all(3, 2, 3))); }));
  rows.push_back(plain("Mask &&: two different fully-masked rules",
                       {"Mask &&", "rules", "FullyMasked::uniform", "FullyMasked::zero"}, [] {
                         (void)(Mask::causal().when_fully_masked(FullyMasked::uniform) &&
                                Mask::causal().when_fully_masked(FullyMasked::zero));
                       }));
  rows.push_back(plain("Mask::keeps: a key out of range", {"Mask::keeps", "j", "[0, 4)", "4"},
                       [] { (void)Mask::causal().keeps(0, 1, 4, 3, 4); }));
  rows.push_back(plain("Mask::keeps: a query out of range", {"Mask::keeps", "q", "[0, 3)", "-1"},
                       [] { (void)Mask::causal().keeps(0, -1, 0, 3, 4); }));
  rows.push_back(plain("Mask::keep_row: a batch row past the keep tensor", {"Mask::keep_row", "b", "[0, 2)", "2"},
                       [] { (void)Mask::keep(keep_all(2, 3, 4)).keep_row(2, 0); }));

  // -- transpose_qkv, transpose_output --
  rows.push_back(plain("transpose_qkv: num_heads 0", {"transpose_qkv", "num_heads", "at least 1", "got 0"},
                       [] { (void)attend::transpose_qkv(X<T>(2, 3, 4), 0); }));
  rows.push_back(plain("transpose_qkv: num_heads -2", {"transpose_qkv", "num_heads", "at least 1", "got -2"},
                       [] { (void)attend::transpose_qkv(X<T>(2, 3, 4), -2); }));
  rows.push_back(plain("transpose_qkv: 3 heads do not divide 4 features",
                       {"transpose_qkv", "features (4)", "num_heads (3)", "(2, 3, 4)"},
                       [] { (void)attend::transpose_qkv(X<T>(2, 3, 4), 3); }));
  rows.push_back(plain("transpose_output: num_heads 0", {"transpose_output", "num_heads", "at least 1", "got 0"},
                       [] { (void)attend::transpose_output(X<T>(4, 3, 2), 0); }));
  rows.push_back(plain("transpose_output: num_heads -1", {"transpose_output", "num_heads", "at least 1", "got -1"},
                       [] { (void)attend::transpose_output(X<T>(4, 3, 2), -1); }));
  rows.push_back(plain("transpose_output: 3 heads do not divide 4 rows",
                       {"transpose_output", "first axis (4)", "num_heads (3)", "(4, 3, 2)"},
                       [] { (void)attend::transpose_output(X<T>(4, 3, 2), 3); }));

  // -- threads --
  rows.push_back(plain("set_num_threads: 0", {"set_num_threads", "threads", "at least 1", "got 0"},
                       [] { attend::set_num_threads(opaque(0)); }));

  // -- dropout, positional_encoding_table --
  rows.push_back(plain("dropout: p -0.25", {"dropout", "[0, 1]", "-0.25"}, [] {
    Generator g(1);
    (void)attend::dropout(X<T>(1, 2, 3), T(-0.25), g);
  }));
  rows.push_back(plain("dropout: p 1.5", {"dropout", "[0, 1]", "1.5"}, [] {
    Generator g(1);
    (void)attend::dropout(X<T>(1, 2, 3), T(1.5), g);
  }));
  rows.push_back(plain("dropout: p NaN", {"dropout", "[0, 1]", "nan"}, [nan] {
    Generator g(1);
    (void)attend::dropout(X<T>(1, 2, 3), nan, g);
  }));
  rows.push_back(plain("positional_encoding_table: max_len 0",
                       {"positional_encoding_table", "max_len", "at least 1", "got 0"},
                       [] { (void)attend::positional_encoding_table<T>(0, 4); }));
  rows.push_back(plain("positional_encoding_table: num_hiddens -1",
                       {"positional_encoding_table", "num_hiddens", "at least 1", "got -1"},
                       [] { (void)attend::positional_encoding_table<T>(4, opaque<Index>(-1)); }));

  // -- Linear --
  using Lin = Linear<T>;
  const auto make_linear = [] {
    Generator g(3);
    return Lin(4, 3, true, g);
  };
  const auto run_linear = [](Lin& m) { return m(X<T>(2, 3, 4)); };
  const auto weight_of = [](Lin& m) { return m.weight(); };
  rows.push_back(ctor_row("Linear: in_features 0", {"Linear", "in_features", "at least 1", "got 0"},
                          [](Generator& g) { Lin m(0, 3, true, g); }));
  rows.push_back(ctor_row("Linear: out_features -1", {"Linear", "out_features", "at least 1", "got -1"},
                          [](Generator& g) { Lin m(4, opaque<Index>(-1), true, g); }));
  rows.push_back(module_row<T, Lin>("Linear: X with 5 features, in_features 4",
                                    {"Linear", "X", "4 features", "(2, 3, 5)"}, make_linear, run_linear,
                                    [](Lin& m) { (void)m(X<T>(2, 3, 5)); }));
  {
    auto saved = std::make_shared<Matrix<T>>();
    rows.push_back(module_row<T, Lin>(
        "Linear: weight() transposed through its reference", {"Linear", "weight", "(3, 4)", "got (4, 3)"}, make_linear,
        run_linear, [](Lin& m) { (void)m(X<T>(2, 3, 4)); },
        [saved, weight_of](Lin& m) {
          *saved = weight_of(m);
          m.weight() = saved->transpose();
        },
        [saved](Lin& m) { m.weight() = *saved; }));
  }
  {
    auto saved = std::make_shared<Vector<T>>();
    rows.push_back(module_row<T, Lin>(
        "Linear: bias() resized to 5", {"Linear", "bias", "(3,)", "got (5,)"}, make_linear, run_linear,
        [](Lin& m) { (void)m(X<T>(2, 3, 4)); },
        [saved](Lin& m) {
          *saved = m.bias();
          m.bias() = Vector<T>::Ones(5);
        },
        [saved](Lin& m) { m.bias() = *saved; }));
  }
  rows.push_back(module_row<T, Lin>(
      "Linear: a bias given to a layer without one", {"Linear", "bias", "(0,)", "got (3,)"},
      [] {
        Generator g(3);
        return Lin(4, 3, false, g);
      },
      run_linear, [](Lin& m) { (void)m(X<T>(2, 3, 4)); }, [](Lin& m) { m.bias() = Vector<T>::Ones(3); },
      [](Lin& m) { m.bias().resize(0); }));
  {
    auto saved = std::make_shared<Matrix<T>>();
    rows.push_back(module_row<T, Lin>(
        "Linear::state_dict: weight() resized", {"Linear::state_dict", "weight", "(3, 4)", "got (3, 5)"}, make_linear,
        run_linear, [](Lin& m) { (void)m.state_dict(); },
        [saved](Lin& m) {
          *saved = m.weight();
          m.weight().resize(3, 5);
          m.weight().setOnes();
        },
        [saved](Lin& m) { m.weight() = *saved; }));
  }
  rows.push_back(module_row<T, Lin>("Linear::apply: X with 5 columns",
                                    {"Linear::apply", "X", "4 columns", "got (6, 5)"}, make_linear, run_linear,
                                    [](Lin& m) {
                                      Matrix<T> in = Matrix<T>::Ones(6, 5), out(6, 3);
                                      m.apply(in, out);
                                    }));
  rows.push_back(module_row<T, Lin>("Linear::apply: Y of the wrong shape",
                                    {"Linear::apply", "Y", "(6, 3)", "got (6, 4)"}, make_linear, run_linear,
                                    [](Lin& m) {
                                      Matrix<T> in = Matrix<T>::Ones(6, 4), out(6, 4);
                                      m.apply(in, out);
                                    }));
  rows.push_back(module_row<T, Lin>("Linear::load_state_dict: a missing bias",
                                    {"Linear::load_state_dict", "missing", "\"bias\"", "(3)"}, make_linear, run_linear,
                                    [](Lin& m) {
                                      m.load_state_dict({{"weight", counting_tensor<T>({3, 4})}});
                                    }));
  rows.push_back(module_row<T, Lin>("Linear::load_state_dict: weight of the wrong shape",
                                    {"Linear::load_state_dict", "\"weight\"", "(3, 4)", "got (4, 3)"}, make_linear,
                                    run_linear, [](Lin& m) {
                                      m.load_state_dict(
                                          {{"weight", counting_tensor<T>({4, 3})}, {"bias", counting_tensor<T>({3})}});
                                    }));
  rows.push_back(module_row<T, Lin>(
      "Linear::load_state_dict: an unexpected name",
      {"Linear::load_state_dict", "unexpected", "\"weights\"", "\"weight\", \"bias\""}, make_linear, run_linear,
      [](Lin& m) {
        m.load_state_dict({{"weight", counting_tensor<T>({3, 4})},
                           {"bias", counting_tensor<T>({3})},
                           {"weights", counting_tensor<T>({3, 4})}});
      }));
  rows.push_back(module_row<T, Lin>("Linear::load_state_dict: fewer values than the shape holds",
                                    {"Linear::load_state_dict", "\"bias\"", "(3)", "2 values"}, make_linear, run_linear,
                                    [](Lin& m) {
                                      NamedTensor<T> bias{{3}, {T(1), T(2)}};
                                      m.load_state_dict({{"weight", counting_tensor<T>({3, 4})}, {"bias", bias}});
                                    }));

  // -- DotProductAttention --
  using DPA = DotProductAttention<T>;
  const auto make_dpa = [] {
    Generator g(4);
    return DPA(T(0.5), g);
  };
  const auto run_dpa = [](DPA& m) { return m(X<T>(2, 3, 4, 1), X<T>(2, 5, 4, 2), X<T>(2, 5, 6, 3), ValidLens{2, 4}); };
  rows.push_back(ctor_row("DotProductAttention: dropout -0.5", {"DotProductAttention", "dropout", "[0, 1]", "-0.5"},
                          [](Generator& g) { DPA m(T(-0.5), g); }));
  rows.push_back(ctor_row("DotProductAttention: dropout 1.5", {"DotProductAttention", "dropout", "[0, 1]", "1.5"},
                          [](Generator& g) { DPA m(T(1.5), g); }));
  rows.push_back(ctor_row("DotProductAttention: dropout NaN", {"DotProductAttention", "dropout", "[0, 1]", "nan"},
                          [nan](Generator& g) { DPA m(nan, g); }));
  const auto dpa_row = [&](std::string name, Phrases phrases, std::function<void(DPA&)> bad) {
    rows.push_back(module_row<T, DPA>(std::move(name), std::move(phrases), make_dpa, run_dpa, std::move(bad)));
  };
  dpa_row("DotProductAttention: queries and keys of different batches",
          {"DotProductAttention", "queries", "keys", "batch size", "(2, 3, 4)", "(3, 5, 4)"},
          [](DPA& m) { (void)m(X<T>(2, 3, 4), X<T>(3, 5, 4), X<T>(3, 5, 6)); });
  dpa_row("DotProductAttention: keys and values of different batches",
          {"DotProductAttention", "keys", "values", "batch size", "(2, 5, 4)", "(1, 5, 6)"},
          [](DPA& m) { (void)m(X<T>(2, 3, 4), X<T>(2, 5, 4), X<T>(1, 5, 6)); });
  dpa_row("DotProductAttention: queries and keys of different features",
          {"DotProductAttention", "queries", "keys", "feature size", "(2, 3, 4)", "(2, 5, 3)"},
          [](DPA& m) { (void)m(X<T>(2, 3, 4), X<T>(2, 5, 3), X<T>(2, 5, 6)); });
  dpa_row("DotProductAttention: keys and values of different steps",
          {"DotProductAttention", "keys", "values", "number of steps", "(2, 5, 4)", "(2, 4, 6)"},
          [](DPA& m) { (void)m(X<T>(2, 3, 4), X<T>(2, 5, 4), X<T>(2, 4, 6)); });
  dpa_row("DotProductAttention: queries and keys of 0 features",
          {"DotProductAttention", "queries", "at least 1 feature", "(2, 3, 0)"},
          [](DPA& m) { (void)m(X<T>(2, 3, 0), X<T>(2, 5, 0), X<T>(2, 5, 6)); });
  dpa_row("DotProductAttention: valid_lens of the wrong batch", {"DotProductAttention", "valid_lens", "(2,)", "(3,)"},
          [](DPA& m) {
            (void)m(X<T>(2, 3, 4), X<T>(2, 5, 4), X<T>(2, 5, 6), ValidLens{1, 2, 3});
          });
  dpa_row("DotProductAttention: per-query valid_lens of the wrong queries",
          {"DotProductAttention", "valid_lens", "(2, 3)", "(2, 5)"}, [](DPA& m) {
            (void)m(X<T>(2, 3, 4), X<T>(2, 5, 4), X<T>(2, 5, 6), ValidLens::per_query(lens_matrix(2, 5, 1)));
          });
  dpa_row("DotProductAttention: keep tensor (queries and keys swapped)",
          {"DotProductAttention", "keep tensor", "(2, 3, 5)", "(2, 5, 3)"},
          [](DPA& m) { (void)m(X<T>(2, 3, 4), X<T>(2, 5, 4), X<T>(2, 5, 6), Mask::keep(keep_all(2, 5, 3))); });
  dpa_row("DotProductAttention: causal && keep tensor of the wrong keys",
          {"DotProductAttention", "keep tensor", "(2, 3, 5)", "(1, 3, 3)"}, [](DPA& m) {
            (void)m(X<T>(2, 3, 4), X<T>(2, 5, 4), X<T>(2, 5, 6), Mask::causal() && Mask::keep(keep_all(1, 3, 3)));
          });
  dpa_row("DotProductAttention::forward: keys and values of different steps",
          {"DotProductAttention::forward", "keys", "values", "number of steps", "(2, 5, 4)", "(2, 6, 6)"},
          [](DPA& m) { (void)m.forward(X<T>(2, 3, 4), X<T>(2, 5, 4), X<T>(2, 6, 6)); });
  dpa_row("DotProductAttention::forward: valid_lens of the wrong batch, a workspace given",
          {"DotProductAttention::forward", "valid_lens", "(2,)", "(1,)"}, [](DPA& m) {
            attend::AttentionWorkspace<T> workspace;
            (void)m.forward(X<T>(2, 3, 4), X<T>(2, 5, 4), X<T>(2, 5, 6), ValidLens{1}, workspace);
          });
  dpa_row("DotProductAttention::set_path: AttentionPath(7)",
          {"DotProductAttention::set_path", "path", "automatic, direct or tiled", "AttentionPath(7)"},
          [](DPA& m) { m.set_path(static_cast<attend::AttentionPath>(opaque(7))); });
  dpa_row("DotProductAttention::load_state_dict: any tensor",
          {"DotProductAttention::load_state_dict", "unexpected", "\"W_q.weight\"", "no parameters"}, [](DPA& m) {
            m.load_state_dict({{"W_q.weight", counting_tensor<T>({2, 2})}});
          });

  // -- AdditiveAttention --
  using Add = AdditiveAttention<T>;
  const auto make_add = [] {
    Generator g(5);
    return Add(3, 4, 5, T(0.5), g);
  };
  const auto run_add = [](Add& m) { return m(X<T>(2, 3, 4, 1), X<T>(2, 5, 3, 2), X<T>(2, 5, 6, 3), ValidLens{2, 4}); };
  rows.push_back(ctor_row("AdditiveAttention: key_size 0", {"AdditiveAttention", "key_size", "at least 1", "got 0"},
                          [](Generator& g) { Add m(0, 4, 5, T(0), g); }));
  rows.push_back(ctor_row("AdditiveAttention: query_size -1",
                          {"AdditiveAttention", "query_size", "at least 1", "got -1"},
                          [](Generator& g) { Add m(3, opaque<Index>(-1), 5, T(0), g); }));
  rows.push_back(ctor_row("AdditiveAttention: num_hiddens 0",
                          {"AdditiveAttention", "num_hiddens", "at least 1", "got 0"},
                          [](Generator& g) { Add m(3, 4, 0, T(0), g); }));
  rows.push_back(ctor_row("AdditiveAttention: dropout 2", {"AdditiveAttention", "dropout", "[0, 1]", "got 2"},
                          [](Generator& g) { Add m(3, 4, 5, T(2), g); }));
  rows.push_back(ctor_row("AdditiveAttention: dropout NaN", {"AdditiveAttention", "dropout", "[0, 1]", "nan"},
                          [nan](Generator& g) { Add m(3, 4, 5, nan, g); }));
  const auto add_row = [&](std::string name, Phrases phrases, std::function<void(Add&)> bad,
                           std::function<void(Add&)> break_it = {}, std::function<void(Add&)> repair = {}) {
    rows.push_back(module_row<T, Add>(std::move(name), std::move(phrases), make_add, run_add, std::move(bad),
                                      std::move(break_it), std::move(repair)));
  };
  add_row("AdditiveAttention: queries with 3 features, query_size 4",
          {"AdditiveAttention", "queries", "4 features", "(2, 3, 3)"},
          [](Add& m) { (void)m(X<T>(2, 3, 3), X<T>(2, 5, 3), X<T>(2, 5, 6)); });
  add_row("AdditiveAttention: keys with 4 features, key_size 3",
          {"AdditiveAttention", "keys", "3 features", "(2, 5, 4)"},
          [](Add& m) { (void)m(X<T>(2, 3, 4), X<T>(2, 5, 4), X<T>(2, 5, 6)); });
  add_row("AdditiveAttention: queries and keys of different batches",
          {"AdditiveAttention", "queries", "keys", "batch size", "(2, 3, 4)", "(1, 5, 3)"},
          [](Add& m) { (void)m(X<T>(2, 3, 4), X<T>(1, 5, 3), X<T>(1, 5, 6)); });
  add_row("AdditiveAttention: keys and values of different steps",
          {"AdditiveAttention", "keys", "values", "number of steps", "(2, 5, 3)", "(2, 6, 6)"},
          [](Add& m) { (void)m(X<T>(2, 3, 4), X<T>(2, 5, 3), X<T>(2, 6, 6)); });
  add_row("AdditiveAttention: valid_lens of the wrong batch", {"AdditiveAttention", "valid_lens", "(2,)", "(1,)"},
          [](Add& m) { (void)m(X<T>(2, 3, 4), X<T>(2, 5, 3), X<T>(2, 5, 6), ValidLens{1}); });
  add_row("AdditiveAttention: keep tensor of the wrong keys",
          {"AdditiveAttention", "keep tensor", "(2, 3, 5)", "(2, 3, 4)"},
          [](Add& m) { (void)m(X<T>(2, 3, 4), X<T>(2, 5, 3), X<T>(2, 5, 6), Mask::keep(keep_all(2, 3, 4))); });
  {
    auto saved = std::make_shared<Matrix<T>>();
    add_row(
        "AdditiveAttention: W_q().weight() resized", {"AdditiveAttention W_q", "weight", "(5, 4)", "got (5, 3)"},
        [](Add& m) { (void)m(X<T>(2, 3, 4), X<T>(2, 5, 3), X<T>(2, 5, 6)); },
        [saved](Add& m) {
          *saved = m.W_q().weight();
          m.W_q().weight() = Matrix<T>::Ones(5, 3);
        },
        [saved](Add& m) { m.W_q().weight() = *saved; });
  }
  {
    auto saved = std::make_shared<Matrix<T>>();
    add_row(
        "AdditiveAttention: w_v().weight() transposed", {"AdditiveAttention w_v", "weight", "(1, 5)", "got (5, 1)"},
        [](Add& m) { (void)m(X<T>(2, 3, 4), X<T>(2, 5, 3), X<T>(2, 5, 6)); },
        [saved](Add& m) {
          *saved = m.w_v().weight();
          m.w_v().weight() = saved->transpose();
        },
        [saved](Add& m) { m.w_v().weight() = *saved; });
  }
  add_row(
      "AdditiveAttention::load_state_dict: W_q.weight of the wrong shape",
      {"AdditiveAttention::load_state_dict", "\"W_q.weight\"", "(5, 4)", "got (5, 3)"}, [](Add& m) {
        m.load_state_dict({{"W_k.weight", counting_tensor<T>({5, 3})},
                           {"W_q.weight", counting_tensor<T>({5, 3})},
                           {"w_v.weight", counting_tensor<T>({1, 5})}});
      });
  add_row("AdditiveAttention::load_state_dict: w_v.weight missing",
          {"AdditiveAttention::load_state_dict", "missing", "\"w_v.weight\"", "(1, 5)"}, [](Add& m) {
            m.load_state_dict({{"W_k.weight", counting_tensor<T>({5, 3})}, {"W_q.weight", counting_tensor<T>({5, 4})}});
          });

  // -- MultiHeadAttention --
  using MHA = MultiHeadAttention<T>;
  const auto make_mha = [] {
    Generator g(6);
    return MHA(3, 4, 5, 6, 2, T(0.5), true, g);
  };
  const auto run_mha = [](MHA& m) { return m(X<T>(2, 3, 4, 1), X<T>(2, 5, 3, 2), X<T>(2, 5, 5, 3), ValidLens{2, 4}); };
  rows.push_back(ctor_row("MultiHeadAttention: 4 heads do not divide num_hiddens 6",
                          {"MultiHeadAttention", "num_hiddens (6)", "num_heads (4)"},
                          [](Generator& g) { MHA m(3, 4, 5, 6, 4, T(0), false, g); }));
  rows.push_back(ctor_row("MultiHeadAttention: num_heads 0", {"MultiHeadAttention", "num_heads", "at least 1", "got 0"},
                          [](Generator& g) { MHA m(3, 4, 5, 6, 0, T(0), false, g); }));
  rows.push_back(ctor_row("MultiHeadAttention: num_heads -2",
                          {"MultiHeadAttention", "num_heads", "at least 1", "got -2"},
                          [](Generator& g) { MHA m(3, 4, 5, 6, opaque<Index>(-2), T(0), false, g); }));
  rows.push_back(ctor_row("MultiHeadAttention: num_hiddens 0",
                          {"MultiHeadAttention", "num_hiddens", "at least 1", "got 0"},
                          [](Generator& g) { MHA m(3, 4, 5, 0, 1, T(0), false, g); }));
  rows.push_back(ctor_row("MultiHeadAttention: query_size 0",
                          {"MultiHeadAttention", "query_size", "at least 1", "got 0"},
                          [](Generator& g) { MHA m(3, 0, 5, 6, 2, T(0), false, g); }));
  rows.push_back(ctor_row("MultiHeadAttention: key_size 0", {"MultiHeadAttention", "key_size", "at least 1", "got 0"},
                          [](Generator& g) { MHA m(0, 4, 5, 6, 2, T(0), false, g); }));
  rows.push_back(ctor_row("MultiHeadAttention: value_size 0",
                          {"MultiHeadAttention", "value_size", "at least 1", "got 0"},
                          [](Generator& g) { MHA m(3, 4, 0, 6, 2, T(0), false, g); }));
  rows.push_back(ctor_row("MultiHeadAttention: dropout -0.1", {"MultiHeadAttention", "dropout", "[0, 1]", "-0.1"},
                          [](Generator& g) { MHA m(3, 4, 5, 6, 2, T(-0.1), false, g); }));
  rows.push_back(ctor_row("MultiHeadAttention: dropout 1.01", {"MultiHeadAttention", "dropout", "[0, 1]", "1.01"},
                          [](Generator& g) { MHA m(3, 4, 5, 6, 2, T(1.01), false, g); }));
  rows.push_back(ctor_row("MultiHeadAttention: dropout NaN", {"MultiHeadAttention", "dropout", "[0, 1]", "nan"},
                          [nan](Generator& g) { MHA m(3, 4, 5, 6, 2, nan, false, g); }));
  const auto mha_row = [&](std::string name, Phrases phrases, std::function<void(MHA&)> bad,
                           std::function<void(MHA&)> break_it = {}, std::function<void(MHA&)> repair = {}) {
    rows.push_back(module_row<T, MHA>(std::move(name), std::move(phrases), make_mha, run_mha, std::move(bad),
                                      std::move(break_it), std::move(repair)));
  };
  mha_row("MultiHeadAttention: queries and keys of different batches",
          {"MultiHeadAttention", "queries", "keys", "batch size", "(2, 3, 4)", "(3, 5, 3)"},
          [](MHA& m) { (void)m(X<T>(2, 3, 4), X<T>(3, 5, 3), X<T>(3, 5, 5)); });
  mha_row("MultiHeadAttention: keys and values of different batches",
          {"MultiHeadAttention", "keys", "values", "batch size", "(2, 5, 3)", "(1, 5, 5)"},
          [](MHA& m) { (void)m(X<T>(2, 3, 4), X<T>(2, 5, 3), X<T>(1, 5, 5)); });
  mha_row("MultiHeadAttention: keys and values of different steps",
          {"MultiHeadAttention", "keys", "values", "number of steps", "(2, 5, 3)", "(2, 4, 5)"},
          [](MHA& m) { (void)m(X<T>(2, 3, 4), X<T>(2, 5, 3), X<T>(2, 4, 5)); });
  mha_row("MultiHeadAttention: queries with 6 features, query_size 4",
          {"MultiHeadAttention", "queries", "4 features", "(2, 3, 6)"},
          [](MHA& m) { (void)m(X<T>(2, 3, 6), X<T>(2, 5, 3), X<T>(2, 5, 5)); });
  mha_row("MultiHeadAttention: keys with 0 features, key_size 3",
          {"MultiHeadAttention", "keys", "3 features", "(2, 5, 0)"},
          [](MHA& m) { (void)m(X<T>(2, 3, 4), X<T>(2, 5, 0), X<T>(2, 5, 5)); });
  mha_row("MultiHeadAttention: values with 3 features, value_size 5",
          {"MultiHeadAttention", "values", "5 features", "(2, 5, 3)"},
          [](MHA& m) { (void)m(X<T>(2, 3, 4), X<T>(2, 5, 3), X<T>(2, 5, 3)); });
  mha_row("MultiHeadAttention: valid_lens of the wrong batch", {"MultiHeadAttention", "valid_lens", "(2,)", "(4,)"},
          [](MHA& m) {
            (void)m(X<T>(2, 3, 4), X<T>(2, 5, 3), X<T>(2, 5, 5), ValidLens{1, 2, 3, 4});
          });
  mha_row("MultiHeadAttention: per-query valid_lens of batch * num_heads rows (d2l's repeated layout)",
          {"MultiHeadAttention", "valid_lens", "(2, 3)", "(4, 3)"}, [](MHA& m) {
            (void)m(X<T>(2, 3, 4), X<T>(2, 5, 3), X<T>(2, 5, 5), ValidLens::per_query(lens_matrix(4, 3, 2)));
          });
  mha_row("MultiHeadAttention: keep tensor of the wrong batch",
          {"MultiHeadAttention", "keep tensor", "(2, 3, 5)", "(4, 3, 5)"},
          [](MHA& m) { (void)m(X<T>(2, 3, 4), X<T>(2, 5, 3), X<T>(2, 5, 5), Mask::keep(keep_all(4, 3, 5))); });
  {
    auto saved = std::make_shared<Matrix<T>>();
    mha_row(
        "MultiHeadAttention: W_q().weight() resized", {"MultiHeadAttention W_q", "weight", "(6, 4)", "got (6, 5)"},
        [](MHA& m) { (void)m(X<T>(2, 3, 4), X<T>(2, 5, 3), X<T>(2, 5, 5)); },
        [saved](MHA& m) {
          *saved = m.W_q().weight();
          m.W_q().weight() = Matrix<T>::Ones(6, 5);
        },
        [saved](MHA& m) { m.W_q().weight() = *saved; });
  }
  {
    auto saved = std::make_shared<Matrix<T>>();
    mha_row(
        "MultiHeadAttention: W_q().weight() emptied", {"MultiHeadAttention W_q", "weight", "(6, 4)", "got (0, 0)"},
        [](MHA& m) { (void)m(X<T>(2, 3, 4), X<T>(2, 5, 3), X<T>(2, 5, 5)); },
        [saved](MHA& m) {
          *saved = m.W_q().weight();
          m.W_q().weight().resize(0, 0);
        },
        [saved](MHA& m) { m.W_q().weight() = *saved; });
  }
  {
    auto saved = std::make_shared<Vector<T>>();
    mha_row(
        "MultiHeadAttention: W_o().bias() resized", {"MultiHeadAttention W_o", "bias", "(6,)", "got (7,)"},
        [](MHA& m) { (void)m(X<T>(2, 3, 4), X<T>(2, 5, 3), X<T>(2, 5, 5)); },
        [saved](MHA& m) {
          *saved = m.W_o().bias();
          m.W_o().bias() = Vector<T>::Ones(7);
        },
        [saved](MHA& m) { m.W_o().bias() = *saved; });
  }
  {
    auto saved = std::make_shared<Matrix<T>>();
    mha_row(
        "MultiHeadAttention::state_dict: W_v().weight() resized",
        {"MultiHeadAttention::state_dict", "\"W_v.weight\"", "(6, 5)", "got (5, 5)"},
        [](MHA& m) { (void)m.state_dict(); },
        [saved](MHA& m) {
          *saved = m.W_v().weight();
          m.W_v().weight() = Matrix<T>::Ones(5, 5);
        },
        [saved](MHA& m) { m.W_v().weight() = *saved; });
  }
  mha_row("MultiHeadAttention::forward: values with 3 features, value_size 5",
          {"MultiHeadAttention::forward", "values", "5 features", "(2, 5, 3)"},
          [](MHA& m) { (void)m.forward(X<T>(2, 3, 4), X<T>(2, 5, 3), X<T>(2, 5, 3)); });
  mha_row("MultiHeadAttention::forward: per-query valid_lens of the wrong queries, a workspace given",
          {"MultiHeadAttention::forward", "valid_lens", "(2, 3)", "(2, 5)"}, [](MHA& m) {
            attend::AttentionWorkspace<T> workspace;
            (void)m.forward(X<T>(2, 3, 4), X<T>(2, 5, 3), X<T>(2, 5, 5), ValidLens::per_query(lens_matrix(2, 5, 1)),
                            workspace);
          });
  {
    auto saved = std::make_shared<Matrix<T>>();
    mha_row(
        "MultiHeadAttention::forward: W_k().weight() resized",
        {"MultiHeadAttention W_k", "weight", "(6, 3)", "got (2, 3)"},
        [](MHA& m) { (void)m.forward(X<T>(2, 3, 4), X<T>(2, 5, 3), X<T>(2, 5, 5)); },
        [saved](MHA& m) {
          *saved = m.W_k().weight();
          m.W_k().weight() = Matrix<T>::Ones(2, 3);
        },
        [saved](MHA& m) { m.W_k().weight() = *saved; });
  }
  mha_row("MultiHeadAttention::set_path: AttentionPath(-1)",
          {"MultiHeadAttention::set_path", "path", "automatic, direct or tiled", "AttentionPath(-1)"},
          [](MHA& m) { m.set_path(static_cast<attend::AttentionPath>(opaque(-1))); });
  const auto mha_dict = [] {
    StateDict<T> d;
    for (const char* p : {"W_q", "W_k", "W_v", "W_o"}) d[std::string(p) + ".bias"] = counting_tensor<T>({6});
    d["W_q.weight"] = counting_tensor<T>({6, 4});
    d["W_k.weight"] = counting_tensor<T>({6, 3});
    d["W_v.weight"] = counting_tensor<T>({6, 5});
    d["W_o.weight"] = counting_tensor<T>({6, 6});
    return d;
  };
  mha_row("MultiHeadAttention::load_state_dict: W_k.weight of the wrong shape",
          {"MultiHeadAttention::load_state_dict", "\"W_k.weight\"", "(6, 3)", "got (3, 6)"}, [mha_dict](MHA& m) {
            auto d = mha_dict();
            d["W_k.weight"] = counting_tensor<T>({3, 6});
            m.load_state_dict(d);
          });
  mha_row("MultiHeadAttention::load_state_dict: W_o.bias missing",
          {"MultiHeadAttention::load_state_dict", "missing", "\"W_o.bias\"", "(6)"}, [mha_dict](MHA& m) {
            auto d = mha_dict();
            d.erase("W_o.bias");
            m.load_state_dict(d);
          });
  mha_row("MultiHeadAttention::load_state_dict: PyTorch's names",
          {"MultiHeadAttention::load_state_dict", "missing", "\"W_q.weight\"", "(6, 4)"},
          [](MHA& m) { m.load_state_dict(torch_mha<T>()); });
  mha_row("MultiHeadAttention::load_state_dict: one name too many",
          {"MultiHeadAttention::load_state_dict", "unexpected", "\"W_x.weight\"", "\"W_q.weight\""},
          [mha_dict](MHA& m) {
            auto d = mha_dict();
            d["W_x.weight"] = counting_tensor<T>({6, 6});
            m.load_state_dict(d);
          });

  // -- PositionalEncoding --
  using PE = PositionalEncoding<T>;
  const auto make_pe = [] {
    Generator g(7);
    return PE(6, T(0.5), 8, g);
  };
  const auto run_pe = [](PE& m) { return m(X<T>(2, 5, 6)); };
  rows.push_back(ctor_row("PositionalEncoding: num_hiddens 0",
                          {"PositionalEncoding", "num_hiddens", "at least 1", "got 0"},
                          [](Generator& g) { PE m(0, T(0), 8, g); }));
  rows.push_back(ctor_row("PositionalEncoding: max_len 0", {"PositionalEncoding", "max_len", "at least 1", "got 0"},
                          [](Generator& g) { PE m(6, T(0), 0, g); }));
  rows.push_back(ctor_row("PositionalEncoding: dropout -1", {"PositionalEncoding", "dropout", "[0, 1]", "got -1"},
                          [](Generator& g) { PE m(6, T(-1), 8, g); }));
  rows.push_back(ctor_row("PositionalEncoding: dropout NaN", {"PositionalEncoding", "dropout", "[0, 1]", "nan"},
                          [nan](Generator& g) { PE m(6, nan, 8, g); }));
  rows.push_back(module_row<T, PE>("PositionalEncoding: 9 steps, max_len 8",
                                   {"PositionalEncoding", "X", "9 steps", "max_len (8)"}, make_pe, run_pe,
                                   [](PE& m) { (void)m(X<T>(2, 9, 6)); }));
  rows.push_back(module_row<T, PE>("PositionalEncoding: X with 5 features, num_hiddens 6",
                                   {"PositionalEncoding", "X", "6 features", "(2, 5, 5)"}, make_pe, run_pe,
                                   [](PE& m) { (void)m(X<T>(2, 5, 5)); }));
  rows.push_back(module_row<T, PE>("PositionalEncoding::load_state_dict: P",
                                   {"PositionalEncoding::load_state_dict", "unexpected", "\"P\"", "no parameters"},
                                   make_pe, run_pe, [](PE& m) {
                                     m.load_state_dict({{"P", counting_tensor<T>({8, 6})}});
                                   }));

  // -- RNN --
  using Rnn = RNN<T>;
  const auto make_rnn = [] {
    Generator g(8);
    return Rnn(4, 3, g);
  };
  const auto run_rnn = [](Rnn& m) { return m(X<T>(2, 3, 4)); };
  rows.push_back(ctor_row("RNN: input_size 0", {"RNN", "input_size", "at least 1", "got 0"},
                          [](Generator& g) { Rnn m(0, 3, g); }));
  rows.push_back(ctor_row("RNN: hidden_size -4", {"RNN", "hidden_size", "at least 1", "got -4"},
                          [](Generator& g) { Rnn m(4, opaque<Index>(-4), g); }));
  const auto rnn_row = [&](std::string name, Phrases phrases, std::function<void(Rnn&)> bad,
                           std::function<void(Rnn&)> break_it = {}, std::function<void(Rnn&)> repair = {}) {
    rows.push_back(module_row<T, Rnn>(std::move(name), std::move(phrases), make_rnn, run_rnn, std::move(bad),
                                      std::move(break_it), std::move(repair)));
  };
  rnn_row("RNN: X with 3 features, input_size 4", {"RNN", "X", "4 features", "(2, 3, 3)"},
          [](Rnn& m) { (void)m(X<T>(2, 3, 3)); });
  {
    auto saved = std::make_shared<Matrix<T>>();
    rnn_row(
        "RNN: weight_ih() transposed", {"RNN", "weight_ih", "(3, 4)", "got (4, 3)"},
        [](Rnn& m) { (void)m(X<T>(2, 3, 4)); },
        [saved](Rnn& m) {
          *saved = m.weight_ih();
          m.weight_ih() = saved->transpose();
        },
        [saved](Rnn& m) { m.weight_ih() = *saved; });
  }
  {
    auto saved = std::make_shared<Matrix<T>>();
    rnn_row(
        "RNN: weight_hh() resized", {"RNN", "weight_hh", "(3, 3)", "got (3, 4)"},
        [](Rnn& m) { (void)m(X<T>(2, 3, 4)); },
        [saved](Rnn& m) {
          *saved = m.weight_hh();
          m.weight_hh() = Matrix<T>::Ones(3, 4);
        },
        [saved](Rnn& m) { m.weight_hh() = *saved; });
  }
  {
    auto saved = std::make_shared<Vector<T>>();
    rnn_row(
        "RNN: bias_hh() resized", {"RNN", "bias_hh", "(3,)", "got (2,)"}, [](Rnn& m) { (void)m(X<T>(2, 3, 4)); },
        [saved](Rnn& m) {
          *saved = m.bias_hh();
          m.bias_hh() = Vector<T>::Ones(2);
        },
        [saved](Rnn& m) { m.bias_hh() = *saved; });
  }
  rnn_row("RNN::multiply_adds: batch -1", {"RNN::multiply_adds", "batch", "at least 0", "got -1"},
          [](Rnn& m) { (void)m.multiply_adds(-1, 3); });
  rnn_row("RNN::multiply_adds: steps -2", {"RNN::multiply_adds", "steps", "at least 0", "got -2"},
          [](Rnn& m) { (void)m.multiply_adds(2, -2); });
  rnn_row("RNN::load_state_dict: nn.RNN's names without _l0",
          {"RNN::load_state_dict", "missing", "\"weight_ih_l0\"", "(3, 4)"}, [](Rnn& m) {
            m.load_state_dict({{"weight_ih", counting_tensor<T>({3, 4})},
                               {"weight_hh", counting_tensor<T>({3, 3})},
                               {"bias_ih", counting_tensor<T>({3})},
                               {"bias_hh", counting_tensor<T>({3})}});
          });
  rnn_row("RNN::load_state_dict: bias_ih_l0 of the wrong shape",
          {"RNN::load_state_dict", "\"bias_ih_l0\"", "(3)", "got (4)"}, [](Rnn& m) {
            m.load_state_dict({{"weight_ih_l0", counting_tensor<T>({3, 4})},
                               {"weight_hh_l0", counting_tensor<T>({3, 3})},
                               {"bias_ih_l0", counting_tensor<T>({4})},
                               {"bias_hh_l0", counting_tensor<T>({3})}});
          });

  // -- Conv1d --
  using Conv = Conv1d<T>;
  const auto make_conv = [] {
    Generator g(9);
    return Conv(4, 3, 3, true, g);
  };
  const auto run_conv = [](Conv& m) { return m(X<T>(2, 5, 4)); };
  rows.push_back(ctor_row("Conv1d: kernel_size 0", {"Conv1d", "kernel_size", "at least 1", "got 0"},
                          [](Generator& g) { Conv m(4, 3, 0, true, g); }));
  rows.push_back(ctor_row("Conv1d: in_channels 0", {"Conv1d", "in_channels", "at least 1", "got 0"},
                          [](Generator& g) { Conv m(0, 3, 3, true, g); }));
  rows.push_back(ctor_row("Conv1d: out_channels -3", {"Conv1d", "out_channels", "at least 1", "got -3"},
                          [](Generator& g) { Conv m(4, opaque<Index>(-3), 3, true, g); }));
  const auto conv_row = [&](std::string name, Phrases phrases, std::function<void(Conv&)> bad,
                            std::function<void(Conv&)> break_it = {}, std::function<void(Conv&)> repair = {}) {
    rows.push_back(module_row<T, Conv>(std::move(name), std::move(phrases), make_conv, run_conv, std::move(bad),
                                       std::move(break_it), std::move(repair)));
  };
  conv_row("Conv1d: X with 3 channels, in_channels 4", {"Conv1d", "X", "4 features", "(2, 5, 3)"},
           [](Conv& m) { (void)m(X<T>(2, 5, 3)); });
  {
    auto saved = std::make_shared<Tensor3<T>>();
    conv_row(
        "Conv1d: weight() resized to another kernel size", {"Conv1d", "weight", "(3, 4, 3)", "got (3, 4, 5)"},
        [](Conv& m) { (void)m(X<T>(2, 5, 4)); },
        [saved](Conv& m) {
          *saved = m.weight();
          m.weight().resize(3, 4, 5);
          m.weight().setConstant(T(1));
        },
        [saved](Conv& m) { m.weight() = *saved; });
  }
  {
    auto saved = std::make_shared<Vector<T>>();
    conv_row(
        "Conv1d: bias() emptied", {"Conv1d", "bias", "(3,)", "got (0,)"}, [](Conv& m) { (void)m(X<T>(2, 5, 4)); },
        [saved](Conv& m) {
          *saved = m.bias();
          m.bias().resize(0);
        },
        [saved](Conv& m) { m.bias() = *saved; });
  }
  conv_row("Conv1d::multiply_adds: steps -1", {"Conv1d::multiply_adds", "steps", "at least 0", "got -1"},
           [](Conv& m) { (void)m.multiply_adds(1, -1); });
  conv_row("Conv1d::load_state_dict: weight of rank 2",
           {"Conv1d::load_state_dict", "\"weight\"", "(3, 4, 3)", "got (3, 12)"}, [](Conv& m) {
             m.load_state_dict({{"weight", counting_tensor<T>({3, 12})}, {"bias", counting_tensor<T>({3})}});
           });

  // -- state dicts and safetensors (the error paths test_safetensors.cpp does not take) --
  rows.push_back(plain("copy_into: a vector of another size", {"to_vector", "\"b\"", "(4)", "got (3)"}, [] {
    Vector<T> b = Vector<T>::Zero(4);
    attend::copy_into(StateDict<T>{{"b", counting_tensor<T>({3})}}, "b", b);
  }));
  rows.push_back(
      plain("copy_into: a Tensor3 of another shape", {"to_tensor3", "\"w\"", "(2, 3, 4)", "got (2, 4, 3)"}, [] {
        Tensor3<T> w(2, 3, 4);
        attend::copy_into(StateDict<T>{{"w", counting_tensor<T>({2, 4, 3})}}, "w", w);
      }));
  rows.push_back(plain("to_scalar: a missing name", {"to_scalar", "no tensor", "\"s\"", "\"a\""}, [] {
    (void)attend::to_scalar(StateDict<T>{{"a", counting_tensor<T>({})}}, "s");
  }));
  rows.push_back(
      plain("to_tensor3: fewer values than the shape holds", {"to_tensor3", "\"X\"", "(1, 2, 3)", "5 values"}, [] {
        NamedTensor<T> t = counting_tensor<T>({1, 2, 3});
        t.values.pop_back();
        (void)attend::to_tensor3(t, "X");
      }));
  rows.push_back(plain("to_vector: a negative dimension", {"to_vector", "\"b\"", "(-1)", "0 values"}, [] {
    (void)attend::to_vector(NamedTensor<T>{{-1}, {}}, "b");
  }));
  {
    const std::string path = (temp_dir() / "missing.safetensors").string();
    rows.push_back(plain(
        "read_safetensors_header: a missing file", {"read_safetensors_header: " + path, "cannot open the file"},
        [path] { (void)attend::read_safetensors_header(path); }, Throws::safetensors_error));
  }
  rows.push_back(plain(
      "load_safetensors: an empty path", {"load_safetensors: : ", "cannot open the file"},
      [] { (void)attend::load_safetensors<T>(""); }, Throws::safetensors_error));
  {
    const std::string path = temp_dir().string();
    rows.push_back(plain(
        "save_safetensors: a path that is a directory",
        {"save_safetensors: " + path, "cannot open the file for writing"},
        [path] {
          attend::save_safetensors<T>(path, {{"w", counting_tensor<T>({2})}});
        },
        Throws::safetensors_error));
  }
  rows.push_back(
      plain("save_safetensors: a metadata key that is not UTF-8", {"save_safetensors", "metadata", "valid UTF-8"}, [] {
        const std::string path = (temp_dir() / "bad_key.safetensors").string();
        attend::save_safetensors<T>(path, {{"w", counting_tensor<T>({2})}}, {{"k\xff", "v"}});
      }));

  // -- from_torch --
  const auto from_torch = [](StateDict<T> d, Index heads = 2) {
    (void)attend::multi_head_attention_from_torch<T>(d, heads);
  };
  rows.push_back(plain("multi_head_attention_from_torch: num_heads 0",
                       {"multi_head_attention_from_torch", "num_heads", "at least 1", "got 0"},
                       [from_torch] { from_torch(torch_mha<T>(), 0); }));
  rows.push_back(plain("multi_head_attention_from_torch: dropout 1.5",
                       {"multi_head_attention_from_torch", "dropout", "[0, 1]", "1.5"},
                       [] { (void)attend::multi_head_attention_from_torch<T>(torch_mha<T>(), 2, T(1.5)); }));
  rows.push_back(plain("multi_head_attention_from_torch: dropout NaN",
                       {"multi_head_attention_from_torch", "dropout", "[0, 1]", "nan"},
                       [nan] { (void)attend::multi_head_attention_from_torch<T>(torch_mha<T>(), 2, nan); }));
  rows.push_back(plain("multi_head_attention_from_torch: 3 heads do not divide embed_dim 4",
                       {"multi_head_attention_from_torch", "embed_dim (4)", "num_heads (3)"},
                       [from_torch] { from_torch(torch_mha<T>(), 3); }));
  rows.push_back(plain("multi_head_attention_from_torch: bias_k present",
                       {"multi_head_attention_from_torch", "\"bias_k\"", "add_bias_kv"}, [from_torch] {
                         auto d = torch_mha<T>();
                         d["bias_k"] = counting_tensor<T>({1, 1, 4});
                         from_torch(d);
                       }));
  rows.push_back(plain(
      "multi_head_attention_from_torch: in_proj_weight (12, 3)",
      {"multi_head_attention_from_torch", "\"in_proj_weight\"", "(3 * embed_dim, embed_dim)", "(12, 3)"}, [from_torch] {
        auto d = torch_mha<T>();
        d["in_proj_weight"] = counting_tensor<T>({12, 3});
        from_torch(d);
      }));
  rows.push_back(plain("multi_head_attention_from_torch: in_proj_weight with fewer values than its shape",
                       {"multi_head_attention_from_torch", "\"in_proj_weight\"", "(12, 4)", "47 values"}, [from_torch] {
                         auto d = torch_mha<T>();
                         d["in_proj_weight"].values.pop_back();
                         from_torch(d);
                       }));
  rows.push_back(plain("multi_head_attention_from_torch: q_proj_weight without k_proj_weight",
                       {"multi_head_attention_from_torch", "\"q_proj_weight\"", "\"k_proj_weight\" is missing"},
                       [from_torch] {
                         from_torch({{"q_proj_weight", counting_tensor<T>({4, 4})},
                                     {"v_proj_weight", counting_tensor<T>({4, 5})},
                                     {"out_proj.weight", counting_tensor<T>({4, 4})}});
                       }));
  rows.push_back(plain("multi_head_attention_from_torch: k_proj_weight of the wrong embed_dim",
                       {"multi_head_attention_from_torch", "\"k_proj_weight\"", "(4, kdim)", "(3, 6)"}, [from_torch] {
                         from_torch({{"q_proj_weight", counting_tensor<T>({4, 4})},
                                     {"k_proj_weight", counting_tensor<T>({3, 6})},
                                     {"v_proj_weight", counting_tensor<T>({4, 5})},
                                     {"out_proj.weight", counting_tensor<T>({4, 4})}});
                       }));
  rows.push_back(plain("multi_head_attention_from_torch: no projection at all",
                       {"multi_head_attention_from_torch", "missing \"in_proj_weight\"", "\"out_proj.weight\""},
                       [from_torch] {
                         from_torch({{"out_proj.weight", counting_tensor<T>({4, 4})}});
                       }));
  rows.push_back(plain("multi_head_attention_from_torch: out_proj.weight missing",
                       {"multi_head_attention_from_torch", "missing \"out_proj.weight\"", "(4, 4)"}, [from_torch] {
                         auto d = torch_mha<T>();
                         d.erase("out_proj.weight");
                         from_torch(d);
                       }));
  rows.push_back(plain("multi_head_attention_from_torch: out_proj.weight (4, 5)",
                       {"multi_head_attention_from_torch", "\"out_proj.weight\"", "(4, 4)", "got (4, 5)"},
                       [from_torch] {
                         auto d = torch_mha<T>();
                         d["out_proj.weight"] = counting_tensor<T>({4, 5});
                         from_torch(d);
                       }));
  rows.push_back(plain("multi_head_attention_from_torch: in_proj_bias without out_proj.bias",
                       {"multi_head_attention_from_torch", "\"in_proj_bias\" is present", "\"out_proj.bias\" is not"},
                       [from_torch] {
                         auto d = torch_mha<T>();
                         d.erase("out_proj.bias");
                         from_torch(d);
                       }));
  rows.push_back(plain("multi_head_attention_from_torch: in_proj_bias (4)",
                       {"multi_head_attention_from_torch", "\"in_proj_bias\"", "(12)", "got (4)"}, [from_torch] {
                         auto d = torch_mha<T>();
                         d["in_proj_bias"] = counting_tensor<T>({4});
                         from_torch(d);
                       }));
  rows.push_back(
      plain("multi_head_attention_from_torch: an encoder prefix",
            {"multi_head_attention_from_torch", "unexpected tensor", "\"encoder.out_proj.bias\"", "\"out_proj.bias\""},
            [from_torch] {
              auto d = torch_mha<T>();
              d["encoder.out_proj.bias"] = counting_tensor<T>({4});
              from_torch(d);
            }));
  rows.push_back(
      plain("key_padding_mask_from_torch: num_queries -1",
            {"key_padding_mask_from_torch", "num_queries", "at least 0", "got -1"},
            [] { (void)attend::key_padding_mask_from_torch(Matrix<bool>::Constant(2, 3, false), opaque<Index>(-1)); }));

  // -- sequence encoders --
  using SAE = SelfAttentionEncoder<T>;
  using RE = RNNEncoder<T>;
  using CE = CNNEncoder<T>;
  rows.push_back(ctor_row("SelfAttentionEncoder: 4 heads do not divide num_hiddens 6",
                          {"SelfAttentionEncoder", "num_hiddens (6)", "num_heads (4)"},
                          [](Generator& g) { SAE m(6, 4, 2, 8, g); }));
  rows.push_back(ctor_row("SelfAttentionEncoder: num_layers 0",
                          {"SelfAttentionEncoder", "num_layers", "at least 1", "got 0"},
                          [](Generator& g) { SAE m(6, 2, 0, g); }));
  rows.push_back(ctor_row("SelfAttentionEncoder: max_len 0", {"SelfAttentionEncoder", "max_len", "at least 1", "got 0"},
                          [](Generator& g) { SAE m(6, 2, 2, 0, g); }));
  rows.push_back(ctor_row("SelfAttentionEncoder: num_hiddens 0",
                          {"SelfAttentionEncoder", "num_hiddens", "at least 1", "got 0"},
                          [](Generator& g) { SAE m(0, 1, 2, 8, g); }));
  rows.push_back(ctor_row("RNNEncoder: num_hiddens 0", {"RNNEncoder", "num_hiddens", "at least 1", "got 0"},
                          [](Generator& g) { RE m(0, 2, g); }));
  rows.push_back(ctor_row("RNNEncoder: num_layers -1", {"RNNEncoder", "num_layers", "at least 1", "got -1"},
                          [](Generator& g) { RE m(6, opaque<Index>(-1), g); }));
  rows.push_back(ctor_row("CNNEncoder: kernel_size 0", {"CNNEncoder", "kernel_size", "at least 1", "got 0"},
                          [](Generator& g) { CE m(6, 0, 2, g); }));
  rows.push_back(ctor_row("CNNEncoder: num_layers 0", {"CNNEncoder", "num_layers", "at least 1", "got 0"},
                          [](Generator& g) { CE m(6, 3, 0, g); }));

  const auto make_sae = [] {
    Generator g(10);
    return SAE(6, 2, 2, 8, g);
  };
  const auto run_sae = [](SAE& m) { return m(X<T>(2, 5, 6)); };
  const auto sae_row = [&](std::string name, Phrases phrases, std::function<void(SAE&)> bad) {
    rows.push_back(module_row<T, SAE>(std::move(name), std::move(phrases), make_sae, run_sae, std::move(bad)));
  };
  sae_row("SelfAttentionEncoder: X with 4 features, num_hiddens 6",
          {"SelfAttentionEncoder", "X", "6 features", "(2, 5, 4)"}, [](SAE& m) { (void)m(X<T>(2, 5, 4)); });
  sae_row("SelfAttentionEncoder: X with 9 steps, max_len 8", {"SelfAttentionEncoder", "X", "9 steps", "max_len (8)"},
          [](SAE& m) { (void)m(X<T>(2, 9, 6)); });
  sae_row("SelfAttentionEncoder::attention: layer 2 of 2", {"SelfAttentionEncoder", "layer", "[0, 2)", "got 2"},
          [](SAE& m) { (void)m.attention(2); });
  sae_row("SelfAttentionEncoder::layer: layer -1", {"SelfAttentionEncoder", "layer", "[0, 2)", "got -1"},
          [](SAE& m) { (void)m.layer(-1, X<T>(2, 5, 6)); });
  sae_row("SelfAttentionEncoder::layer: H with 9 steps", {"SelfAttentionEncoder", "H", "9 steps", "max_len (8)"},
          [](SAE& m) { (void)m.layer(0, X<T>(2, 9, 6)); });
  sae_row("SelfAttentionEncoder::layer: positions [3, 6) of 5",
          {"SelfAttentionEncoder", "positions", "[0, 5]", "[3, 6)"},
          [](SAE& m) { (void)m.layer(0, X<T>(2, 5, 6), 3, 6); });
  sae_row("SelfAttentionEncoder::layer: positions [3, 2)", {"SelfAttentionEncoder", "positions", "[0, 5]", "[3, 2)"},
          [](SAE& m) { (void)m.layer(0, X<T>(2, 5, 6), 3, 2); });
  sae_row("SelfAttentionEncoder::stage: stage 2 of 2", {"SelfAttentionEncoder", "stage", "[0, 2)", "got 2"},
          [](SAE& m) {
            Tensor3<T> H = X<T>(2, 5, 6);
            m.stage(2, H);
          });
  sae_row("SelfAttentionEncoder::max_path_length_formula: n 0", {"SelfAttentionEncoder", "n", "at least 1", "got 0"},
          [](SAE& m) { (void)m.max_path_length_formula(0); });
  sae_row("SelfAttentionEncoder::flops: batch -1", {"SelfAttentionEncoder::flops", "batch", "at least 0", "got -1"},
          [](SAE& m) { (void)m.flops(-1, 5); });
  sae_row("SelfAttentionEncoder::sequential_operations: n -1",
          {"SelfAttentionEncoder::sequential_operations", "n", "at least 0", "got -1"},
          [](SAE& m) { (void)m.sequential_operations(-1); });

  const auto make_re = [] {
    Generator g(11);
    return RE(6, 2, g);
  };
  const auto run_re = [](RE& m) { return m(X<T>(2, 5, 6)); };
  const auto re_row = [&](std::string name, Phrases phrases, std::function<void(RE&)> bad) {
    rows.push_back(module_row<T, RE>(std::move(name), std::move(phrases), make_re, run_re, std::move(bad)));
  };
  re_row("RNNEncoder: X with 7 features", {"RNNEncoder", "X", "6 features", "(2, 5, 7)"},
         [](RE& m) { (void)m(X<T>(2, 5, 7)); });
  re_row("RNNEncoder::rnn: layer 5", {"RNNEncoder", "layer", "[0, 2)", "got 5"}, [](RE& m) { (void)m.rnn(5); });
  re_row("RNNEncoder::layer: H with 5 features", {"RNNEncoder", "H", "6 features", "(2, 5, 5)"},
         [](RE& m) { (void)m.layer(0, X<T>(2, 5, 5)); });
  re_row("RNNEncoder::step: t 5 of 5 steps", {"RNNEncoder", "t", "[0, 5)", "got 5"}, [](RE& m) {
    Tensor3<T> H = X<T>(2, 5, 6);
    m.step(0, 5, X<T>(2, 5, 6), H, 0, 6);
  });
  re_row("RNNEncoder::step: units [4, 7) of 6", {"RNNEncoder", "hidden units", "[0, 6]", "[4, 7)"}, [](RE& m) {
    Tensor3<T> H = X<T>(2, 5, 6);
    m.step(0, 1, X<T>(2, 5, 6), H, 4, 7);
  });
  re_row("RNNEncoder::step: X and H of different batches",
         {"RNNEncoder", "X", "H", "batch size", "(2, 5, 6)", "(3, 5, 6)"}, [](RE& m) {
           Tensor3<T> H = X<T>(3, 5, 6);
           m.step(0, 1, X<T>(2, 5, 6), H, 0, 6);
         });
  re_row("RNNEncoder::stage: stage 10 of 2 layers * 5 steps", {"RNNEncoder", "stage", "[0, 10)", "got 10"}, [](RE& m) {
    Tensor3<T> H = X<T>(2, 5, 6);
    m.stage(10, H);
  });
  re_row("RNNEncoder::flops: n -3", {"RNNEncoder::flops", "n", "at least 0", "got -3"},
         [](RE& m) { (void)m.flops(1, -3); });
  re_row("RNNEncoder::sequential_operations: n -1", {"RNNEncoder::sequential_operations", "n", "at least 0", "got -1"},
         [](RE& m) { (void)m.sequential_operations(-1); });
  re_row("RNNEncoder::max_path_length_formula: n 0", {"RNNEncoder", "n", "at least 1", "got 0"},
         [](RE& m) { (void)m.max_path_length_formula(0); });

  const auto make_ce = [] {
    Generator g(12);
    return CE(6, 3, 2, g);
  };
  const auto run_ce = [](CE& m) { return m(X<T>(2, 5, 6)); };
  const auto ce_row = [&](std::string name, Phrases phrases, std::function<void(CE&)> bad) {
    rows.push_back(module_row<T, CE>(std::move(name), std::move(phrases), make_ce, run_ce, std::move(bad)));
  };
  ce_row("CNNEncoder: X with 2 features", {"CNNEncoder", "X", "6 features", "(2, 5, 2)"},
         [](CE& m) { (void)m(X<T>(2, 5, 2)); });
  ce_row("CNNEncoder::conv: layer 2", {"CNNEncoder", "layer", "[0, 2)", "got 2"}, [](CE& m) { (void)m.conv(2); });
  ce_row("CNNEncoder::layer: positions [-1, 2)", {"CNNEncoder", "positions", "[0, 5]", "[-1, 2)"},
         [](CE& m) { (void)m.layer(0, X<T>(2, 5, 6), -1, 2); });
  ce_row("CNNEncoder::stage: stage -1", {"CNNEncoder", "stage", "[0, 2)", "got -1"}, [](CE& m) {
    Tensor3<T> H = X<T>(2, 5, 6);
    m.stage(-1, H);
  });
  ce_row("CNNEncoder::flops: batch -2", {"CNNEncoder::flops", "batch", "at least 0", "got -2"},
         [](CE& m) { (void)m.flops(-2, 5); });
  ce_row("CNNEncoder::max_path_length_formula: n -1", {"CNNEncoder", "n", "at least 1", "got -1"},
         [](CE& m) { (void)m.max_path_length_formula(-1); });

  // -- complexity.hpp --
  rows.push_back(plain("loglog_slope: 3 x and 2 y", {"loglog_slope", "x and y", "same size", "3 and 2"}, [] {
    (void)attend::loglog_slope({1, 2, 3}, {1, 2});
  }));
  rows.push_back(plain("loglog_slope: 1 point", {"loglog_slope", "at least 2 points", "got 1"},
                       [] { (void)attend::loglog_slope({1}, {1}); }));
  rows.push_back(plain("loglog_slope: x 0", {"loglog_slope", "x", "positive and finite", "x[1] = 0"}, [] {
    (void)attend::loglog_slope({1, 0}, {1, 2});
  }));
  rows.push_back(plain("loglog_slope: y NaN", {"loglog_slope", "y", "positive and finite", "y[0] = nan"}, [] {
    (void)attend::loglog_slope({1, 2}, {std::nan(""), 2});
  }));
  rows.push_back(plain("loglog_slope: y infinite", {"loglog_slope", "y", "positive and finite", "y[1] = inf"}, [] {
    (void)attend::loglog_slope({1, 2}, {1, std::numeric_limits<double>::infinity()});
  }));
  rows.push_back(plain("loglog_slope: every x equal", {"loglog_slope", "x", "2 different values", "3 times 4"}, [] {
    (void)attend::loglog_slope({4, 4, 4}, {1, 2, 3});
  }));
  rows.push_back(
      plain("median: no values", {"median", "values", "not be empty", "got 0"}, [] { (void)attend::median({}); }));
  rows.push_back(
      plain("measured_path_length: from 5 of 5 positions", {"measured_path_length", "from", "[0, 5)", "got 5"}, [] {
        Generator g(13);
        CE encoder(6, 3, 2, g);
        (void)attend::measured_path_length(encoder, X<T>(1, 5, 6), 5, 0);
      }));
  rows.push_back(plain("measured_path_length: to -1", {"measured_path_length", "to", "[0, 5)", "got -1"}, [] {
    Generator g(13);
    RE encoder(6, 1, g);
    (void)attend::measured_path_length(encoder, X<T>(1, 5, 6), 0, -1);
  }));
  rows.push_back(plain("measured_path_length: X with no step",
                       {"measured_path_length", "X", "at least 1 batch row, 1 step and 1 feature", "(1, 0, 6)"}, [] {
                         Generator g(13);
                         RE encoder(6, 1, g);
                         (void)attend::measured_path_length(encoder, X<T>(1, 0, 6));
                       }));
  rows.push_back(plain("measured_path_length: X of the wrong width for the encoder",
                       {"SelfAttentionEncoder", "X", "6 features", "(1, 5, 4)"}, [] {
                         Generator g(13);
                         SAE encoder(6, 2, 1, 8, g);
                         (void)attend::measured_path_length(encoder, X<T>(1, 5, 4));
                       }));
  return rows;
}

std::string kind_name(Throws kind) {
  return kind == Throws::invalid_argument ? "std::invalid_argument" : "attend::SafetensorsError";
}

}  // namespace

TEMPLATE_TEST_CASE(
    "Every public entry point refuses bad input, names the argument, the expected and the actual value, "
    "and leaves a module as it was",
    "[bad_input]", float, double) {
  const std::vector<Row> rows = table<TestType>();
  std::size_t checked = 0;
  for (const Row& row : rows) {
    INFO("row: " << row.name);
    if (row.setup) {
      try {
        row.setup();
      } catch (const std::exception& error) {
        FAIL_CHECK("the row's setup threw: " << error.what());
        continue;
      }
    }
    bool threw = false, right_kind = false;
    std::string what;
    try {
      row.call();
    } catch (const attend::SafetensorsError& error) {
      threw = true;
      right_kind = row.kind == Throws::safetensors_error;
      what = error.what();
    } catch (const std::invalid_argument& error) {
      threw = true;
      right_kind = row.kind == Throws::invalid_argument;
      what = error.what();
    } catch (const std::exception& error) {
      threw = true;
      what = std::string("another exception: ") + error.what();
    }
    INFO("expected " << kind_name(row.kind) << "; message: " << what);
    CHECK(threw);
    CHECK(right_kind);
    for (const std::string& phrase : row.phrases) CHECK_THAT(what, Catch::Matchers::Contains(phrase));
    if (threw && row.after) row.after();
    ++checked;
  }
  CHECK(checked == rows.size());
}

TEMPLATE_TEST_CASE("Optimizers refuse a hand-made Parameter with a negative size or a null pointer, and set_isa a "
                   "value outside the enum, naming the argument, the expected and the actual value",
                   "[bad_input]", float, double) {
  using T = TestType;
  using Params = std::vector<attend::Parameter<T>>;
  T value[2] = {}, grad[2] = {};
  const Params null_value{{"w", nullptr, grad, 2, {}}}, null_grad{{"w", value, nullptr, 2, {}}};
  const Params negative{{"w", value, grad, -2, {}}};
  using Catch::Matchers::Message;
  CHECK_THROWS_MATCHES(attend::SGD<T>(null_value, T(0.1)), std::invalid_argument,
                       Message("SGD: parameter \"w\" has a null value pointer (size 2)"));
  CHECK_THROWS_MATCHES(attend::Adam<T>(null_grad), std::invalid_argument,
                       Message("Adam: parameter \"w\" has a null grad pointer (size 2)"));
  CHECK_THROWS_MATCHES(attend::AdamW<T>(negative), std::invalid_argument,
                       Message("AdamW: parameter \"w\" must have size >= 0, got -2"));
  const int chosen = attend::process::chosen_isa.load();
  CHECK_THROWS_MATCHES(attend::set_isa(static_cast<attend::Isa>(7)), std::invalid_argument,
                       Message("set_isa: isa must be Isa::generic, Isa::avx2, Isa::avx512 or Isa::avx512_bf16, got "
                               "Isa(7)"));
  CHECK(attend::process::chosen_isa.load() == chosen);  // the choice is unchanged
}
