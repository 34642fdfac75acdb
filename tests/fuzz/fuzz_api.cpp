// libFuzzer target: attend's public API on shapes, arguments, masks and values decoded from the fuzzer's bytes.
//
// One input is one call sequence on one entry point (masked_softmax, transpose_qkv, transpose_output, Linear,
// DotProductAttention, AdditiveAttention, MultiHeadAttention, PositionalEncoding, RNN, Conv1d, LayerNorm, RMSNorm,
// PositionWiseFFN, GatedFFN, TransformerEncoderBlock, CausalLM, Embedding, AddNorm), in float or double.
// A module is constructed, called once on inputs that agree with its sizes, then changed in one way (another shape
// for one input, a resized parameter, another mask, the other mode) and called again. DotProductAttention and
// MultiHeadAttention then get a path (set_path) and a thread count (set_num_threads), and the second call's arguments
// go to the const forward() and to operator() once more. What must hold:
//
//   1. outcome   every call returns or throws std::invalid_argument (or a class derived from it), and throws exactly
//                when an argument breaks a rule of the contract; the rules are restated below, next to each entry
//                point, without asking the library;
//   2. shape     a returned tensor (and attention_weights()) has exactly the shape the contract gives;
//   3. state     a forward call never changes the module's parameters (visit_parameters, bit for bit), and a call
//                that throws leaves attention_weights() as it was too;
//   4. numbers   when every input is finite with |x| < 1e3, the results are finite and every row of the weights
//                (masked_softmax, attention_weights()) is a distribution over the keys: entries in [0, 1] summing to
//                1; a query that sees no key gets 1/keys everywhere (FullyMasked::uniform) or exact zeros
//                (FullyMasked::zero); where the scores are bounded (masked_softmax's input, AdditiveAttention) a
//                masked key's weight is exactly 0. Which keys a mask keeps is worked out here from its parts;
//   5. content   transpose_qkv and transpose_output put every entry where the contract says and undo each other
//                bit for bit; PositionalEncoding in evaluation mode returns X + P[:steps] exactly;
//   6. paths     set_path takes automatic, direct and tiled and refuses any other value; forward(), in either mode,
//                with a fresh workspace or a reused one, on 1 or 2 threads, returns bit for bit what operator()
//                returns in evaluation mode on the same path, and changes nothing in the module;
//                attention_weights() throws std::logic_error exactly after a call that took the tiled path (which
//                is worked out here: always when set to tiled, and for automatic when the weights would take more
//                than 1 MiB, in either mode); backward() on that call accepts a grad_output of the output's shape,
//                refuses another, and returns gradients of the inputs' shapes.
// A violation prints what went wrong and traps, which libFuzzer reports as a crash and saves the input.
//
// The bytes are read front to back, one field per byte (a value may take one byte, a tensor a few); past the end of
// the input every byte reads as 0. Byte 0 picks the entry point (mod 18), byte 1 the scalar type (odd: double),
// then each entry point reads the fields listed in its comment. make_api_corpus.py writes seeds in this layout.
#include <attend/attend.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

using attend::FullyMasked;
using attend::Index;
using attend::Mask;
using attend::Tensor3;

// ---- reporting ---------------------------------------------------------------------------------------------------

template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream text;
  (text << ... << parts);
  std::fprintf(stderr, "\nfuzz_api: %s\n", text.str().c_str());
  __builtin_trap();
}

template <class... Parts>
void expect(bool ok, const Parts&... parts) {
  if (!ok) fail(parts...);
}

// What a call did: returned, or threw std::invalid_argument with this message.
struct Outcome {
  bool returned;
  std::string error;
};

// Runs `call`; any exception other than a std::invalid_argument is a failure.
template <class Call>
Outcome run(const std::string& what, Call&& call) {
  try {
    call();
    return {true, {}};
  } catch (const std::invalid_argument& error) {
    return {false, error.what()};
  } catch (const std::exception& error) {
    fail(what, ": threw an exception that is not a std::invalid_argument: ", error.what());
  } catch (...) {
    fail(what, ": threw something that is not a std::exception");
  }
}

// Runs `call` and requires it to return when `valid` and to throw std::invalid_argument otherwise; true if it
// returned.
template <class Call>
bool run_expecting(const std::string& what, bool valid, Call&& call) {
  const Outcome outcome = run(what, call);
  if (valid && !outcome.returned) fail(what, ": threw on arguments the contract accepts: ", outcome.error);
  if (!valid && outcome.returned) fail(what, ": returned on arguments the contract rejects");
  return outcome.returned;
}

// ---- shapes and bits ---------------------------------------------------------------------------------------------

struct Dims {
  Index d0, d1, d2;
};

std::ostream& operator<<(std::ostream& out, const Dims& d) {
  return out << '(' << d.d0 << ", " << d.d1 << ", " << d.d2 << ')';
}

template <class Scalar>
Dims dims_of(const Tensor3<Scalar>& X) {
  return {X.dimension(0), X.dimension(1), X.dimension(2)};
}

template <class Scalar>
void expect_shape(const Tensor3<Scalar>& Y, Dims expected, const std::string& what) {
  const Dims got = dims_of(Y);
  expect(got.d0 == expected.d0 && got.d1 == expected.d1 && got.d2 == expected.d2, what, ": expected shape ", expected,
         ", got ", got);
}

// The bytes of `count` values from `data`: a comparison that tells -0 from 0 and sees NaN equal to itself.
template <class Scalar>
std::vector<unsigned char> bytes_of(const Scalar* data, Index count) {
  const auto* first = reinterpret_cast<const unsigned char*>(data);
  return {first, first + count * static_cast<Index>(sizeof(Scalar))};
}

template <class Scalar>
bool same_bits(Scalar a, Scalar b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// Finite with |x| < 1e3 everywhere: inputs whose results must be finite.
template <class Scalar>
bool moderate(const Tensor3<Scalar>& X) {
  for (Index i = 0; i < X.size(); ++i)
    if (!(std::abs(X.data()[i]) < Scalar(1e3))) return false;  // NaN fails the comparison too
  return true;
}

template <class Scalar>
void expect_finite(const Tensor3<Scalar>& Y, const std::string& what) {
  for (Index i = 0; i < Y.size(); ++i)
    expect(std::isfinite(Y.data()[i]), what, ": entry ", i, " is ", Y.data()[i], " on finite, moderate inputs");
}

// ---- decoding the bytes ------------------------------------------------------------------------------------------

// Sixteen values that break careless code.
template <class Scalar>
Scalar special(unsigned i) {
  using limits = std::numeric_limits<Scalar>;
  const Scalar table[16] = {limits::quiet_NaN(), limits::infinity(),   -limits::infinity(),   Scalar(1e30),
                            Scalar(-1e30),       limits::denorm_min(), -limits::denorm_min(), Scalar(-0.0),
                            limits::max(),       limits::lowest(),     limits::min(),         limits::min() / 2,
                            Scalar(1e3),         Scalar(-999.5),       Scalar(999.5),         -limits::epsilon()};
  return table[i % 16];
}

// The fuzzer's bytes, front to back; once they are used up every byte reads as 0.
class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  std::uint8_t byte() { return used_ < size_ ? data_[used_++] : 0; }
  bool flag() { return (byte() & 1) != 0; }
  // 0 .. n - 1
  Index below(Index n) { return static_cast<Index>(byte()) % n; }

  // A size given to a constructor or function: 0 .. max, or -1 .. -8 for the bytes 0xF8 .. 0xFF.
  Index size_argument(Index max) {
    const std::uint8_t b = byte();
    if (b >= 0xF8) return -static_cast<Index>(b - 0xF7);
    return static_cast<Index>(b) % (max + 1);
  }

  // A value: one of the 16 special values for the bytes 0xF0 .. 0xFF, else the byte as a signed number / 16,
  // in [-8, 8).
  template <class Scalar>
  Scalar value() {
    const std::uint8_t b = byte();
    if (b >= 0xF0) return special<Scalar>(b - 0xF0);
    return static_cast<Scalar>(static_cast<std::int8_t>(b)) / Scalar(16);
  }

  // A dropout probability, in [0, 1] or not.
  template <class Scalar>
  Scalar dropout() {
    using limits = std::numeric_limits<Scalar>;
    const Scalar table[16] = {Scalar(0),
                              Scalar(0),
                              Scalar(0.5),
                              Scalar(0.1),
                              Scalar(0.9),
                              Scalar(1),
                              std::nextafter(Scalar(1), Scalar(0)),
                              Scalar(1e-7),
                              Scalar(-0.0),
                              Scalar(-1e-7),
                              Scalar(-0.5),
                              Scalar(1) + limits::epsilon(),
                              Scalar(1.5),
                              limits::quiet_NaN(),
                              limits::infinity(),
                              -limits::infinity()};
    return table[byte() % 16];
  }

  // A tensor of shape `dims`, filled as the next byte says:
  //   0  one value() per entry            1  one value() everywhere
  //   2  uniform in [-scale, scale) from a generator seeded by the next byte, scale 1e-3, 1, 30 or 999
  //   3  as 2, then 1 to 4 entries (positions from the next bytes) set to special values
  template <class Scalar>
  Tensor3<Scalar> tensor(Dims dims) {
    Tensor3<Scalar> X(dims.d0, dims.d1, dims.d2);
    const unsigned mode = byte() % 4;
    if (mode == 0) {
      for (Index i = 0; i < X.size(); ++i) X.data()[i] = value<Scalar>();
    } else if (mode == 1) {
      X.setConstant(value<Scalar>());
    } else {
      const Scalar scales[4] = {Scalar(1e-3), Scalar(1), Scalar(30), Scalar(999)};
      const Scalar scale = scales[byte() % 4];
      attend::Generator generator(byte());
      for (Index i = 0; i < X.size(); ++i) X.data()[i] = generator.uniform(-scale, scale);
      if (mode == 3 && X.size() > 0) {
        const unsigned count = 1 + byte() % 4;
        for (unsigned n = 0; n < count; ++n) {
          const Index at = static_cast<Index>(byte()) % X.size();
          X.data()[at] = special<Scalar>(byte());
        }
      }
    }
    return X;
  }

  // `nominal`, or now and then (a byte of 0xF0 and above) another size in 0 .. 8.
  Index size_near(Index nominal) {
    const std::uint8_t b = byte();
    return b >= 0xF0 ? b % 9 : nominal;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t used_ = 0;
};

// ---- masks, and which keys they keep ----------------------------------------------------------------------------

// A mask with the parts it was built from, so that which keys it keeps, whether it could be built and whether it
// fits a shape are worked out here, not asked of attend::Mask.
struct MaskSpec {
  enum class Part { per_batch, per_query, causal, keep };
  std::vector<Part> parts;                        // in the order they are combined with &&
  std::vector<std::vector<Index>> per_batch;      // each (rows)
  std::vector<attend::Matrix<Index>> per_query;   // each (rows, queries)
  std::vector<Tensor3<bool>> keep;                // each (batch or 1, queries, keys)
  std::vector<std::optional<FullyMasked>> rules;  // per part: the rule it chose, if any
  bool causal = false;
  Mask mask;  // the combined mask, once built

  // Whether Mask's constructors and && accept these parts: lengths >= 0; every set of lengths for the same batch
  // rows; keep tensors of the same (queries, keys) with batch sizes equal or 1; no two different rules.
  bool buildable() const {
    std::optional<Index> rows;
    const auto same_rows = [&](Index r) {
      if (rows && *rows != r) return false;
      rows = r;
      return true;
    };
    for (const auto& lens : per_batch) {
      if (!same_rows(static_cast<Index>(lens.size()))) return false;
      for (Index len : lens)
        if (len < 0) return false;
    }
    for (const auto& lens : per_query) {
      if (!same_rows(lens.rows())) return false;
      if ((lens.array() < 0).any()) return false;
    }
    if (keep.size() == 2) {
      const Dims a = dims_of(keep[0]), b = dims_of(keep[1]);
      if (a.d1 != b.d1 || a.d2 != b.d2 || !(a.d0 == b.d0 || a.d0 == 1 || b.d0 == 1)) return false;
    }
    std::optional<FullyMasked> chosen;
    for (const auto& rule : rules) {
      if (!rule) continue;
      if (chosen && *chosen != *rule) return false;
      chosen = rule;
    }
    return true;
  }

  FullyMasked rule() const {
    for (const auto& r : rules)
      if (r) return *r;
    return FullyMasked::uniform;
  }

  // Whether the mask fits scores of shape (batch, queries, keys): lengths per query are (batch, queries), per
  // batch row (batch,); keep tensors (batch or 1, queries, keys) once combined.
  bool fits(Index batch, Index queries, Index keys) const {
    for (const auto& lens : per_batch)
      if (static_cast<Index>(lens.size()) != batch) return false;
    for (const auto& lens : per_query)
      if (lens.rows() != batch || lens.cols() != queries) return false;
    if (!keep.empty()) {
      const Index keep_batch =
          keep.size() == 2 && keep[0].dimension(0) == 1 ? keep[1].dimension(0) : keep[0].dimension(0);
      const Dims k = dims_of(keep[0]);
      if (k.d1 != queries || k.d2 != keys || !(keep_batch == batch || keep_batch == 1)) return false;
    }
    return true;
  }

  // Whether key j of query q in batch row b is kept, for scores (batch, queries, keys) that the mask fits.
  bool keeps(Index b, Index q, Index j, Index queries, Index keys) const {
    for (const auto& lens : per_batch)
      if (j >= lens[static_cast<std::size_t>(b)]) return false;
    for (const auto& lens : per_query)
      if (j >= lens(b, q)) return false;
    if (causal && j > q + (keys - queries)) return false;  // bottom-right aligned
    for (const auto& K : keep)
      if (!K(K.dimension(0) == 1 ? 0 : b, q, j)) return false;
    return true;
  }
};

// A valid length for `keys` keys: 0 .. keys + 2 (longer than the keys masks nothing), or -1 .. -4 (an error).
Index length(Input& in, Index keys) {
  const std::uint8_t b = in.byte();
  if (b >= 0xFC) return -static_cast<Index>(b - 0xFB);
  return static_cast<Index>(b) % (keys + 3);
}

// Decodes a mask meant for scores of shape (batch, queries, keys); a part's shape is, now and then, another one.
// Byte: which parts, combined with && in this order (bit 0 lengths per batch row, 1 lengths per query, 2 causal,
// 3 a keep tensor, 4 a second keep tensor, 5 a second set of lengths per batch row); then for each part its sizes
// (size_near), its contents, and the rule it chooses (a byte: 0 none, 1 FullyMasked::zero, 2 FullyMasked::uniform,
// mod 3). Returns nothing when the parts cannot be combined (checked: construction must throw then).
std::optional<MaskSpec> decode_mask(Input& in, Index batch, Index queries, Index keys) {
  MaskSpec spec;
  const std::uint8_t parts = in.byte();
  for (int bit = 0; bit < 6; ++bit) {
    if (((parts >> bit) & 1) == 0) continue;
    if (bit == 0 || bit == 5) {
      std::vector<Index> lens(static_cast<std::size_t>(in.size_near(batch)));  // (batch,)
      for (auto& len : lens) len = length(in, keys);
      spec.per_batch.push_back(std::move(lens));
      spec.parts.push_back(MaskSpec::Part::per_batch);
    } else if (bit == 1) {
      const Index rows = in.size_near(batch);
      attend::Matrix<Index> lens(rows, in.size_near(queries));  // (batch, queries)
      for (Index i = 0; i < lens.size(); ++i) lens.data()[i] = length(in, keys);
      spec.per_query.push_back(std::move(lens));
      spec.parts.push_back(MaskSpec::Part::per_query);
    } else if (bit == 2) {
      spec.causal = true;
      spec.parts.push_back(MaskSpec::Part::causal);
    } else {
      const Index rows = in.flag() ? 1 : in.size_near(batch);
      const Index q = in.size_near(queries);
      Tensor3<bool> keep(rows, q, in.size_near(keys));  // (batch or 1, queries, keys)
      const double densities[4] = {0.0, 0.3, 0.7, 1.0};
      const double density = densities[in.byte() % 4];
      attend::Generator generator(in.byte());
      for (Index i = 0; i < keep.size(); ++i) keep.data()[i] = generator.uniform01<double>() < density;
      spec.keep.push_back(std::move(keep));
      spec.parts.push_back(MaskSpec::Part::keep);
    }
    const unsigned rule = in.byte() % 3;
    spec.rules.push_back(rule == 0 ? std::nullopt
                                   : std::optional<FullyMasked>(rule == 1 ? FullyMasked::zero : FullyMasked::uniform));
  }

  const bool built = run_expecting("Mask (construction and &&)", spec.buildable(), [&] {
    std::size_t per_batch = 0, per_query = 0, keep = 0;
    Mask mask;  // keeps every key; && with it changes nothing
    for (std::size_t i = 0; i < spec.parts.size(); ++i) {
      Mask part;
      switch (spec.parts[i]) {
        case MaskSpec::Part::per_batch:
          part = attend::ValidLens::per_batch(spec.per_batch[per_batch++]);
          break;
        case MaskSpec::Part::per_query:
          part = attend::ValidLens::per_query(spec.per_query[per_query++]);
          break;
        case MaskSpec::Part::causal:
          part = Mask::causal();
          break;
        case MaskSpec::Part::keep:
          part = Mask::keep(spec.keep[keep++]);
          break;
      }
      if (spec.rules[i]) part = part.when_fully_masked(*spec.rules[i]);
      mask = mask && part;
    }
    spec.mask = std::move(mask);
  });
  if (!built) return std::nullopt;
  return spec;
}

// Every row of `weights` (batch * heads, queries, keys) is a distribution over the keys the mask keeps for its batch
// row (row r is batch row r / heads); a masked key's weight is exactly 0 when `masked_exact`.
template <class Scalar>
void expect_distributions(const Tensor3<Scalar>& weights, const MaskSpec& spec, Index heads, bool masked_exact,
                          const std::string& what) {
  const Index queries = weights.dimension(1), keys = weights.dimension(2);
  const Scalar tolerance = std::is_same_v<Scalar, float> ? Scalar(1e-5) : Scalar(1e-12);
  for (Index r = 0; r < weights.dimension(0); ++r) {
    for (Index q = 0; q < queries; ++q) {
      bool sees_a_key = false;
      for (Index j = 0; j < keys; ++j) sees_a_key = sees_a_key || spec.keeps(r / heads, q, j, queries, keys);
      Scalar sum = 0;
      for (Index j = 0; j < keys; ++j) {
        const Scalar w = weights(r, q, j);
        if (!sees_a_key) {
          const Scalar expected = spec.rule() == FullyMasked::zero ? Scalar(0) : Scalar(1) / static_cast<Scalar>(keys);
          expect(w == expected, what, ": weights(", r, ", ", q, ", ", j, ") = ", w,
                 " in a row that sees no key, expected ", expected);
          continue;
        }
        expect(std::isfinite(w) && w >= Scalar(0) && w <= Scalar(1) + tolerance, what, ": weights(", r, ", ", q, ", ",
               j, ") = ", w, " is not in [0, 1]");
        if (masked_exact && !spec.keeps(r / heads, q, j, queries, keys))
          expect(w == Scalar(0), what, ": weights(", r, ", ", q, ", ", j, ") = ", w, " for a masked key");
        sum += w;
      }
      if (sees_a_key)
        expect(std::abs(sum - Scalar(1)) <= tolerance, what, ": row (", r, ", ", q, ") of the weights sums to ", sum);
    }
  }
}

// ---- modules: their state, and one change between two calls -----------------------------------------------------

template <class Derived>
std::vector<Index> shape_now(const Eigen::DenseBase<Derived>& M) {
  return {M.rows(), M.cols()};
}
template <class Scalar>
std::vector<Index> shape_now(const Tensor3<Scalar>& X) {
  return {X.dimension(0), X.dimension(1), X.dimension(2)};
}

// detects<Member, T>: whether Member<T> is a valid type, i.e. whether T has the member that Member names.
template <template <class> class Member, class T, class = void>
struct detects : std::false_type {};
template <template <class> class Member, class T>
struct detects<Member, T, std::void_t<Member<T>>> : std::true_type {};

// Whether a module keeps attention weights (the attention modules do).
template <class T>
using attention_weights_t = decltype(std::declval<const T&>().attention_weights());
template <class T>
using has_attention_weights = detects<attention_weights_t, T>;

// What a call may not change: every parameter (name, shape now, bits) and the attention weights, if the module
// keeps any.
struct State {
  std::vector<std::string> names;
  std::vector<std::vector<Index>> shapes;
  std::vector<std::vector<unsigned char>> parameters;
  bool no_weights = false;  // attention_weights() threw std::logic_error: the last call took the tiled path
  std::vector<Index> weights_shape;
  std::vector<unsigned char> weights;

  bool same_parameters(const State& other) const {
    return names == other.names && shapes == other.shapes && parameters == other.parameters;
  }
  bool same_weights(const State& other) const {
    return no_weights == other.no_weights && weights_shape == other.weights_shape && weights == other.weights;
  }
};

template <class Module>
State state_of(const Module& module) {
  State state;
  module.visit_parameters([&](const std::string& name, const auto& parameter, const std::vector<Index>&) {
    state.names.push_back(name);
    state.shapes.push_back(shape_now(parameter));
    state.parameters.push_back(bytes_of(parameter.data(), parameter.size()));
  });
  if constexpr (has_attention_weights<Module>::value) {
    try {
      const auto& W = module.attention_weights();
      state.weights_shape = shape_now(W);
      state.weights = bytes_of(W.data(), W.size());
    } catch (const std::invalid_argument& error) {
      fail("attention_weights() threw std::invalid_argument: ", error.what());
    } catch (const std::logic_error&) {
      state.no_weights = true;
    }
  }
  return state;
}

// A parameter made one entry larger along its last axis (zeros), as the accessors allow from outside.
template <class Derived>
void grow(Eigen::PlainObjectBase<Derived>& M) {
  if (M.cols() == 1)
    M.resize(M.rows() + 1, 1);
  else
    M.resize(M.rows(), M.cols() + 1);
  M.setZero();
}
template <class Scalar>
void grow(Tensor3<Scalar>& X) {
  X.resize(X.dimension(0), X.dimension(1), X.dimension(2) + 1);
  X.setZero();
}

// Resizes parameter `which` (mod their number); false when the module has none.
template <class Module>
bool resize_a_parameter(Module& module, Index which) {
  Index count = 0;
  module.visit_parameters([&](const std::string&, const auto&, const std::vector<Index>&) { ++count; });
  if (count == 0) return false;
  Index i = 0;
  module.visit_parameters([&](const std::string&, auto& parameter, const std::vector<Index>&) {
    if (i++ == which % count) grow(parameter);
  });
  return true;
}

// Calls `forward` (-> Tensor3) on `module`: it must return a tensor of shape `expected` when `valid` and throw
// otherwise; the parameters must not change, and nothing else either when it throws. Returns the result, if any.
template <class Scalar, class Module, class Forward>
std::optional<Tensor3<Scalar>> forward_checked(const std::string& what, Module& module, bool valid, Dims expected,
                                               Forward&& forward) {
  const State before = state_of(module);
  std::optional<Tensor3<Scalar>> Y;
  const bool returned = run_expecting(what, valid, [&] { Y = forward(); });
  const State after = state_of(module);
  expect(before.same_parameters(after), what, ": the call changed the module's parameters");
  if (!returned) {
    expect(before.same_weights(after), what, ": a call that threw changed attention_weights()");
    return std::nullopt;
  }
  expect_shape(*Y, expected, what);
  return Y;
}

// The change between a module's two calls, as the next byte says (mod 4):
//   0  none    1  one input gets another shape (next bytes: which input, which axis, the new size, the tensor)
//   2  a parameter is resized (next byte: which)
//   3  a new mask (attention modules; next bytes: the batch, queries and keys it is meant for (mod 9), the mask)
// and, when the byte's bit 2 is set, the module switches mode (training <-> evaluation). `resized` becomes true
// when a parameter was resized: every later call must throw.
enum class Change { none, input_shape, parameter, mask };

template <class Scalar, class Module>
Change change(Input& in, Module& module, std::vector<Tensor3<Scalar>>& inputs, bool& resized) {
  const std::uint8_t b = in.byte();
  if (b & 4) module.train(!module.is_training());
  const auto what = static_cast<Change>(b % 4);
  if (what == Change::input_shape) {
    Tensor3<Scalar>& X = inputs[static_cast<std::size_t>(in.below(static_cast<Index>(inputs.size())))];
    Dims dims = dims_of(X);
    const Index axis = in.below(3);
    const Index size = in.below(axis == 2 ? 33 : 9);
    (axis == 0 ? dims.d0 : axis == 1 ? dims.d1 : dims.d2) = size;
    X = in.tensor<Scalar>(dims);
  } else if (what == Change::parameter) {
    resized = resize_a_parameter(module, in.byte()) || resized;
  }
  return what;
}

// ---- the entry points --------------------------------------------------------------------------------------------

// masked_softmax(X, mask): X (batch, queries, keys) -> same shape; valid when the mask fits X.
// Bytes: batch, queries, keys (mod 9), the mask, X's shape now and then another (size_near per axis), X.
template <class Scalar>
void fuzz_masked_softmax(Input& in) {
  const Index batch = in.below(9), queries = in.below(9), keys = in.below(9);
  const auto spec = decode_mask(in, batch, queries, keys);
  if (!spec) return;
  const Tensor3<Scalar> X = in.tensor<Scalar>({in.size_near(batch), in.size_near(queries), in.size_near(keys)});
  const Dims d = dims_of(X);
  std::optional<Tensor3<Scalar>> W;
  if (!run_expecting("masked_softmax", spec->fits(d.d0, d.d1, d.d2),
                     [&] { W = attend::masked_softmax(X, spec->mask); }))
    return;
  expect_shape(*W, d, "masked_softmax");
  if (moderate(X)) expect_distributions(*W, *spec, 1, true, "masked_softmax");
}

// transpose_qkv(X, num_heads): (batch, steps, num_heads * d) -> (batch * num_heads, steps, d), valid when
// num_heads >= 1 divides X's width; transpose_output must then undo it bit for bit.
// Bytes: num_heads (size_argument(8)), batch, steps (mod 9), width (mod 33), X.
template <class Scalar>
void fuzz_transpose_qkv(Input& in) {
  const Index heads = in.size_argument(8);
  const Dims in_dims{in.below(9), in.below(9), in.below(33)};
  const Tensor3<Scalar> X = in.tensor<Scalar>(in_dims);
  std::optional<Tensor3<Scalar>> Y;
  const bool valid = heads >= 1 && in_dims.d2 % heads == 0;
  if (!run_expecting("transpose_qkv", valid, [&] { Y = attend::transpose_qkv(X, heads); })) return;
  const Index d = in_dims.d2 / heads;
  expect_shape(*Y, {in_dims.d0 * heads, in_dims.d1, d}, "transpose_qkv");
  for (Index b = 0; b < in_dims.d0; ++b)
    for (Index h = 0; h < heads; ++h)
      for (Index s = 0; s < in_dims.d1; ++s)
        for (Index i = 0; i < d; ++i)
          expect(same_bits((*Y)(b * heads + h, s, i), X(b, s, h * d + i)), "transpose_qkv: entry (", b * heads + h,
                 ", ", s, ", ", i, ") is not X(", b, ", ", s, ", ", h * d + i, ")");
  std::optional<Tensor3<Scalar>> back;
  run_expecting("transpose_output(transpose_qkv(X))", true, [&] { back = attend::transpose_output(*Y, heads); });
  expect_shape(*back, in_dims, "transpose_output(transpose_qkv(X))");
  expect(bytes_of(back->data(), back->size()) == bytes_of(X.data(), X.size()),
         "transpose_output(transpose_qkv(X)) is not X");
}

// transpose_output(X, num_heads): (batch * num_heads, steps, d) -> (batch, steps, num_heads * d), valid when
// num_heads >= 1 divides X's first axis.
// Bytes: num_heads (size_argument(8)), rows, steps, d (mod 9), X.
template <class Scalar>
void fuzz_transpose_output(Input& in) {
  const Index heads = in.size_argument(8);
  const Dims in_dims{in.below(9), in.below(9), in.below(9)};
  const Tensor3<Scalar> X = in.tensor<Scalar>(in_dims);
  std::optional<Tensor3<Scalar>> Y;
  const bool valid = heads >= 1 && in_dims.d0 % heads == 0;
  if (!run_expecting("transpose_output", valid, [&] { Y = attend::transpose_output(X, heads); })) return;
  const Index batch = in_dims.d0 / heads, d = in_dims.d2;
  expect_shape(*Y, {batch, in_dims.d1, heads * d}, "transpose_output");
  for (Index b = 0; b < batch; ++b)
    for (Index h = 0; h < heads; ++h)
      for (Index s = 0; s < in_dims.d1; ++s)
        for (Index i = 0; i < d; ++i)
          expect(same_bits((*Y)(b, s, h * d + i), X(b * heads + h, s, i)), "transpose_output: entry (", b, ", ", s,
                 ", ", h * d + i, ") is not X(", b * heads + h, ", ", s, ", ", i, ")");
}

// What an attention module requires of queries (batch, q, .), keys (batch, k, .), values (batch, k, .), and what it
// returns.
struct AttentionRules {
  Index query_size;   // the queries' width; -1: any, but the keys' width must equal it and be >= 1
  Index key_size;     // the keys' width (when query_size >= 0)
  Index value_size;   // the values' width; -1: any
  Index output_size;  // the output's width; -1: the values' width
  Index heads;        // rows of attention_weights() per batch row
  bool masked_exact;  // scores are bounded, so a masked key's weight is exactly 0
};

// What a call on `inputs` (queries, keys, values) with the mask `spec` must do: return a tensor of shape `shape` when
// `valid`, throw otherwise.
struct Expected {
  bool valid;
  Dims shape;
};

template <class Scalar>
Expected attention_contract(const AttentionRules& rules, const std::vector<Tensor3<Scalar>>& inputs,
                            const MaskSpec& spec, bool resized) {
  const Dims q = dims_of(inputs[0]), k = dims_of(inputs[1]), v = dims_of(inputs[2]);
  bool valid = !resized && q.d0 == k.d0 && k.d0 == v.d0 && k.d1 == v.d1 && spec.fits(q.d0, q.d1, k.d1);
  if (rules.query_size < 0)
    valid = valid && q.d2 == k.d2 && q.d2 >= 1;
  else
    valid = valid && q.d2 == rules.query_size && k.d2 == rules.key_size;
  if (rules.value_size >= 0) valid = valid && v.d2 == rules.value_size;
  return {valid, {q.d0, q.d1, rules.output_size >= 0 ? rules.output_size : v.d2}};
}

// After a call that returned Y: attention_weights() has the contract's shape and, on moderate inputs, rows that are
// distributions, and Y is finite.
template <class Scalar, class Attention>
void expect_weights(const Attention& attention, const Tensor3<Scalar>& Y, const std::vector<Tensor3<Scalar>>& inputs,
                    const MaskSpec& spec, const AttentionRules& rules, const std::string& what) {
  const Dims q = dims_of(inputs[0]), k = dims_of(inputs[1]);
  const auto& W = attention.attention_weights();
  expect_shape(W, {q.d0 * rules.heads, q.d1, k.d1}, what + ", attention_weights()");
  if (moderate(inputs[0]) && moderate(inputs[1]) && moderate(inputs[2])) {
    expect_distributions(W, spec, rules.heads, rules.masked_exact, what + ", attention_weights()");
    expect_finite(Y, what);
  }
}

// Whether a module chooses its attention path (DotProductAttention, MultiHeadAttention).
template <class T>
using path_t = decltype(std::declval<const T&>().path());
template <class T>
using has_path = detects<path_t, T>;

// Whether a call takes the tiled path, as attention_path.hpp states it: as set, and for automatic when the
// (batch * heads, queries, keys) weights take more than 1 MiB; in training and evaluation alike.
template <class Scalar>
bool takes_tiled(attend::AttentionPath path, Index weights) {
  if (path == attend::AttentionPath::direct) return false;
  if (path == attend::AttentionPath::tiled) return true;
  return static_cast<double>(weights) * sizeof(Scalar) > double(1 << 20);
}

// Puts back the thread count it found: set_num_threads outlives the input.
struct ThreadsRestored {
  int threads = attend::num_threads();
  ~ThreadsRestored() { attend::set_num_threads(threads); }
};

// The parts, streamed into one string.
template <class... Parts>
std::string text(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

// backward() on the call just made: a grad_output of the output's shape (or, when bit 0 of the first byte is set,
// one more feature, which it must refuse), then the gradients of the inputs' shapes.
// Bytes: the flag, then grad_output.
template <class Scalar, class Attention>
void fuzz_backward(const std::string& on, Input& in, Attention& attention, const std::vector<Tensor3<Scalar>>& inputs,
                   Dims output) {
  const bool wrong = (in.byte() & 1) != 0;
  const Tensor3<Scalar> dY = in.tensor<Scalar>({output.d0, output.d1, output.d2 + (wrong ? 1 : 0)});
  std::optional<attend::AttentionGradients<Scalar>> g;
  if (!run_expecting(on + "backward(grad_output " + text(dims_of(dY)) + ")", !wrong,
                     [&] { g = attention.backward(dY); }))
    return;
  expect_shape(g->queries, dims_of(inputs[0]), on + "backward(): the queries' gradient");
  expect_shape(g->keys, dims_of(inputs[1]), on + "backward(): the keys' gradient");
  expect_shape(g->values, dims_of(inputs[2]), on + "backward(): the values' gradient");
}

// The path and the thread count, then forward() and operator() on the last call's arguments (point 6 at the top).
// Bytes: the path (mod 4: automatic, direct, tiled; 3: the byte itself as an AttentionPath, which set_path must
// refuse), the thread count (bit 0: 1 or 2).
template <class Scalar, class Attention>
void fuzz_paths(const std::string& name, Input& in, Attention& attention, const AttentionRules& rules,
                const std::vector<Tensor3<Scalar>>& inputs, const MaskSpec& spec, const Expected& contract) {
  using attend::AttentionPath;
  const std::uint8_t path_byte = in.byte();
  const int path_value = path_byte % 4 == 3 ? path_byte : path_byte % 4;
  const int threads = 1 + (in.byte() & 1);

  const AttentionPath old_path = attention.path();
  const auto path = static_cast<AttentionPath>(path_value);
  const bool set = run_expecting(text(name, "::set_path(AttentionPath(", path_value, "))"), path_value <= 2,
                                 [&] { attention.set_path(path); });
  expect(attention.path() == (set ? path : old_path), name, "::set_path(AttentionPath(", path_value, ")): path() is ",
         attention.path());
  const ThreadsRestored restore;
  attend::set_num_threads(threads);

  const Dims q = dims_of(inputs[0]), k = dims_of(inputs[1]);
  const Index weights = q.d0 * rules.heads * q.d1 * k.d1;
  const std::string on = text(name, " on the ", attention.path(), " path, ", threads, " thread(s), ");
  const auto call = [&] { return attention(inputs[0], inputs[1], inputs[2], spec.mask); };
  const auto checked = [&](const std::string& what, auto&& forward) {
    return forward_checked<Scalar>(on + what, attention, contract.valid, contract.shape, forward);
  };

  // forward(), in the module's mode: with a workspace of its own, with one of ours twice, then on the other thread
  // count.
  const Attention& reader = attention;
  attend::AttentionWorkspace<Scalar> workspace;
  const auto forward = [&] { return reader.forward(inputs[0], inputs[1], inputs[2], spec.mask); };
  const auto forward_in = [&] { return reader.forward(inputs[0], inputs[1], inputs[2], spec.mask, workspace); };
  const State before = state_of(attention);
  std::vector<std::optional<Tensor3<Scalar>>> forwards;
  forwards.push_back(checked("forward()", forward));
  forwards.push_back(checked("forward(workspace)", forward_in));
  forwards.push_back(checked("forward(workspace), the workspace reused", forward_in));
  attend::set_num_threads(3 - threads);
  forwards.push_back(checked(text("forward(workspace) on ", 3 - threads, " thread(s)"), forward_in));
  attend::set_num_threads(threads);
  const State after = state_of(attention);
  expect(before.same_parameters(after) && before.same_weights(after), on, "forward() changed the module");

  // operator() in evaluation mode: forward()'s result, and attention_weights() throws exactly when the call was tiled.
  const bool training = attention.is_training();
  attention.eval();
  const auto Y = checked("operator() (evaluation)", call);
  if (Y) {
    for (const auto& F : forwards)
      expect(bytes_of(F->data(), F->size()) == bytes_of(Y->data(), Y->size()), on,
             "forward() is not bit for bit operator() in evaluation mode");
    const bool tiled = takes_tiled<Scalar>(attention.path(), weights);
    expect(state_of(attention).no_weights == tiled, on, "operator() (evaluation): attention_weights() ",
           tiled ? "returned after a tiled call" : "threw after a direct call");
    if (!tiled) expect_weights(attention, *Y, inputs, spec, rules, on + "operator() (evaluation)");
  }

  // operator() in the module's mode, on the path set, with dropout too.
  attention.train(training);
  const bool dropout_active = training && attention.dropout() > 0;
  const auto Z = checked(training ? "operator() (training)" : "operator() (evaluation), again", call);
  if (Z) {
    const bool tiled = takes_tiled<Scalar>(attention.path(), weights);
    expect(state_of(attention).no_weights == tiled, on, "operator(): attention_weights() ",
           tiled ? "returned after a tiled call" : "threw after a direct call");
    if (!tiled) expect_weights(attention, *Z, inputs, spec, rules, on + "operator()");
    if (!dropout_active)
      expect(bytes_of(Z->data(), Z->size()) == bytes_of(Y->data(), Y->size()), on,
             "operator() without dropout gave another result the second time");
    fuzz_backward<Scalar>(on, in, attention, inputs, dims_of(*Z));
  }
}

// Two calls of an attention module, with one change between them (see change()); then, for a module that chooses
// its path, fuzz_paths on the second call's arguments.
// Bytes: mode (flag), batch, queries, keys (mod 9), then for DotProductAttention the key width (mod 33), and when
// the values' width is free, that width (mod 33); the mask; queries, keys, values; the change; fuzz_paths's.
template <class Scalar, class Attention>
void fuzz_attention(const std::string& name, Input& in, Attention& attention, const AttentionRules& rules) {
  attention.train(in.flag());
  const Index batch = in.below(9), queries = in.below(9), keys = in.below(9);
  const Index key_width = rules.query_size >= 0 ? rules.key_size : in.below(33);
  const Index query_width = rules.query_size >= 0 ? rules.query_size : key_width;
  const Index value_width = rules.value_size >= 0 ? rules.value_size : in.below(33);
  auto spec = decode_mask(in, batch, queries, keys);
  if (!spec) return;
  std::vector<Tensor3<Scalar>> inputs;  // queries (batch, q, .), keys (batch, k, .), values (batch, k, .)
  inputs.push_back(in.tensor<Scalar>({batch, queries, query_width}));
  inputs.push_back(in.tensor<Scalar>({batch, keys, key_width}));
  inputs.push_back(in.tensor<Scalar>({batch, keys, value_width}));

  bool resized = false;
  Expected contract{};
  for (int call = 1; call <= 2; ++call) {
    if (call == 2 && change(in, attention, inputs, resized) == Change::mask) {
      const Index other_batch = in.below(9), other_queries = in.below(9), other_keys = in.below(9);
      auto other = decode_mask(in, other_batch, other_queries, other_keys);
      if (!other) return;
      spec = std::move(other);
    }
    contract = attention_contract(rules, inputs, *spec, resized);
    const std::string what =
        name + (attention.is_training() ? " (training), call " : " (evaluation), call ") + std::to_string(call);
    const auto Y = forward_checked<Scalar>(what, attention, contract.valid, contract.shape,
                                           [&] { return attention(inputs[0], inputs[1], inputs[2], spec->mask); });
    if (Y) expect_weights(attention, *Y, inputs, *spec, rules, what);
  }
  if constexpr (has_path<Attention>::value) fuzz_paths<Scalar>(name, in, attention, rules, inputs, *spec, contract);
}

// DotProductAttention(dropout): valid for dropout in [0, 1].
// Bytes: dropout, then fuzz_attention's.
template <class Scalar>
void fuzz_dot_product_attention(Input& in, attend::Generator& generator) {
  const Scalar dropout = in.dropout<Scalar>();
  std::optional<attend::DotProductAttention<Scalar>> attention;
  const bool valid = dropout >= 0 && dropout <= 1;
  if (!run_expecting("DotProductAttention(dropout)", valid, [&] { attention.emplace(dropout, generator); })) return;
  fuzz_attention<Scalar>("DotProductAttention", in, *attention, {-1, -1, -1, -1, 1, false});
}

// AdditiveAttention(key_size, query_size, num_hiddens, dropout): valid for sizes >= 1 and dropout in [0, 1].
// Bytes: key_size, query_size, num_hiddens (size_argument(32)), dropout, then fuzz_attention's.
template <class Scalar>
void fuzz_additive_attention(Input& in, attend::Generator& generator) {
  const Index key_size = in.size_argument(32), query_size = in.size_argument(32), hiddens = in.size_argument(32);
  const Scalar dropout = in.dropout<Scalar>();
  std::optional<attend::AdditiveAttention<Scalar>> attention;
  const bool valid = key_size >= 1 && query_size >= 1 && hiddens >= 1 && dropout >= 0 && dropout <= 1;
  if (!run_expecting("AdditiveAttention(key_size, query_size, num_hiddens, dropout)", valid,
                     [&] { attention.emplace(key_size, query_size, hiddens, dropout, generator); }))
    return;
  fuzz_attention<Scalar>("AdditiveAttention", in, *attention, {query_size, key_size, -1, -1, 1, true});
}

// MultiHeadAttention(key_size, query_size, value_size, num_hiddens, num_heads, dropout, bias): valid for sizes >= 1,
// num_heads >= 1 dividing num_hiddens, dropout in [0, 1].
// Bytes: num_heads (size_argument(8)); a byte whose bit 0 says num_hiddens is free (size_argument(32)) rather than
// num_heads * (1 + byte mod 4); key_size, query_size, value_size (size_argument(32)); dropout; bias (flag); then
// fuzz_attention's.
template <class Scalar>
void fuzz_multi_head_attention(Input& in, attend::Generator& generator) {
  const Index heads = in.size_argument(8);
  const bool free_width = in.flag() || heads < 1;
  const Index hiddens = free_width ? in.size_argument(32) : heads * (1 + in.below(4));
  const Index key_size = in.size_argument(32), query_size = in.size_argument(32), value_size = in.size_argument(32);
  const Scalar dropout = in.dropout<Scalar>();
  const bool bias = in.flag();
  std::optional<attend::MultiHeadAttention<Scalar>> attention;
  const bool valid = key_size >= 1 && query_size >= 1 && value_size >= 1 && hiddens >= 1 && heads >= 1 &&
                     hiddens % heads == 0 && dropout >= 0 && dropout <= 1;
  if (!run_expecting(
          "MultiHeadAttention(key_size, query_size, value_size, num_hiddens, num_heads, dropout, bias)", valid,
          [&] { attention.emplace(key_size, query_size, value_size, hiddens, heads, dropout, bias, generator); }))
    return;
  expect(attention->num_heads() == heads, "MultiHeadAttention: num_heads() is ", attention->num_heads(),
         ", constructed with ", heads);
  fuzz_attention<Scalar>("MultiHeadAttention", in, *attention,
                         {query_size, key_size, value_size, hiddens, heads, false});
}

// Two calls of a module with one input X (batch, steps, in_width) -> (batch, steps, out_width), valid when X's
// width is in_width and its steps at most max_steps; `check` looks further at a result of moderate inputs.
// Bytes: mode (flag), batch, steps (mod 9), X, the change.
template <class Scalar, class Module, class Check>
void fuzz_layer(const std::string& name, Input& in, Module& module, Index in_width, Index out_width, Index max_steps,
                Check&& check) {
  module.train(in.flag());
  const Index batch = in.below(9), steps = in.below(9);
  std::vector<Tensor3<Scalar>> inputs;
  inputs.push_back(in.tensor<Scalar>({batch, steps, in_width}));  // X (batch, steps, in_width)
  bool resized = false;
  for (int call = 1; call <= 2; ++call) {
    if (call == 2) change(in, module, inputs, resized);
    const Tensor3<Scalar>& X = inputs[0];
    const Dims d = dims_of(X);
    const bool valid = !resized && d.d2 == in_width && d.d1 <= max_steps;
    const std::string what =
        name + (module.is_training() ? " (training), call " : " (evaluation), call ") + std::to_string(call);
    const auto Y = forward_checked<Scalar>(what, module, valid, {d.d0, d.d1, out_width}, [&] { return module(X); });
    if (Y && moderate(X)) {
      expect_finite(*Y, what);
      check(X, *Y, what);
    }
  }
}

constexpr Index any_steps = std::numeric_limits<Index>::max();

// Linear(in_features, out_features, bias): valid for sizes >= 1.
// Bytes: in_features, out_features (size_argument(32)), bias (flag), then fuzz_layer's.
template <class Scalar>
void fuzz_linear(Input& in, attend::Generator& generator) {
  const Index in_features = in.size_argument(32), out_features = in.size_argument(32);
  const bool bias = in.flag();
  std::optional<attend::Linear<Scalar>> linear;
  if (!run_expecting("Linear(in_features, out_features, bias)", in_features >= 1 && out_features >= 1,
                     [&] { linear.emplace(in_features, out_features, bias, generator); }))
    return;
  fuzz_layer<Scalar>("Linear", in, *linear, in_features, out_features, any_steps, [](auto&&...) {});
}

// PositionalEncoding(num_hiddens, dropout, max_len): valid for num_hiddens, max_len >= 1 and dropout in [0, 1];
// P() is (max_len, num_hiddens), in [-1, 1]; the forward pass needs steps <= max_len.
// Bytes: num_hiddens (size_argument(32)), dropout, max_len (size_argument(8)), then fuzz_layer's.
template <class Scalar>
void fuzz_positional_encoding(Input& in, attend::Generator& generator) {
  const Index hiddens = in.size_argument(32);
  const Scalar dropout = in.dropout<Scalar>();
  const Index max_len = in.size_argument(8);
  std::optional<attend::PositionalEncoding<Scalar>> encoding;
  const bool valid = hiddens >= 1 && max_len >= 1 && dropout >= 0 && dropout <= 1;
  if (!run_expecting("PositionalEncoding(num_hiddens, dropout, max_len)", valid,
                     [&] { encoding.emplace(hiddens, dropout, max_len, generator); }))
    return;
  const auto& P = encoding->P();  // (max_len, num_hiddens)
  expect(P.rows() == max_len && P.cols() == hiddens, "PositionalEncoding: P() has shape (", P.rows(), ", ", P.cols(),
         "), expected (", max_len, ", ", hiddens, ")");
  expect((P.array().abs() <= Scalar(1)).all(), "PositionalEncoding: P() has an entry outside [-1, 1]");
  fuzz_layer<Scalar>("PositionalEncoding", in, *encoding, hiddens, hiddens, max_len,
                     [&](const Tensor3<Scalar>& X, const Tensor3<Scalar>& Y, const std::string& what) {
                       if (encoding->is_training() && encoding->dropout() > 0) return;
                       for (Index b = 0; b < X.dimension(0); ++b)
                         for (Index s = 0; s < X.dimension(1); ++s)
                           for (Index i = 0; i < X.dimension(2); ++i)
                             expect(same_bits(Y(b, s, i), Scalar(X(b, s, i) + P(s, i))), what, ": Y(", b, ", ", s, ", ",
                                    i, ") is not X + P");
                     });
}

// RNN(input_size, hidden_size): valid for sizes >= 1; every h_t is a tanh, in [-1, 1].
// Bytes: input_size, hidden_size (size_argument(32)), then fuzz_layer's.
template <class Scalar>
void fuzz_rnn(Input& in, attend::Generator& generator) {
  const Index input_size = in.size_argument(32), hidden_size = in.size_argument(32);
  std::optional<attend::RNN<Scalar>> rnn;
  if (!run_expecting("RNN(input_size, hidden_size)", input_size >= 1 && hidden_size >= 1,
                     [&] { rnn.emplace(input_size, hidden_size, generator); }))
    return;
  fuzz_layer<Scalar>("RNN", in, *rnn, input_size, hidden_size, any_steps,
                     [](const Tensor3<Scalar>&, const Tensor3<Scalar>& H, const std::string& what) {
                       for (Index i = 0; i < H.size(); ++i)
                         expect(std::abs(H.data()[i]) <= Scalar(1), what, ": h = ", H.data()[i], " is outside [-1, 1]");
                     });
}

// Conv1d(in_channels, out_channels, kernel_size, bias): valid for sizes >= 1.
// Bytes: in_channels, out_channels (size_argument(32)), kernel_size (size_argument(8)), bias (flag), then
// fuzz_layer's.
template <class Scalar>
void fuzz_conv1d(Input& in, attend::Generator& generator) {
  const Index in_channels = in.size_argument(32), out_channels = in.size_argument(32);
  const Index kernel_size = in.size_argument(8);
  const bool bias = in.flag();
  std::optional<attend::Conv1d<Scalar>> conv;
  if (!run_expecting("Conv1d(in_channels, out_channels, kernel_size, bias)",
                     in_channels >= 1 && out_channels >= 1 && kernel_size >= 1,
                     [&] { conv.emplace(in_channels, out_channels, kernel_size, bias, generator); }))
    return;
  fuzz_layer<Scalar>("Conv1d", in, *conv, in_channels, out_channels, any_steps, [](auto&&...) {});
}

// The activations by a byte: 0-3 the enum's values, 4 Activation(7), outside it.
inline attend::Activation activation_argument(Input& in) {
  const Index b = in.below(5);
  return static_cast<attend::Activation>(b == 4 ? 7 : b);
}
inline bool known_activation(attend::Activation a) { return static_cast<int>(a) >= 0 && static_cast<int>(a) <= 3; }

// LayerNorm(normalized_shape) or RMSNorm(dim): valid for sizes >= 1; eval-mode outputs of LayerNorm with its initial
// parameters have rows of mean ~0.
// Bytes: normalized_shape (size_argument(32)), then fuzz_layer's.
template <class Scalar, class Norm>
void fuzz_norm(const char* name, Input& in) {
  const Index features = in.size_argument(32);
  std::optional<Norm> norm;
  if (!run_expecting(std::string(name) + "(normalized_shape)", features >= 1, [&] { norm.emplace(features); })) return;
  fuzz_layer<Scalar>(name, in, *norm, features, features, any_steps, [](auto&&...) {});
}

// PositionWiseFFN(ffn_num_input, ffn_num_hiddens, ffn_num_outputs, activation): valid for sizes >= 1 and an
// activation of the enum.
// Bytes: the three sizes (size_argument(32)), activation (mod 5), then fuzz_layer's.
template <class Scalar>
void fuzz_position_wise_ffn(Input& in, attend::Generator& generator) {
  const Index input = in.size_argument(32), hiddens = in.size_argument(32), outputs = in.size_argument(32);
  const attend::Activation activation = activation_argument(in);
  std::optional<attend::PositionWiseFFN<Scalar>> ffn;
  if (!run_expecting("PositionWiseFFN(ffn_num_input, ffn_num_hiddens, ffn_num_outputs, activation)",
                     input >= 1 && hiddens >= 1 && outputs >= 1 && known_activation(activation),
                     [&] { ffn.emplace(input, hiddens, outputs, activation, generator); }))
    return;
  fuzz_layer<Scalar>("PositionWiseFFN", in, *ffn, input, outputs, any_steps, [](auto&&...) {});
}

// GatedFFN(num_hiddens, ffn_num_hiddens, activation, bias): valid for sizes >= 1 and an activation of the enum.
// Bytes: the two sizes (size_argument(32)), activation (mod 5), bias (flag), then fuzz_layer's.
template <class Scalar>
void fuzz_gated_ffn(Input& in, attend::Generator& generator) {
  const Index hiddens = in.size_argument(32), ffn_hiddens = in.size_argument(32);
  const attend::Activation activation = activation_argument(in);
  const bool bias = in.flag();
  std::optional<attend::GatedFFN<Scalar>> ffn;
  if (!run_expecting("GatedFFN(num_hiddens, ffn_num_hiddens, activation, bias)",
                     hiddens >= 1 && ffn_hiddens >= 1 && known_activation(activation),
                     [&] { ffn.emplace(hiddens, ffn_hiddens, activation, bias, generator); }))
    return;
  fuzz_layer<Scalar>("GatedFFN", in, *ffn, hiddens, hiddens, any_steps, [](auto&&...) {});
}

// TransformerEncoderBlock(num_hiddens, ffn_num_hiddens, num_heads, dropout, use_bias, activation, norm_first): valid
// for sizes >= 1, num_hiddens divisible by num_heads, dropout in [0, 1] and an activation of the enum; no mask.
// Bytes: num_hiddens, ffn_num_hiddens (size_argument(16)), num_heads (size_argument(4)), dropout, use_bias (flag),
// activation (mod 5), norm_first (flag), then fuzz_layer's.
template <class Scalar>
void fuzz_transformer_encoder_block(Input& in, attend::Generator& generator) {
  const Index hiddens = in.size_argument(16), ffn_hiddens = in.size_argument(16), heads = in.size_argument(4);
  const Scalar dropout = in.dropout<Scalar>();
  const bool bias = in.flag();
  const attend::Activation activation = activation_argument(in);
  const bool norm_first = in.flag();
  const bool valid = hiddens >= 1 && ffn_hiddens >= 1 && heads >= 1 && hiddens % heads == 0 && dropout >= 0 &&
                     dropout <= 1 && known_activation(activation);
  std::optional<attend::TransformerEncoderBlock<Scalar>> block;
  if (!run_expecting("TransformerEncoderBlock(num_hiddens, ffn_num_hiddens, num_heads, dropout, ...)", valid, [&] {
        block.emplace(hiddens, ffn_hiddens, heads, dropout, bias, activation, norm_first, Scalar(1e-5), generator);
      }))
    return;
  fuzz_layer<Scalar>("TransformerEncoderBlock", in, *block, hiddens, hiddens, any_steps, [](auto&&...) {});
}

// Token ids (batch, steps): batch (mod 3), steps (mod 5), then one byte per id, the byte minus 2 (-2 .. 253); valid
// becomes false unless every id is in [0, vocabulary).
attend::Matrix<Index> token_ids(Input& in, Index vocabulary, bool& valid) {
  const Index batch = in.below(3), steps = in.below(5);
  attend::Matrix<Index> tokens(batch, steps);
  valid = true;
  for (Index b = 0; b < batch; ++b)
    for (Index t = 0; t < steps; ++t) {
      tokens(b, t) = static_cast<Index>(in.byte()) - 2;
      valid = valid && tokens(b, t) >= 0 && tokens(b, t) < vocabulary;
    }
  return tokens;
}

// Embedding(num_embeddings, embedding_dim): valid for sizes >= 1. Then token ids, valid when every one is in
// [0, num_embeddings): operator() gives (batch, steps, embedding_dim), row (b, t) weight's row tokens(b, t) bit for
// bit; backward() takes a gradient of that shape and refuses another.
// Bytes: num_embeddings, embedding_dim (size_argument(12)), mode (flag), then token_ids'.
template <class Scalar>
void fuzz_embedding(Input& in, attend::Generator& generator) {
  const Index count = in.size_argument(12), dim = in.size_argument(12);
  std::optional<attend::Embedding<Scalar>> embedding;
  if (!run_expecting("Embedding(num_embeddings, embedding_dim)", count >= 1 && dim >= 1,
                     [&] { embedding.emplace(count, dim, generator); }))
    return;
  embedding->train(in.flag());
  bool valid = true;
  const attend::Matrix<Index> tokens = token_ids(in, count, valid);
  const Index batch = tokens.rows(), steps = tokens.cols();
  const auto Y = forward_checked<Scalar>("Embedding", *embedding, valid, {batch, steps, dim},
                                         [&] { return (*embedding)(tokens); });
  if (!Y) return;
  for (Index b = 0; b < batch; ++b)
    for (Index t = 0; t < steps; ++t)
      expect(bytes_of(Y->data() + (b * steps + t) * dim, dim) ==
                 bytes_of(embedding->weight().data() + tokens(b, t) * dim, dim),
             "Embedding: row (", b, ", ", t, ") is not weight's row ", tokens(b, t));
  run_expecting("Embedding backward", true, [&] { embedding->backward(*Y); });
  run_expecting("Embedding backward of another shape", false,
                [&] { embedding->backward(Tensor3<Scalar>(batch, steps, dim + 1)); });
}

// AddNorm(normalized_shape, dropout): valid for normalized_shape >= 1 and dropout in [0, 1]. Then X and Y, valid when
// both are (batch, steps, normalized_shape) of the same batch and steps: the output has that shape, finite on
// moderate inputs, and in evaluation mode forward() gives its bits; backward() returns gradients of X's and Y's shape.
// Bytes: normalized_shape (size_argument(16)), dropout, mode (flag), batch, steps (mod 9), X, then Y's shape
// (size_near per axis) and Y.
template <class Scalar>
void fuzz_add_norm(Input& in, attend::Generator& generator) {
  const Index features = in.size_argument(16);
  const Scalar dropout = in.dropout<Scalar>();
  std::optional<attend::AddNorm<Scalar>> add_norm;
  if (!run_expecting("AddNorm(normalized_shape, dropout)", features >= 1 && dropout >= 0 && dropout <= 1,
                     [&] { add_norm.emplace(features, dropout, Scalar(1e-5), generator); }))
    return;
  add_norm->train(in.flag());
  const Index batch = in.below(9), steps = in.below(9);
  const Tensor3<Scalar> X = in.tensor<Scalar>({batch, steps, features});
  const Dims y_dims{in.size_near(batch), in.size_near(steps), in.size_near(features)};
  const Tensor3<Scalar> Y = in.tensor<Scalar>(y_dims);
  const bool valid = y_dims.d0 == batch && y_dims.d1 == steps && y_dims.d2 == features;
  const std::string what = std::string("AddNorm (") + (add_norm->is_training() ? "training" : "evaluation") + ")";
  const auto out = forward_checked<Scalar>(what, *add_norm, valid, {batch, steps, features},
                                           [&] { return (*add_norm)(X, Y); });
  if (!out) return;
  if (moderate(X) && moderate(Y)) expect_finite(*out, what);
  if (!add_norm->is_training()) {
    const Tensor3<Scalar> again = add_norm->forward(X, Y);
    expect(bytes_of(again.data(), again.size()) == bytes_of(out->data(), out->size()), what,
           ": forward() differs from operator()");
  }
  attend::AddNormGradients<Scalar> g;
  run_expecting(what + " backward", true, [&] { g = add_norm->backward(*out); });
  expect_shape(g.X, {batch, steps, features}, what + " backward, dX");
  expect_shape(g.Y, {batch, steps, features}, what + " backward, dY");
}

// CausalLM(config): valid when every field is in range, restated here: vocab_size, num_hiddens, num_heads and
// ffn_num_hiddens and num_layers >= 1; num_kv_heads, head_dim, max_positions and sliding_window >= 0; the key/value heads
// (num_kv_heads, or num_heads for 0) divide num_heads; head_dim > 0 or num_heads divides num_hiddens; an activation of
// the enum; an even head dimension with rotary positions; a plain (not gated) FFN with biases.
// Then tokens (batch, steps), valid when every id is in [0, vocab_size) and, with learned positions, steps <=
// max_positions: operator() (in the mode the flag says) gives (batch, steps, vocab_size), forward() the same bits,
// finite; backward() takes a grad_output of that shape and refuses another. Then decoding: the same tokens less the
// last step through a cache of the steps' capacity, then the last step, whose logits are those of the whole call
// (within rounding); a step more than the cache holds throws and leaves the cache as it was.
// Bytes: vocab_size, num_hiddens (size_argument(12)), num_layers (size_argument(2)), num_heads, num_kv_heads
// (size_argument(4)), head_dim (size_argument(6)), ffn_num_hiddens (size_argument(12)), a byte of flags (bit 0
// LayerNorm, 1 plain FFN, 2 attention biases, 3 FFN biases, 4 tied head, 5 no rotary positions), activation (mod 5),
// max_positions (size_argument(6)), sliding_window (size_argument(3)), mode (flag), then token_ids'.
template <class Scalar>
void fuzz_causal_lm(Input& in, attend::Generator& generator) {
  attend::CausalLMConfig c;
  c.vocab_size = in.size_argument(12), c.num_hiddens = in.size_argument(12), c.num_layers = in.size_argument(2);
  c.num_heads = in.size_argument(4), c.num_kv_heads = in.size_argument(4), c.head_dim = in.size_argument(6);
  c.ffn_num_hiddens = in.size_argument(12);
  const std::uint8_t flags = in.byte();
  c.rms_norm = !(flags & 1), c.gated_ffn = !(flags & 2), c.attention_bias = (flags & 4) != 0;
  c.ffn_bias = (flags & 8) != 0, c.tie_word_embeddings = (flags & 16) != 0, c.rope_theta = flags & 32 ? 0 : 10000;
  c.activation = activation_argument(in);
  c.max_positions = in.size_argument(6), c.sliding_window = in.size_argument(3);
  const Index kv = c.num_kv_heads > 0 ? c.num_kv_heads : c.num_heads;
  const Index head_dim = c.head_dim > 0 ? c.head_dim : (c.num_heads > 0 ? c.num_hiddens / c.num_heads : 0);
  const bool valid_config =
      c.vocab_size >= 1 && c.num_hiddens >= 1 && c.num_heads >= 1 && c.ffn_num_hiddens >= 1 && c.num_layers >= 1 &&
      c.num_kv_heads >= 0 && c.head_dim >= 0 && c.max_positions >= 0 && c.sliding_window >= 0 && kv >= 1 &&
      c.num_heads % kv == 0 && (c.head_dim > 0 || c.num_hiddens % c.num_heads == 0) &&
      known_activation(c.activation) && (c.rope_theta == 0 || head_dim % 2 == 0) && (c.gated_ffn || c.ffn_bias);
  std::optional<attend::CausalLM<Scalar>> model;
  if (!run_expecting("CausalLM(config)", valid_config, [&] { model.emplace(c, generator); })) return;

  model->train(in.flag());
  bool ids_valid = true;
  const attend::Matrix<Index> tokens = token_ids(in, c.vocab_size, ids_valid);
  const Index batch = tokens.rows(), steps = tokens.cols();
  const bool valid = ids_valid && (c.max_positions == 0 || steps <= c.max_positions);
  const std::string what = std::string("CausalLM (") + (model->is_training() ? "training" : "evaluation") + ")";
  const auto logits = forward_checked<Scalar>(what, *model, valid, {batch, steps, c.vocab_size},
                                              [&] { return (*model)(tokens); });
  if (!logits) return;
  expect_finite(*logits, what);
  const Tensor3<Scalar> again = model->forward(tokens);  // (batch, steps, vocab_size)
  expect(bytes_of(again.data(), again.size()) == bytes_of(logits->data(), logits->size()), what,
         ": forward() differs from operator()");
  run_expecting(what + " backward", true, [&] { model->backward(*logits); });
  run_expecting(what + " backward of another shape", false,
                [&] { model->backward(Tensor3<Scalar>(batch, steps, c.vocab_size + 1)); });
  if (batch == 0 || steps == 0) return;

  attend::CausalLMCache<Scalar> cache = model->make_cache(batch, steps);
  const attend::Matrix<Index> prefix = tokens.leftCols(steps - 1), last = tokens.rightCols(1);
  const std::string decoding = what + ", decoding";
  if (steps > 1) {
    forward_checked<Scalar>(decoding, *model, true, {batch, steps - 1, c.vocab_size},
                            [&] { return (*model)(prefix, cache); });
    expect(cache.size() == steps - 1, decoding, ": the cache holds ", cache.size(),
           " steps after ", steps - 1);
  }
  const auto step = forward_checked<Scalar>(decoding, *model, true, {batch, 1, c.vocab_size},
                                            [&] { return (*model)(last, cache); });
  const Scalar tolerance = std::is_same_v<Scalar, float> ? Scalar(1e-4) : Scalar(1e-10);
  Scalar largest = 0;
  for (Index i = 0; i < logits->size(); ++i) largest = std::max(largest, std::abs(logits->data()[i]));
  for (Index b = 0; b < batch; ++b)
    for (Index v = 0; v < c.vocab_size; ++v)
      expect(std::abs((*step)(b, 0, v) - (*logits)(b, steps - 1, v)) <= tolerance * (1 + largest), decoding,
             ": logits(", b, ", ", v, ") of the last step decoded ", (*step)(b, 0, v), ", of the whole call ",
             (*logits)(b, steps - 1, v));
  const Index held = cache.size();
  run_expecting(decoding + " past the cache's capacity", false, [&] { (*model)(last, cache); });
  expect(cache.size() == held, decoding, ": a call that threw changed the cache from ", held, " to ", cache.size(),
         " steps");
}

template <class Scalar>
void fuzz(unsigned entry, Input& in) {
  attend::Generator generator(entry);  // parameters and dropout masks: the same for the same input
  switch (entry) {
    case 0:
      return fuzz_masked_softmax<Scalar>(in);
    case 1:
      return fuzz_transpose_qkv<Scalar>(in);
    case 2:
      return fuzz_transpose_output<Scalar>(in);
    case 3:
      return fuzz_linear<Scalar>(in, generator);
    case 4:
      return fuzz_dot_product_attention<Scalar>(in, generator);
    case 5:
      return fuzz_additive_attention<Scalar>(in, generator);
    case 6:
      return fuzz_multi_head_attention<Scalar>(in, generator);
    case 7:
      return fuzz_positional_encoding<Scalar>(in, generator);
    case 8:
      return fuzz_rnn<Scalar>(in, generator);
    case 9:
      return fuzz_conv1d<Scalar>(in, generator);
    case 10:
      return fuzz_norm<Scalar, attend::LayerNorm<Scalar>>("LayerNorm", in);
    case 11:
      return fuzz_norm<Scalar, attend::RMSNorm<Scalar>>("RMSNorm", in);
    case 12:
      return fuzz_position_wise_ffn<Scalar>(in, generator);
    case 13:
      return fuzz_gated_ffn<Scalar>(in, generator);
    case 14:
      return fuzz_transformer_encoder_block<Scalar>(in, generator);
    case 15:
      return fuzz_causal_lm<Scalar>(in, generator);
    case 16:
      return fuzz_embedding<Scalar>(in, generator);
    default:
      return fuzz_add_norm<Scalar>(in, generator);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  const unsigned entry = in.byte() % 18;
  if (in.flag())
    fuzz<double>(entry, in);
  else
    fuzz<float>(entry, in);
  return 0;
}
