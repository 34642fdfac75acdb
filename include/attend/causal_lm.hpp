// attend/causal_lm.hpp — decoder-only language models in Llama's and GPT-2's shapes, trained and decoded.
//
//   X = embedding(tokens) (+ positions(0 .. steps - 1), GPT-2's learned positions)      (batch, steps, num_hiddens)
//   in each layer (pre-norm):  X = X + attention(norm1(X))        causal (or a causal sliding window), RoPE when set
//                              X = X + ffn(norm2(X))
//   logits = lm_head(norm(X))                                                            (batch, steps, vocab_size)
//
// CausalLMConfig says which parts: RMSNorm or LayerNorm, GatedFFN or PositionWiseFFN and its activation, grouped-query
// heads, RoPE, a sliding window, biases, learned positions, and whether lm_head is the embedding's transpose (tied:
// one parameter, used twice, gets both gradients). CausalLMConfig::llama(...) and ::gpt2(...) give the two families;
// from_transformers.hpp reads a transformers config.json and its weights.
//
// operator()(tokens) runs whole sequences (training records, for backward()); operator()(tokens, cache) decodes:
// the tokens take the positions that follow what the cache holds, their keys and values are appended, and the
// logits are those of one whole-sequence call. state_dict(): embedding.weight, positions.weight (learned positions),
// layers.{i}.norm1.weight (.bias), layers.{i}.attention.W_q.weight, ..., layers.{i}.norm2.*, layers.{i}.ffn.*,
// norm.*, lm_head.weight (untied).
#pragma once

#include <attend/config.hpp>

#include <attend/activation.hpp>
#include <attend/detail/products.hpp>
#include <attend/detail/project_rows.hpp>
#include <attend/detail/views.hpp>
#include <attend/embedding.hpp>
#include <attend/gated_ffn.hpp>
#include <attend/grouped_query_attention.hpp>
#include <attend/kv_cache.hpp>
#include <attend/layer_norm.hpp>
#include <attend/linear.hpp>
#include <attend/mask.hpp>
#include <attend/parameter.hpp>
#include <attend/position_wise_ffn.hpp>
#include <attend/random.hpp>
#include <attend/rms_norm.hpp>
#include <attend/rotary_embedding.hpp>
#include <attend/tensor.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {

// The shape of a decoder-only model.
struct CausalLMConfig {
  Index vocab_size = 0;
  Index num_hiddens = 0;
  Index num_layers = 0;
  Index num_heads = 0;
  Index num_kv_heads = 0;  // 0: num_heads
  Index head_dim = 0;      // 0: num_hiddens / num_heads
  Index ffn_num_hiddens = 0;
  bool rms_norm = true;  // RMSNorm (Llama) or LayerNorm (GPT-2)
  double norm_eps = 1e-6;
  bool gated_ffn = true;  // GatedFFN (Llama) or PositionWiseFFN (GPT-2)
  Activation activation = Activation::silu;
  bool attention_bias = false;  // on all four projections
  bool ffn_bias = false;
  double rope_theta = 10000;  // 0: no rotary positions
  Index max_positions = 0;    // > 0: learned positions (GPT-2's wpe) for that many steps
  Index sliding_window = 0;   // > 0: each query sees that many keys, itself included (Mistral)
  bool tie_word_embeddings = false;

  // Llama (and Mistral with sliding_window): RMSNorm, GQA with RoPE, SiLU-gated FFN, no biases, untied head.
  static CausalLMConfig llama(Index vocab_size, Index num_hiddens, Index num_layers, Index num_heads,
                              Index num_kv_heads, Index ffn_num_hiddens, double rope_theta = 10000,
                              double rms_norm_eps = 1e-6) {
    CausalLMConfig c;
    c.vocab_size = vocab_size, c.num_hiddens = num_hiddens, c.num_layers = num_layers, c.num_heads = num_heads;
    c.num_kv_heads = num_kv_heads, c.ffn_num_hiddens = ffn_num_hiddens, c.rope_theta = rope_theta;
    c.norm_eps = rms_norm_eps;
    return c;
  }
  // GPT-2: LayerNorm, multi-head attention with biases, learned positions, tanh-GELU FFN of 4 x num_hiddens, tied.
  static CausalLMConfig gpt2(Index vocab_size, Index num_hiddens, Index num_layers, Index num_heads,
                             Index max_positions, double layer_norm_eps = 1e-5) {
    CausalLMConfig c;
    c.vocab_size = vocab_size, c.num_hiddens = num_hiddens, c.num_layers = num_layers, c.num_heads = num_heads;
    c.num_kv_heads = num_heads, c.ffn_num_hiddens = 4 * num_hiddens, c.rms_norm = false;
    c.norm_eps = layer_norm_eps, c.gated_ffn = false, c.activation = Activation::gelu_tanh;
    c.attention_bias = true, c.ffn_bias = true, c.rope_theta = 0, c.max_positions = max_positions;
    c.tie_word_embeddings = true;
    return c;
  }

  Index kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
  Index dim_per_head() const { return head_dim > 0 ? head_dim : (num_heads > 0 ? num_hiddens / num_heads : 0); }

  // Throws std::invalid_argument naming the first field out of range. where: the caller.
  void check(const char* where) const {
    detail::require_at_least(vocab_size, 1, where, "config.vocab_size");
    detail::require_at_least(num_hiddens, 1, where, "config.num_hiddens");
    detail::require_at_least(num_layers, 1, where, "config.num_layers");
    detail::require_at_least(num_heads, 1, where, "config.num_heads");
    detail::require_at_least(num_kv_heads, 0, where, "config.num_kv_heads");
    detail::require(num_heads % kv_heads() == 0, where, ": config.num_kv_heads (", kv_heads(),
                    ") must divide config.num_heads (", num_heads, ")");
    detail::require(head_dim > 0 || num_hiddens % num_heads == 0, where, ": config.num_hiddens (", num_hiddens,
                    ") must be divisible by config.num_heads (", num_heads, ") when config.head_dim is 0");
    detail::require_at_least(head_dim, 0, where, "config.head_dim");
    detail::require_at_least(ffn_num_hiddens, 1, where, "config.ffn_num_hiddens");
    detail::require(gated_ffn || ffn_bias, where,
                    ": a plain feed-forward network (config.gated_ffn false) always has biases: config.ffn_bias must be "
                    "true");
    detail::require(norm_eps >= 0, where, ": config.norm_eps must be at least 0, got ", norm_eps);
    detail::checked_activation(activation, where);
    detail::require(rope_theta >= 0, where, ": config.rope_theta must be at least 0, got ", rope_theta);
    detail::require(rope_theta == 0 || dim_per_head() % 2 == 0, where, ": rotary positions need an even head_dim, got ",
                    dim_per_head());
    detail::require_at_least(max_positions, 0, where, "config.max_positions");
    detail::require_at_least(sliding_window, 0, where, "config.sliding_window");
  }
};

namespace detail {

// A norm of either kind, called through one interface.
template <class Scalar>
using AnyNorm = std::variant<RMSNorm<Scalar>, LayerNorm<Scalar>>;
template <class Scalar>
using AnyFFN = std::variant<GatedFFN<Scalar>, PositionWiseFFN<Scalar>>;

template <class Scalar>
AnyNorm<Scalar> make_norm(const CausalLMConfig& c) {
  if (c.rms_norm) return RMSNorm<Scalar>(c.num_hiddens, static_cast<Scalar>(c.norm_eps));
  return LayerNorm<Scalar>(c.num_hiddens, static_cast<Scalar>(c.norm_eps));
}
template <class Scalar>
AnyFFN<Scalar> make_ffn(const CausalLMConfig& c, Generator& generator) {
  if (c.gated_ffn) return GatedFFN<Scalar>(c.num_hiddens, c.ffn_num_hiddens, c.activation, c.ffn_bias, generator);
  return PositionWiseFFN<Scalar>(c.num_hiddens, c.ffn_num_hiddens, c.num_hiddens, c.activation, generator);
}

}  // namespace detail

// One pre-norm decoder layer: X + attention(norm1(X)), then + ffn(norm2(X)).
template <class Scalar>
class CausalLMLayer : public detail::WithParameters<CausalLMLayer<Scalar>, Scalar> {
 public:
  // The config checked first (CausalLMConfig::check): a layer that throws has drawn nothing from the generator.
  CausalLMLayer(const CausalLMConfig& c, Generator& generator)
      : norm1_(detail::make_norm<Scalar>(checked(c))),
        attention_(c.num_hiddens, c.num_heads, c.kv_heads(), c.dim_per_head(), c.attention_bias, Scalar(0), generator),
        norm2_(detail::make_norm<Scalar>(c)),
        ffn_(detail::make_ffn<Scalar>(c, generator)) {
    if (c.rope_theta > 0) attention_.set_rotary(RotaryEmbedding<Scalar>(c.dim_per_head(), c.rope_theta));
  }

  GroupedQueryAttention<Scalar>& attention() { return attention_; }
  detail::AnyNorm<Scalar>& norm1() { return norm1_; }
  detail::AnyNorm<Scalar>& norm2() { return norm2_; }
  detail::AnyFFN<Scalar>& ffn() { return ffn_; }

  void train(bool training) {
    attention_.train(training);
    each([&](auto& part) { part.train(training); });
  }

  // Training: records in every part.
  Tensor3<Scalar> operator()(const Tensor3<Scalar>& X, const Mask& mask) {
    Tensor3<Scalar> Y = attention_(call(norm1_, X), mask);  // (batch, steps, num_hiddens), then plus X
    detail::as_matrix(Y) += detail::as_matrix(X);
    Tensor3<Scalar> out = call(ffn_, call(norm2_, Y));
    detail::as_matrix(out) += detail::as_matrix(Y);
    return out;
  }
  // Evaluation, whole sequences: records nothing.
  Tensor3<Scalar> forward(const Tensor3<Scalar>& X, const Mask& mask) const {
    Tensor3<Scalar> Y = attention_.forward(forward_of(norm1_, X), mask);
    detail::as_matrix(Y) += detail::as_matrix(X);
    Tensor3<Scalar> out = forward_of(ffn_, forward_of(norm2_, Y));
    detail::as_matrix(out) += detail::as_matrix(Y);
    return out;
  }
  // Evaluation, through the cache: X's steps appended to it.
  Tensor3<Scalar> decode(const Tensor3<Scalar>& X, KVCache<Scalar>& cache, const Mask& mask) {
    Tensor3<Scalar> Y = attention_(forward_of(norm1_, X), cache, mask);
    detail::as_matrix(Y) += detail::as_matrix(X);
    Tensor3<Scalar> out = forward_of(ffn_, forward_of(norm2_, Y));
    detail::as_matrix(out) += detail::as_matrix(Y);
    return out;
  }
  // dout -> dX; adds every parameter's gradient.
  Tensor3<Scalar> backward(const Tensor3<Scalar>& dout) {
    Tensor3<Scalar> dY = backward_of(norm2_, backward_of(ffn_, dout));  // plus the residual's dout
    detail::as_matrix(dY) += detail::as_matrix(dout);
    Tensor3<Scalar> dX = backward_of(norm1_, attention_.backward(dY));
    detail::as_matrix(dX) += detail::as_matrix(dY);
    return dX;
  }

 private:
  friend class detail::WithParameters<CausalLMLayer<Scalar>, Scalar>;
  static constexpr const char* module_name = "CausalLMLayer";

  static const CausalLMConfig& checked(const CausalLMConfig& config) {
    config.check("CausalLMLayer");
    return config;
  }

  template <class Variant>
  static Tensor3<Scalar> call(Variant& part, const Tensor3<Scalar>& X) {
    return std::visit([&](auto& p) { return p(X); }, part);
  }
  template <class Variant>
  static Tensor3<Scalar> forward_of(const Variant& part, const Tensor3<Scalar>& X) {
    return std::visit([&](const auto& p) { return p.forward(X); }, part);
  }
  template <class Variant>
  static Tensor3<Scalar> backward_of(Variant& part, const Tensor3<Scalar>& dY) {
    return std::visit([&](auto& p) { return p.backward(dY); }, part);
  }
  template <class F>
  void each(F&& f) {
    std::visit(f, norm1_);
    std::visit(f, norm2_);
    std::visit(f, ffn_);
  }

  template <class Self, class Visit>
  static void visit_with_gradients_of(Self& self, Visit& visit) {
    std::visit([&](auto& p) { p.visit_with_gradients(detail::prefixed("norm1.", visit)); }, self.norm1_);
    self.attention_.visit_with_gradients(detail::prefixed("attention.", visit));
    std::visit([&](auto& p) { p.visit_with_gradients(detail::prefixed("norm2.", visit)); }, self.norm2_);
    std::visit([&](auto& p) { p.visit_with_gradients(detail::prefixed("ffn.", visit)); }, self.ffn_);
  }

  detail::AnyNorm<Scalar> norm1_;
  GroupedQueryAttention<Scalar> attention_;
  detail::AnyNorm<Scalar> norm2_;
  detail::AnyFFN<Scalar> ffn_;
};

// The keys and values of every layer of one CausalLM, for decoding; made by CausalLM::make_cache.
template <class Scalar>
struct CausalLMCache {
  std::vector<KVCache<Scalar>> layers;                                       // one per layer
  Index size() const { return layers.empty() ? 0 : layers.front().size(); }  // steps held
  void clear() {
    for (auto& cache : layers) cache.clear();
  }
};

template <class Scalar>
class CausalLM : public detail::WithParameters<CausalLM<Scalar>, Scalar> {
 public:
  // Parameters drawn embedding, each layer (attention, then ffn), positions, lm_head.
  explicit CausalLM(const CausalLMConfig& config, Generator& generator = default_generator())
      : config_(checked(config)),
        embedding_(config.vocab_size, config.num_hiddens, generator),
        layers_(make_layers(config, generator)),
        norm_(detail::make_norm<Scalar>(config)) {
    if (config.max_positions > 0) positions_.emplace(config.max_positions, config.num_hiddens, generator);
    if (!config.tie_word_embeddings) lm_head_.emplace(config.num_hiddens, config.vocab_size, false, generator);
  }

  const CausalLMConfig& config() const { return config_; }
  Embedding<Scalar>& embedding() { return embedding_; }
  CausalLMLayer<Scalar>& layer(Index i) { return layers_.at(static_cast<std::size_t>(i)); }
  Index num_layers() const { return static_cast<Index>(layers_.size()); }

  void train(bool training = true) {
    training_ = training;
    for (auto& layer : layers_) layer.train(training);
  }
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // The mask every layer applies: causal, or the causal sliding window.
  Mask mask() const {
    return config_.sliding_window > 0 ? Mask::window(config_.sliding_window - 1, 0) : Mask::causal();
  }

  // A cache for batch rows of up to capacity steps, reserved here.
  CausalLMCache<Scalar> make_cache(Index batch, Index capacity) const {
    CausalLMCache<Scalar> cache;
    for (Index i = 0; i < num_layers(); ++i)
      cache.layers.emplace_back(batch, config_.kv_heads(), config_.dim_per_head(), capacity);
    return cache;
  }

  // tokens (batch, steps), positions 0 .. steps - 1 -> logits (batch, steps, vocab_size). Records for backward().
  Tensor3<Scalar> operator()(const Matrix<Index>& tokens) {
    if constexpr (detail::is_reduced<Scalar>) return forward(tokens);  // evaluation only: nothing to keep
    check(tokens, 0, "CausalLM");
    Tensor3<Scalar> X = embed_recorded(tokens);  // (batch, steps, num_hiddens)
    const Mask m = mask();
    for (auto& layer : layers_) X = layer(X, m);
    Tensor3<Scalar> N = std::visit([&](auto& p) { return p(X); }, norm_);  // (batch, steps, num_hiddens)
    Tensor3<Scalar> logits = head(N);
    recorded_normed_ = std::move(N);
    recorded_ = true;
    return logits;
  }

  // The same in evaluation mode, keeping nothing.
  Tensor3<Scalar> forward(const Matrix<Index>& tokens) const {
    check(tokens, 0, "CausalLM::forward");
    Tensor3<Scalar> X = embed_const(tokens, 0);
    const Mask m = mask();
    for (const auto& layer : layers_) X = layer.forward(X, m);
    return head(std::visit([&](const auto& p) { return p.forward(X); }, norm_));
  }

  // Decoding: tokens (batch, steps) at positions cache.size() .. -> logits (batch, steps, vocab_size); appends their
  // keys and values to every layer's cache. A call that throws leaves the cache as it was.
  Tensor3<Scalar> operator()(const Matrix<Index>& tokens, CausalLMCache<Scalar>& cache) {
    constexpr const char* where = "CausalLM (decoding)";
    const Index start = cache.size();
    check(tokens, start, where);
    detail::require(cache.layers.size() == layers_.size(), where, ": the cache must hold ", layers_.size(),
                    " layers (make it with make_cache), got ", cache.layers.size());
    for (const KVCache<Scalar>& c : cache.layers) {
      detail::require(c.size() == start, where, ": the cache's layers hold different numbers of steps");
      detail::require(c.num_kv_heads() == config_.kv_heads() && c.head_dim() == config_.dim_per_head(), where,
                      ": the cache must hold ", config_.kv_heads(), " key/value heads of ", config_.dim_per_head(),
                      ", got ", c.num_kv_heads(), " of ", c.head_dim());
      c.require_room(tokens.rows(), tokens.cols(), where);
    }
    Tensor3<Scalar> X = embed_const(tokens, start);
    const Mask m = mask();
    for (std::size_t i = 0; i < layers_.size(); ++i) X = layers_[i].decode(X, cache.layers[i], m);
    return head(std::visit([&](const auto& p) { return p.forward(X); }, norm_));
  }

  // dlogits (batch, steps, vocab_size) of the last operator()(tokens) call: adds every parameter's gradient (a tied
  // embedding gets the head's and the lookup's).
  template <class GradOutput>
  void backward(const GradOutput& grad_output) {
    static_assert(!detail::is_reduced<Scalar>, "attend: CausalLM<bfloat16> runs in evaluation only; train in float");
    if constexpr (!detail::is_reduced<Scalar>) {  // the body of float and double only
      constexpr const char* where = "CausalLM::backward";
      const ConstTensorMap3<Scalar> dlogits = detail::input3<Scalar>(grad_output);
      detail::require_recorded(recorded_, where, "CausalLM");
      const Tensor3<Scalar>& N = recorded_normed_;  // (batch, steps, num_hiddens)
      detail::require_shape(dlogits, {N.dimension(0), N.dimension(1), config_.vocab_size}, where, "grad_output",
                            "(batch, steps, vocab_size)");
      Tensor3<Scalar> dX = head_backward(N, dlogits);  // (batch, steps, num_hiddens)
      dX = std::visit([&](auto& p) { return p.backward(dX); }, norm_);
      for (std::size_t i = layers_.size(); i-- > 0;) dX = layers_[i].backward(dX);
      if (positions_) positions_->backward(dX);
      embedding_.backward(dX);
    }
  }

 private:
  friend class detail::WithParameters<CausalLM<Scalar>, Scalar>;
  static constexpr const char* module_name = "CausalLM";

  static const CausalLMConfig& checked(const CausalLMConfig& config) {
    config.check("CausalLM");
    return config;
  }
  static std::vector<CausalLMLayer<Scalar>> make_layers(const CausalLMConfig& config, Generator& generator) {
    std::vector<CausalLMLayer<Scalar>> layers;
    layers.reserve(static_cast<std::size_t>(config.num_layers));
    for (Index i = 0; i < config.num_layers; ++i) layers.emplace_back(config, generator);
    return layers;
  }

  void check(const Matrix<Index>& tokens, Index start, const char* where) const {
    embedding_.check_tokens(tokens, where);
    if (positions_)
      detail::require(start + tokens.cols() <= config_.max_positions, where, ": steps ", start, " .. ",
                      start + tokens.cols() - 1, " pass the learned positions (max_positions ", config_.max_positions,
                      ")");
  }

  // The token embeddings plus the learned positions 0 .. steps - 1, recorded for backward().
  Tensor3<Scalar> embed_recorded(const Matrix<Index>& tokens) {
    Tensor3<Scalar> X = embedding_(tokens);  // (batch, steps, num_hiddens)
    if (positions_) {
      Matrix<Index> steps(tokens.rows(), tokens.cols());  // (batch, steps): each step's position
      for (Index b = 0; b < tokens.rows(); ++b)
        for (Index t = 0; t < tokens.cols(); ++t) steps(b, t) = t;
      detail::as_matrix(X) += detail::as_matrix((*positions_)(steps));
    }
    return X;
  }
  // The same at positions start .. start + steps - 1, recording nothing.
  Tensor3<Scalar> embed_const(const Matrix<Index>& tokens, Index start) const {
    Tensor3<Scalar> X = embedding_.forward(tokens);  // (batch, steps, num_hiddens)
    if (positions_)
      for (Index b = 0; b < X.dimension(0); ++b)
        detail::slice(X, b) += positions_->weight().middleRows(start, tokens.cols());
    return X;
  }

  // logits = N W^T, W lm_head's weight or the embedding's (tied). N: (batch, steps, num_hiddens).
  Tensor3<Scalar> head(const Tensor3<Scalar>& N) const {
    if (lm_head_) return lm_head_->forward(N);
    const Matrix<Scalar>& W = embedding_.weight();  // (vocab_size, num_hiddens)
    Tensor3<Scalar> logits(N.dimension(0), N.dimension(1), config_.vocab_size);
    detail::linear_rows<Scalar>(detail::as_matrix(N), W.data(), config_.vocab_size, nullptr, logits.data(),
                                config_.vocab_size);
    return logits;
  }
  // dN = dlogits W; adds dW = dlogits^T N into lm_head's gradient or the embedding's.
  Tensor3<Scalar> head_backward(const Tensor3<Scalar>& N, const ConstTensorMap3<Scalar>& dlogits) {
    Tensor3<Scalar> dN(N.dimensions());  // (batch, steps, num_hiddens)
    if (lm_head_) {
      lm_head_->backward_rows(detail::as_matrix(N), detail::as_matrix(dlogits), dN.data());
      return dN;
    }
    const Matrix<Scalar>& W = embedding_.weight();  // (vocab_size, num_hiddens)
    const Index rows = N.dimension(0) * N.dimension(1), d = config_.num_hiddens;
    detail::times<Scalar>(false, dlogits.data(), config_.vocab_size, rows, config_.vocab_size, W.data(), d, d,
                          dN.data(), d);
    Matrix<Scalar>& dW = head_weight_grad_;  // (vocab_size, num_hiddens): this call's, then added, as Linear does
    dW.resize(config_.vocab_size, d);
    detail::transposed_times<Scalar>(false, detail::as_matrix(dlogits), detail::as_matrix(N), dW);
    embedding_.weight_grad() += dW;
    return dN;
  }

  template <class Self, class Visit>
  static void visit_with_gradients_of(Self& self, Visit& visit) {
    self.embedding_.visit_with_gradients(detail::prefixed("embedding.", visit));
    if (self.positions_) self.positions_->visit_with_gradients(detail::prefixed("positions.", visit));
    for (std::size_t i = 0; i < self.layers_.size(); ++i)
      self.layers_[i].visit_with_gradients(detail::prefixed("layers." + std::to_string(i) + ".", visit));
    std::visit([&](auto& p) { p.visit_with_gradients(detail::prefixed("norm.", visit)); }, self.norm_);
    if (self.lm_head_) self.lm_head_->visit_with_gradients(detail::prefixed("lm_head.", visit));
  }

  CausalLMConfig config_;
  bool training_ = true;
  Embedding<Scalar> embedding_;
  std::vector<CausalLMLayer<Scalar>> layers_;
  detail::AnyNorm<Scalar> norm_;
  std::optional<Embedding<Scalar>> positions_;  // (max_positions, num_hiddens): GPT-2's wpe
  std::optional<Linear<Scalar>> lm_head_;       // (vocab_size, num_hiddens), absent when tied
  Tensor3<Scalar> recorded_normed_;             // (batch, steps, num_hiddens): norm(X) of the last training call
  Matrix<Scalar> head_weight_grad_;             // (vocab_size, num_hiddens): the tied head's scratch, no state
  bool recorded_ = false;
};

}  // namespace ATTEND_ABI
}  // namespace attend
