// attend/scaled_dot_product_attention.hpp — attention as a function of Q, K and V: grouped-query heads, every mask
// (valid lengths, causal, window, keep tensors), the score options (scale, softcap, ALiBi, additive bias), the
// log-sum-exp of each row, and the backward pass from it.
//
//   queries (batch, Q, num_heads * d), keys (batch, K, num_kv_heads * d), values (batch, K, num_kv_heads * dv)
//   -> output (batch, Q, num_heads * dv); lse (batch, Q, num_heads), when asked for
//
// Query head h reads key/value head h / (num_heads / num_kv_heads) in place (no copy per query head). Query q sits at
// the aligned position p = q + K - Q (bottom-right, as Mask::causal()). Each score is scale * q.k, then the options
// of attend/score_options.hpp, then the mask; the softmax runs over the keys the row sees, and lse is the log of its
// normaliser (-inf for a row that sees no key). A row that sees no key by the mask's structure follows the mask's
// FullyMasked rule (attend/mask.hpp): a zero row, or d2l's mean of every value.
//
// Every tensor argument is a Tensor3 or a map of the caller's memory (ConstTensorMap3, TensorMap3), read in place;
// any other Eigen expression does not compile. The overload with an out-parameter writes into the caller's buffer and,
// from the second call of a shape on, allocates nothing. The overload with a KVCache reads the cache's steps in place.
// Results do not depend on the number of threads (attend/threads.hpp). The work is done by detail/core/attention.hpp.
#pragma once

#include <attend/attention_gradients.hpp>
#include <attend/config.hpp>
#include <attend/detail/bf16_products.hpp>
#include <attend/detail/core/attention.hpp>
#include <attend/detail/views.hpp>
#include <attend/kv_cache.hpp>
#include <attend/mask.hpp>
#include <attend/score_options.hpp>
#include <attend/tensor.hpp>
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

// The sizes of one call.
struct AttentionShape {
  Index batch, queries, keys, heads, kv_heads, dim, value_dim;
};

// Throws std::invalid_argument, naming `where` and the argument, unless the score options fit the call.
template <class Scalar>
void require_score_options(const ScoreOptions<Scalar>& options, const AttentionShape& s, const char* where) {
  using Compute = compute_type<Scalar>;
  require(std::isfinite(static_cast<Compute>(options.scale)), where,
          ": options.scale must be finite (0 means 1 / sqrt(head_dim)), got ", options.scale);
  require(std::isfinite(static_cast<Compute>(options.softcap)) && options.softcap >= Scalar(0), where,
          ": options.softcap must be >= 0 and finite (0: none), got ", options.softcap);
  require(options.alibi_slopes.empty() || static_cast<Index>(options.alibi_slopes.size()) == s.heads, where,
          ": options.alibi_slopes must be empty or hold one slope per query head, ", s.heads, ", got ",
          options.alibi_slopes.size());
  if (options.bias.size() == 0) return;
  const auto& d = options.bias.dimensions();
  const bool rows = d[0] == s.batch * s.heads || d[0] == s.batch || d[0] == 1;
  require(rows && d[1] == s.queries && d[2] == s.keys, where, ": options.bias must have shape (", s.batch * s.heads,
          " | ", s.batch, " | 1, ", s.queries, ", ", s.keys, ") (batch * num_heads | batch | 1, queries, keys), got ",
          shape_text(d));
}

// Checks the queries and the heads, then keys and values of `keys` steps; returns the call's sizes.
template <class Scalar, class QueryMap>
AttentionShape attention_shape(const QueryMap& queries, Index num_heads, Index num_kv_heads, const char* where) {
  require(num_heads >= 1, where, ": num_heads must be >= 1, got ", num_heads);
  require(num_kv_heads >= 1 && num_heads % num_kv_heads == 0, where,
          ": num_kv_heads must be >= 1 and divide num_heads (", num_heads, "), got ", num_kv_heads);
  require(queries.dimension(2) % num_heads == 0, where, ": queries must have a multiple of num_heads (", num_heads,
          ") features, got ", queries.dimension(2));
  return {queries.dimension(0), queries.dimension(1), 0, num_heads, num_kv_heads, queries.dimension(2) / num_heads, 0};
}

template <class Scalar, class KeyMap, class ValueMap>
void require_keys_values(const KeyMap& keys, const ValueMap& values, AttentionShape& s, const char* where) {
  require(keys.dimension(0) == s.batch, where, ": keys must have batch ", s.batch, " (the queries'), got ",
          keys.dimension(0));
  require(values.dimension(0) == s.batch && values.dimension(1) == keys.dimension(1), where,
          ": values must have shape (", s.batch, ", ", keys.dimension(1), ", ...) like the keys, got ",
          shape_text(values.dimensions()));
  require(keys.dimension(2) == s.kv_heads * s.dim, where, ": keys must have num_kv_heads * head_dim = ", s.kv_heads,
          " * ", s.dim, " = ", s.kv_heads * s.dim, " features (head_dim from the queries), got ", keys.dimension(2));
  require(values.dimension(2) % s.kv_heads == 0, where, ": values must have a multiple of num_kv_heads (", s.kv_heads,
          ") features, got ", values.dimension(2));
  s.keys = keys.dimension(1);
  s.value_dim = values.dimension(2) / s.kv_heads;
}

// out's shape, (batch, queries, num_heads * value_dim).
inline std::array<Index, 3> output_shape(const AttentionShape& s) {
  return {s.batch, s.queries, s.heads * s.value_dim};
}
constexpr const char* output_axes = "(batch, queries, num_heads * value_dim)";

// The core's memory for the functional calls, one per thread and Scalar.
template <class Scalar>
core::Buffers<Scalar>& attention_buffers() {
  thread_local core::Buffers<Scalar> buffers;
  return buffers;
}

// The float copies of a bfloat16 call's operands.
template <class Map>
Tensor3<float> widened3(Isa isa, const Map& X) {
  Tensor3<float> wide(X.dimensions());
  widen(isa, X.data(), wide.size(), wide.data());
  return wide;
}
template <class Scalar>
ScoreOptions<float> widened_options(Isa isa, const ScoreOptions<Scalar>& options) {
  ScoreOptions<float> wide;
  wide.scale = static_cast<float>(options.scale);
  wide.softcap = static_cast<float>(options.softcap);
  for (const Scalar& slope : options.alibi_slopes) wide.alibi_slopes.push_back(static_cast<float>(slope));
  wide.bias = widened3(isa, options.bias);
  return wide;
}

// A compact float copy of heads like X at `to`: head h of batch row b is the (length, dim) rows from
// ((b * count + h) * length) * dim on.
template <class Element, class From>
Heads<Element> compact_heads(const Heads<From>& X, Element* to) {
  return {to, X.dim, X.count * X.length, X.batch, X.length, X.count, X.dim, X.length * X.dim};
}
// X widened into `to` (X.batch * X.count * X.length * X.dim floats); returns the copy's view.
inline Heads<const float> widened_heads(Isa isa, const Heads<const bfloat16>& X, float* to) {
  const Heads<float> wide = compact_heads<float>(X, to);
  if (X.length > 0 && X.dim > 0)
    for (Index b = 0; b < X.batch; ++b)
      for (Index h = 0; h < X.count; ++h) {
        if (X.row_stride == X.dim) {  // the head's steps one after another: one run
          widen(isa, X.at(b, h, 0), X.length * X.dim, wide.at(b, h, 0));
          continue;
        }
        for (Index t = 0; t < X.length; ++t) widen(isa, X.at(b, h, t), X.dim, wide.at(b, h, t));
      }
  return {wide.data, wide.row_stride, wide.batch_rows, wide.batch, wide.length, wide.count, wide.dim, wide.head_stride};
}
// out = wide, each element rounded to bfloat16 once.
inline void narrowed_heads(Isa isa, const Heads<float>& wide, const Heads<bfloat16>& out) {
  if (out.length == 0 || out.dim == 0) return;
  for (Index b = 0; b < out.batch; ++b)
    for (Index h = 0; h < out.count; ++h)
      for (Index t = 0; t < out.length; ++t) narrow(isa, wide.at(b, h, t), out.dim, out.at(b, h, t));
}
// out = wide, and *lse (resized to (batch, queries, heads)) = wide_lse when lse is not null, each element rounded to
// bfloat16 once; wide_lse: (batch, queries, heads) contiguous.
inline void rounded_results(Isa isa, const Heads<float>& wide, const float* wide_lse, const Heads<bfloat16>& out,
                            Tensor3<bfloat16>* lse) {
  narrowed_heads(isa, wide, out);
  if (lse == nullptr) return;
  lse->resize(out.batch, out.length, out.count);
  narrow(isa, wide_lse, lse->size(), lse->data());
}
template <class Element>
Index heads_size(const Heads<Element>& X) {
  return X.batch * X.count * X.length * X.dim;
}
// Steps first .. first + count - 1 of X.
inline Heads<const bfloat16> steps_of(const Heads<const bfloat16>& X, Index first, Index count) {
  Heads<const bfloat16> part = X;
  part.data += first * X.row_stride;
  part.length = count;
  return part;
}

// Whether a bfloat16 call widening its operands takes its keys in chunks (tuning::bf16_key_chunk): a decoding call
// on a level without bfloat16 dot products against more keys than a chunk, under no mask or a causal one and no score
// option that depends on a key's position (ALiBi, a bias), so that every chunk but the last is seen whole by every
// query.
inline bool chunks_keys(const Heads<const bfloat16>& Q, const Heads<const bfloat16>& K, const Mask& mask,
                        const ScoreOptions<bfloat16>& options) {
  const bool causal_only =
      mask.is_causal() && mask.valid_lens().empty() && !mask.has_window() && !mask.has_elementwise();
  return Q.length <= tuning::decode_queries && K.length > tuning::bf16_key_chunk && (mask.empty() || causal_only) &&
         options.alibi_slopes.empty() && options.bias.size() == 0;
}

template <class Scalar>
void attention_heads(const Heads<const Scalar>& Q, const Heads<const Scalar>& K, const Heads<const Scalar>& V,
                     const Mask& mask, const ScoreOptions<Scalar>& options, const AttentionDropout& dropout,
                     Tensor3<Scalar>* lse, const Heads<Scalar>& out, core::Buffers<Scalar>& buffers);

// Attention of bfloat16 heads, out and lse rounded once. On a level with bfloat16 dot products, for at most
// decode_queries queries (a decoding step) or where they run at the multiply-add's rate (pairs_at_full_rate): the
// float core reads Q, K and V in place (core::Call<float, bfloat16>), its output and lse in buffers.widened.
// Otherwise the float core on widened copies in buffers.widened: Q is widened once; the keys and values in one piece,
// or, when chunks_keys, a chunk at a time into a buffer that stays in cache, with no mask for the chunks every query sees whole and the call's causal mask for the last (aligned
// bottom-right on it, as on the whole). The chunks' outputs are merged in key order by their log-sum-exp:
// O = (e^(L - M) O + e^(l - M) o) / (e^(L - M) + e^(l - M)), L = M + log(e^(L - M) + e^(l - M)), M = max(L, l).
inline void reduced_attention_heads(const Heads<const bfloat16>& Q, const Heads<const bfloat16>& K,
                                    const Heads<const bfloat16>& V, const Mask& mask,
                                    const ScoreOptions<bfloat16>& options, const AttentionDropout& dropout,
                                    Tensor3<bfloat16>* lse, const Heads<bfloat16>& out,
                                    core::Buffers<bfloat16>& buffers) {
  const Isa isa = active_isa();
  const ScoreOptions<float> wide_options = widened_options(isa, options);
  if (kernels<float>().bf16_scores != nullptr && (Q.length <= tuning::decode_queries || pairs_at_full_rate())) {
    const core::ScoreRule<float> rule = core::score_rule(wide_options, Q.batch, Q.count, Q.length, K.length, Q.dim);
    const Index o = heads_size(out), rows = Q.batch * Q.length * Q.count;
    buffers.widened.resize(o + rows);
    float* const wide_out = buffers.widened.data();  // (batch, Q, heads * dv), then the lse (batch, Q, heads)
    const Heads<float> merged = compact_heads<float>(out, wide_out);
    core::forward(core::Call<float, bfloat16>{Q, K, V, &mask, rule, dropout}, merged,
                  lse != nullptr ? wide_out + o : nullptr, buffers);
    rounded_results(isa, merged, wide_out + o, out, lse);
    return;
  }
  const bool chunked = chunks_keys(Q, K, mask, options);
  const Index nq = Q.length, nk = K.length, chunk = chunked ? tuning::bf16_key_chunk : nk;
  const Index steps = std::min(nk, chunk + nq);  // the most a piece of keys takes
  const Index q = heads_size(Q), o = heads_size(out), rows = Q.batch * nq * Q.count;
  const Index k = K.batch * K.count * steps * K.dim, v = V.batch * V.count * steps * V.dim;
  const Index o_part = chunked ? o : 0;
  buffers.widened.resize(q + o + o_part + k + v + rows);
  float* const wide = buffers.widened.data();  // Q, the merged output, a chunk's output, K and V, the merged lse
  const Heads<const float> wide_q = widened_heads(isa, Q, wide);
  const Heads<float> merged = compact_heads<float>(out, wide + q), part = compact_heads<float>(out, wide + q + o);
  float* const keys = wide + q + o + o_part;
  float* const merged_lse = keys + k + v;  // (batch, nq, heads), as lse
  Tensor3<float>& part_lse = buffers.widened_lse;  // (batch, nq, heads)
  const Mask none;
  Index first = 0;
  do {  // once at least: with no key, the mask's rule for a fully masked query gives the output
    // Every query sees keys 0 .. nk - nq: a chunk ending there is seen whole; the last takes the rest.
    const bool whole = first + chunk <= nk - nq + 1 && first + chunk < nk;
    const Index count = whole ? chunk : nk - first;
    attention_heads<float>(wide_q, widened_heads(isa, steps_of(K, first, count), keys),
                           widened_heads(isa, steps_of(V, first, count), keys + k), whole ? none : mask, wide_options,
                           dropout, &part_lse, first == 0 ? merged : part, buffers);
    if (first == 0) {
      std::copy(part_lse.data(), part_lse.data() + rows, merged_lse);
    } else {
      for (Index b = 0; b < Q.batch; ++b)
        for (Index t = 0; t < nq; ++t)
          for (Index h = 0; h < Q.count; ++h) {
            float& L = merged_lse[(b * nq + t) * Q.count + h];
            const float l = part_lse(b, t, h), M = std::max(L, l);
            if (M == -std::numeric_limits<float>::infinity()) continue;  // neither sees a key
            const float before = std::exp(L - M), now = std::exp(l - M), total = before + now;
            float* acc = merged.at(b, h, t);
            const float* add = part.at(b, h, t);
            for (Index c = 0; c < out.dim; ++c) acc[c] = (before * acc[c] + now * add[c]) / total;
            L = M + std::log(total);
          }
    }
    first += count;
  } while (first < nk);
  rounded_results(isa, merged, merged_lse, out, lse);
}

// The forward pass over checked heads views: out (batch, Q, H * dv); lse resized to (batch, Q, H) when not null.
// bfloat16: reduced_attention_heads.
template <class Scalar>
void attention_heads(const Heads<const Scalar>& Q, const Heads<const Scalar>& K, const Heads<const Scalar>& V,
                     const Mask& mask, const ScoreOptions<Scalar>& options, const AttentionDropout& dropout,
                     Tensor3<Scalar>* lse, const Heads<Scalar>& out, core::Buffers<Scalar>& buffers) {
  if constexpr (is_reduced<Scalar>) {
    reduced_attention_heads(Q, K, V, mask, options, dropout, lse, out, buffers);
  } else {
    core::Call<Scalar> call{Q,     K, V, &mask, core::score_rule(options, Q.batch, Q.count, Q.length, K.length, Q.dim),
                            dropout};
    if (lse != nullptr) lse->resize(Q.batch, Q.length, Q.count);
    core::forward(call, out, lse != nullptr ? lse->data() : nullptr, buffers);
  }
}

// The checks of a whole-sequence call on maps of its queries, keys and values, in order: heads, keys and values,
// mask, score options, out.
template <class Scalar, class Map>
void require_call(const Map& q, const Map& k, const Map& v, Index num_heads, Index num_kv_heads, const Mask& mask,
                  const ScoreOptions<Scalar>& options, const Eigen::TensorMap<Tensor3<Scalar>>& out,
                  const char* where) {
  AttentionShape s = attention_shape<Scalar>(q, num_heads, num_kv_heads, where);
  require_keys_values<Scalar>(k, v, s, where);
  mask.require_shape(s.batch, s.queries, s.keys, where);
  require_score_options(options, s, where);
  require_out<Scalar>(out, output_shape(s), where, output_axes, {{&q, "queries"}, {&k, "keys"}, {&v, "values"}});
}

// A whole-sequence call: its checks, then the forward pass.
template <class Scalar, class Queries, class Keys, class Values>
void attention_into(const Queries& queries, const Keys& keys, const Values& values, Index num_heads, Index num_kv_heads,
                    const Mask& mask, const ScoreOptions<Scalar>& options, Tensor3<Scalar>* lse,
                    const Eigen::TensorMap<Tensor3<Scalar>>& out, const char* where) {
  const auto q = input3<Scalar>(queries);
  const auto k = input3<Scalar>(keys);
  const auto v = input3<Scalar>(values);
  require_call<Scalar>(q, k, v, num_heads, num_kv_heads, mask, options, out, where);
  attention_heads<Scalar>(heads_of_map<const Scalar>(q, num_heads), heads_of_map<const Scalar>(k, num_kv_heads),
                          heads_of_map<const Scalar>(v, num_kv_heads), mask, options, AttentionDropout{}, lse,
                          heads_of_map<Scalar>(out, num_heads), attention_buffers<Scalar>());
}

// A tensor, and score options, of a reduced type (bfloat16) as float: exact.
template <class Scalar, class Queries>
void cached_attention_into(const Queries& queries, const KVCache<Scalar>& cache, Index num_heads, const Mask& mask,
                           const ScoreOptions<Scalar>& options, Tensor3<Scalar>* lse,
                           const Eigen::TensorMap<Tensor3<Scalar>>& out, const char* where) {
  const auto q = input3<Scalar>(queries);
  AttentionShape s = attention_shape<Scalar>(q, num_heads, cache.num_kv_heads(), where);
  require(s.batch == cache.batch(), where, ": queries must have the cache's batch ", cache.batch(), ", got ", s.batch);
  require(s.dim == cache.head_dim(), where, ": queries must have num_heads * head_dim = ", num_heads, " * ",
          cache.head_dim(), " features (the cache's head_dim), got ", q.dimension(2));
  s.keys = cache.size();
  s.value_dim = cache.head_dim();
  mask.require_shape(s.batch, s.queries, s.keys, where);
  require_score_options(options, s, where);
  require_out<Scalar>(out, output_shape(s), where, output_axes, {{&q, "queries"}});
  attention_heads<Scalar>(heads_of_map<const Scalar>(q, num_heads), cache.keys(), cache.values(), mask, options,
                          AttentionDropout{}, lse, heads_of_map<Scalar>(out, num_heads), attention_buffers<Scalar>());
}

}  // namespace detail

// -> (batch, Q, num_heads * dv); lse, when not null, receives (batch, Q, num_heads).
template <class Queries, class Keys, class Values, class Scalar = detail::argument_scalar<Queries>>
Tensor3<Scalar> scaled_dot_product_attention(const Queries& queries, const Keys& keys, const Values& values,
                                             Index num_heads, Index num_kv_heads, const Mask& mask = {},
                                             const ScoreOptions<detail::non_deduced<Scalar>>& options = {},
                                             Tensor3<detail::non_deduced<Scalar>>* lse = nullptr) {
  const auto q = detail::input3<Scalar>(queries), k = detail::input3<Scalar>(keys), v = detail::input3<Scalar>(values);
  const Index heads = std::max(num_heads, Index(1)), kv_heads = std::max(num_kv_heads, Index(1));
  Tensor3<Scalar> out(q.dimension(0), q.dimension(1), v.dimension(2) / kv_heads * heads);  // (batch, Q, num_heads * dv)
  detail::attention_into<Scalar>(q, k, v, num_heads, num_kv_heads, mask, options, lse,
                                 Eigen::TensorMap<Tensor3<Scalar>>(out.data(), out.dimensions()),
                                 "scaled_dot_product_attention");
  return out;
}

// The same into out, (batch, Q, num_heads * dv): a Tensor3 of that shape or a TensorMap3.
template <class Queries, class Keys, class Values, class Out, class Scalar = detail::argument_scalar<Queries>>
void scaled_dot_product_attention(const Queries& queries, const Keys& keys, const Values& values, Index num_heads,
                                  Index num_kv_heads, const Mask& mask,
                                  const ScoreOptions<detail::non_deduced<Scalar>>& options,
                                  Tensor3<detail::non_deduced<Scalar>>* lse, Out&& out) {
  detail::attention_into<Scalar>(queries, keys, values, num_heads, num_kv_heads, mask, options, lse,
                                 detail::output3<Scalar>(out), "scaled_dot_product_attention");
}

// Against the steps a cache holds (its keys and values read in place): -> (batch, Q, num_heads * head_dim).
template <class Queries, class Scalar = detail::argument_scalar<Queries>>
Tensor3<Scalar> scaled_dot_product_attention(const Queries& queries, const KVCache<Scalar>& cache, Index num_heads,
                                             const Mask& mask = {},
                                             const ScoreOptions<detail::non_deduced<Scalar>>& options = {},
                                             Tensor3<detail::non_deduced<Scalar>>* lse = nullptr) {
  const auto q = detail::input3<Scalar>(queries);
  Tensor3<Scalar> out(q.dimension(0), q.dimension(1),
                      std::max(num_heads, Index(1)) * cache.head_dim());  // (batch, Q, num_heads * head_dim)
  detail::cached_attention_into<Scalar>(q, cache, num_heads, mask, options, lse,
                                        Eigen::TensorMap<Tensor3<Scalar>>(out.data(), out.dimensions()),
                                        "scaled_dot_product_attention");
  return out;
}

template <class Queries, class Out, class Scalar = detail::argument_scalar<Queries>>
void scaled_dot_product_attention(const Queries& queries, const KVCache<Scalar>& cache, Index num_heads,
                                  const Mask& mask, const ScoreOptions<detail::non_deduced<Scalar>>& options,
                                  Tensor3<detail::non_deduced<Scalar>>* lse, Out&& out) {
  detail::cached_attention_into<Scalar>(queries, cache, num_heads, mask, options, lse, detail::output3<Scalar>(out),
                                        "scaled_dot_product_attention");
}

namespace detail {

// The backward pass over checked heads views into dQ, dK, dV (as Q, K, V).
template <class Scalar>
void attention_backward_heads(const Heads<const Scalar>& Q, const Heads<const Scalar>& K, const Heads<const Scalar>& V,
                              const Heads<const Scalar>& O, const Scalar* lse, const Heads<const Scalar>& dO,
                              const Mask& mask, const ScoreOptions<detail::non_deduced<Scalar>>& options,
                              const AttentionDropout& dropout, const Heads<Scalar>& dQ, const Heads<Scalar>& dK,
                              const Heads<Scalar>& dV, core::Buffers<Scalar>& buffers) {
  core::Call<Scalar> call{Q,      K, V, &mask, core::score_rule(options, Q.batch, Q.count, Q.length, K.length, Q.dim),
                          dropout};
  core::backward(call, O, lse, dO, dQ, dK, dV, buffers);
}

}  // namespace detail

// The gradients of scaled_dot_product_attention with respect to its queries, keys and values, given its output and
// lse (batch, Q, num_heads) and grad_output (batch, Q, num_heads * dv), the gradient of the loss at the output.
template <class Queries, class Keys, class Values, class Output, class Lse, class GradOutput,
          class Scalar = detail::argument_scalar<Queries>>
AttentionGradients<Scalar> scaled_dot_product_attention_backward(
    const Queries& queries, const Keys& keys, const Values& values, const Output& output, const Lse& lse,
    const GradOutput& grad_output, Index num_heads, Index num_kv_heads, const Mask& mask = {},
    const ScoreOptions<detail::non_deduced<Scalar>>& options = {}) {
  static_assert(!detail::is_reduced<Scalar>, "attend: scaled_dot_product_attention_backward takes float or double");
  if constexpr (!detail::is_reduced<Scalar>) {  // the body of float and double only
    constexpr const char* where = "scaled_dot_product_attention_backward";
    const auto q = detail::input3<Scalar>(queries);
    const auto k = detail::input3<Scalar>(keys);
    const auto v = detail::input3<Scalar>(values);
    const auto o = detail::input3<Scalar>(output);
    const auto l = detail::input3<Scalar>(lse);
    const auto g = detail::input3<Scalar>(grad_output);
    detail::AttentionShape s = detail::attention_shape<Scalar>(q, num_heads, num_kv_heads, where);
    detail::require_keys_values<Scalar>(k, v, s, where);
    mask.require_shape(s.batch, s.queries, s.keys, where);
    detail::require_score_options(options, s, where);
    const std::array<Index, 3> out_shape{s.batch, s.queries, s.heads * s.value_dim};
    detail::require(o.dimensions() == out_shape, where, ": output must have shape ", detail::shape_text(out_shape),
                    " (batch, queries, num_heads * value_dim), got ", detail::shape_text(o.dimensions()));
    detail::require(g.dimensions() == out_shape, where, ": grad_output must have shape ", detail::shape_text(out_shape),
                    " (the output's), got ", detail::shape_text(g.dimensions()));
    const std::array<Index, 3> lse_shape{s.batch, s.queries, s.heads};
    detail::require(l.dimensions() == lse_shape, where, ": lse must have shape ", detail::shape_text(lse_shape),
                    " (batch, queries, num_heads), got ", detail::shape_text(l.dimensions()));
    AttentionGradients<Scalar> grads{Tensor3<Scalar>(q.dimensions()), Tensor3<Scalar>(k.dimensions()),
                                     Tensor3<Scalar>(v.dimensions())};
    detail::attention_backward_heads<Scalar>(
        detail::heads_of_map<const Scalar>(q, num_heads), detail::heads_of_map<const Scalar>(k, num_kv_heads),
        detail::heads_of_map<const Scalar>(v, num_kv_heads), detail::heads_of_map<const Scalar>(o, num_heads), l.data(),
        detail::heads_of_map<const Scalar>(g, num_heads), mask, options, detail::AttentionDropout{},
        detail::heads_of_map<Scalar>(grads.queries, num_heads), detail::heads_of_map<Scalar>(grads.keys, num_kv_heads),
        detail::heads_of_map<Scalar>(grads.values, num_kv_heads), detail::attention_buffers<Scalar>());
    return grads;
  } else {
    return {};  // not reached: the assertion stops the build
  }
}

}  // namespace ATTEND_ABI
}  // namespace attend
