// attend/from_torch.hpp — PyTorch's own attention layer, torch.nn.MultiheadAttention, as an attend module.
//
//   auto weights = attend::load_safetensors<float>("mha.safetensors");              // its state_dict()
//   auto attention = attend::multi_head_attention_from_torch<float>(weights, 4);    // num_heads is not stored
//   attention.eval();
//   attend::Tensor3<float> Y = attention(X, X, X);       // = module(X, X, X, need_weights=False)[0], batch_first
//
// nn.MultiheadAttention(embed_dim E, num_heads, kdim, vdim, batch_first=True) computes d2l's multi-head attention:
// project queries, keys and values, split the E columns into num_heads heads of d = E / num_heads, scaled
// dot-product attention in each (scores / sqrt(d)), heads concatenated, then out_proj. Only the names differ:
//
//   nn.MultiheadAttention                                     attend::MultiHeadAttention (d2l's names)
//   in_proj_weight (3E, E), rows [0, E) [E, 2E) [2E, 3E)  ->  W_q.weight, W_k.weight, W_v.weight (each (E, E))
//     or, when kdim or vdim differ from E:
//     q_proj_weight (E, E), k_proj_weight (E, kdim),      ->  W_q.weight, W_k.weight (E, kdim),
//     v_proj_weight (E, vdim)                                 W_v.weight (E, vdim)
//   in_proj_bias (3E), the same three slices              ->  W_q.bias, W_k.bias, W_v.bias
//   out_proj.weight (E, E), out_proj.bias (E)             ->  W_o.weight, W_o.bias
//
// and the module is MultiHeadAttention(key_size = kdim, query_size = E, value_size = vdim, num_hiddens = E,
// num_heads, dropout, bias) with bias on when in_proj_bias and out_proj.bias are present (bias=True, PyTorch's
// default) and off when both are absent (bias=False). Inputs are batch first, (batch, steps, features): with
// nn.MultiheadAttention's default batch_first=False, PyTorch's tensors are (steps, batch, features) instead.
//
// Refused, with std::invalid_argument naming the tensor: a state dict of add_bias_kv=True (bias_k, bias_v: learned
// extra key and value rows that attend does not have); a missing or misshapen tensor; only one of the two biases;
// any other name (a prefix such as "encoder.attn." must be stripped first); E not divisible by num_heads.
// add_zero_attn=True leaves no trace in the state dict and is not supported either: do not convert such a module.
//
// Masks. nn.MultiheadAttention's masks say what to *ignore*; attend's Mask::keep says what to *attend to*:
//   key_padding_mask (batch, keys), true = padding, ignored   ->  key_padding_mask_from_torch(key_padding_mask,
//                                                                 num_queries): keep(b, q, j) = !key_padding_mask(b, j)
//     (when every row's padding is a suffix, ValidLens::per_batch of the unpadded lengths is the same mask)
//   attn_mask (queries, keys) of bool, true = not allowed       ->  Mask::keep(K), K (1, queries, keys) = !attn_mask
//   attn_mask = the causal triu(ones, diagonal=1)               ->  Mask::causal() (the same when queries == keys;
//                                                                 attend aligns it bottom-right otherwise)
//   a float attn_mask (added to the scores)                     ->  no equivalent unless it holds only 0 and -inf
// PyTorch fills masked scores with -inf, attend replaces them with -1e6 (d2l's rule): the weights are the same, a
// masked key's weight exactly 0, unless the largest kept score of a row is below about -1e6 + 87 (see mask.hpp).
// A query whose keys are all masked gets NaN from PyTorch 1.13; attend gives uniform weights, or zeros with
// .when_fully_masked(FullyMasked::zero).
#pragma once

#include <attend/config.hpp>

#include <algorithm>
#include <attend/mask.hpp>
#include <attend/multi_head_attention.hpp>
#include <attend/random.hpp>
#include <attend/state_dict.hpp>
#include <attend/tensor.hpp>
#include <attend/transformer_encoder_block.hpp>
#include <string>
#include <utility>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {

namespace detail {

// Tensor `name` of `dict`, or null; throws when its values do not fill its shape.
template <class Scalar>
const NamedTensor<Scalar>* torch_tensor(const StateDict<Scalar>& dict, const std::string& name, const char* where) {
  const auto found = dict.find(name);
  if (found == dict.end()) return nullptr;
  const NamedTensor<Scalar>& tensor = found->second;
  const auto count = element_count(tensor.shape);
  require(count && *count == tensor.values.size(), where, ": ", quoted(name), " has shape ", shape_text(tensor.shape),
          " but ", tensor.values.size(), " values");
  return &tensor;
}

// Throws unless `tensor` has `shape`; `what` describes the shape in PyTorch's terms.
template <class Scalar>
void require_torch_shape(const NamedTensor<Scalar>& tensor, const std::vector<Index>& shape, const std::string& name,
                         const char* what, const char* where) {
  require(tensor.shape == shape, where, ": ", quoted(name), " must have shape ", shape_text(shape), " ", what,
          ", got ", shape_text(tensor.shape));
}

// Rows [first, first + rows) of a row-major (rows_total, cols) tensor, or elements [first, first + rows) of a
// vector (cols == 0), as a tensor of their own.
template <class Scalar>
NamedTensor<Scalar> torch_rows(const NamedTensor<Scalar>& tensor, Index first, Index rows, Index cols) {
  const Index width = cols == 0 ? 1 : cols;
  NamedTensor<Scalar> out;
  out.shape = cols == 0 ? std::vector<Index>{rows} : std::vector<Index>{rows, cols};
  out.values.assign(tensor.values.begin() + first * width, tensor.values.begin() + (first + rows) * width);
  return out;
}

}  // namespace detail

// A MultiHeadAttention holding the parameters of a torch.nn.MultiheadAttention's state_dict() (see the top of this
// file for the names and for masks). num_heads is not part of a state dict: pass the module's. dropout applies in
// training mode only, as for any attend module; call eval() for PyTorch's eval-mode outputs. Checks, in order:
// num_heads and dropout, bias_k / bias_v, the projection weights, E % num_heads, out_proj.weight, the biases, then
// any other name; the first problem throws std::invalid_argument naming it.
template <class Scalar>
MultiHeadAttention<Scalar> multi_head_attention_from_torch(const StateDict<Scalar>& dict, Index num_heads,
                                                           Scalar dropout = Scalar(0)) {
  constexpr const char* where = "multi_head_attention_from_torch";
  detail::require_at_least(num_heads, 1, where, "num_heads");
  detail::require_probability(dropout, where);
  const auto tensor = [&](const std::string& name) { return detail::torch_tensor(dict, name, where); };

  for (const char* name : {"bias_k", "bias_v"})
    detail::require(tensor(name) == nullptr, where, ": ", detail::quoted(name),
                    " is present: nn.MultiheadAttention(add_bias_kv=True) appends a learned key and value to every "
                    "sequence, which attend's MultiHeadAttention does not support");

  // 1. The input projections: packed (3E, E), or one per input when kdim or vdim differ from E.
  StateDict<Scalar> d2l;  // the same tensors under d2l's names
  Index E = 0, kdim = 0, vdim = 0;
  const bool packed = tensor("in_proj_weight") != nullptr;
  if (packed) {
    const auto& W = *tensor("in_proj_weight");
    detail::require(W.rank() == 2 && W.shape[1] >= 1 && W.shape[0] == 3 * W.shape[1], where,
                    ": \"in_proj_weight\" must have shape (3 * embed_dim, embed_dim), got ",
                    detail::shape_text(W.shape));
    E = kdim = vdim = W.shape[1];
    d2l["W_q.weight"] = detail::torch_rows(W, 0, E, E);
    d2l["W_k.weight"] = detail::torch_rows(W, E, E, E);
    d2l["W_v.weight"] = detail::torch_rows(W, 2 * E, E, E);
  } else if (tensor("q_proj_weight") != nullptr) {
    const auto& W_q = *tensor("q_proj_weight");
    detail::require(W_q.rank() == 2 && W_q.shape[0] >= 1 && W_q.shape[0] == W_q.shape[1], where,
                    ": \"q_proj_weight\" must have shape (embed_dim, embed_dim), got ",
                    detail::shape_text(W_q.shape));
    E = W_q.shape[0];
    for (const char* name : {"k_proj_weight", "v_proj_weight"}) {
      const auto* W = tensor(name);
      detail::require(W != nullptr, where, ": \"q_proj_weight\" is present but ", detail::quoted(name),
                      " is missing (nn.MultiheadAttention with kdim or vdim has q_proj_weight, k_proj_weight and "
                      "v_proj_weight)");
      detail::require(W->rank() == 2 && W->shape[0] == E && W->shape[1] >= 1, where, ": ", detail::quoted(name),
                      " must have shape (", E, ", ", name[0] == 'k' ? "kdim" : "vdim", ") (embed_dim, ",
                      name[0] == 'k' ? "kdim" : "vdim", "), got ", detail::shape_text(W->shape));
    }
    kdim = tensor("k_proj_weight")->shape[1];
    vdim = tensor("v_proj_weight")->shape[1];
    d2l["W_q.weight"] = W_q;
    d2l["W_k.weight"] = *tensor("k_proj_weight");
    d2l["W_v.weight"] = *tensor("v_proj_weight");
  } else {
    std::vector<std::string> present;
    for (const auto& item : dict) present.push_back(item.first);
    throw std::invalid_argument(
        detail::message(where,
                        ": missing \"in_proj_weight\" (or \"q_proj_weight\", \"k_proj_weight\" and \"v_proj_weight\"): "
                        "the dict is not an nn.MultiheadAttention's state dict; its tensors are ",
                        present.empty() ? std::string("none") : detail::quoted_list(present)));
  }
  detail::require(E % num_heads == 0, where, ": embed_dim (", E, ") must be divisible by num_heads (", num_heads, ")");

  // 2. The output projection.
  const auto* W_o = tensor("out_proj.weight");
  detail::require(W_o != nullptr, where, ": missing \"out_proj.weight\" of shape (", E, ", ", E, ")");
  detail::require_torch_shape(*W_o, {E, E}, "out_proj.weight", "(embed_dim, embed_dim)", where);
  d2l["W_o.weight"] = *W_o;

  // 3. The biases: both (bias=True) or neither (bias=False).
  const auto* in_bias = tensor("in_proj_bias");
  const auto* out_bias = tensor("out_proj.bias");
  detail::require((in_bias == nullptr) == (out_bias == nullptr), where, ": ",
                  in_bias ? "\"in_proj_bias\" is present but \"out_proj.bias\" is not"
                          : "\"out_proj.bias\" is present but \"in_proj_bias\" is not",
                  ": attend's MultiHeadAttention has a bias on all four projections or on none");
  const bool bias = in_bias != nullptr;
  if (bias) {
    detail::require_torch_shape(*in_bias, {3 * E}, "in_proj_bias", "(3 * embed_dim)", where);
    detail::require_torch_shape(*out_bias, {E}, "out_proj.bias", "(embed_dim)", where);
    d2l["W_q.bias"] = detail::torch_rows(*in_bias, 0, E, 0);
    d2l["W_k.bias"] = detail::torch_rows(*in_bias, E, E, 0);
    d2l["W_v.bias"] = detail::torch_rows(*in_bias, 2 * E, E, 0);
    d2l["W_o.bias"] = *out_bias;
  }

  // 4. Nothing else. The names such a module has, in PyTorch's order:
  std::vector<std::string> names;
  if (packed)
    names = {"in_proj_weight"};
  else
    names = {"q_proj_weight", "k_proj_weight", "v_proj_weight"};
  if (bias) names.push_back("in_proj_bias");
  names.push_back("out_proj.weight");
  if (bias) names.push_back("out_proj.bias");
  for (const auto& item : dict)
    detail::require(std::find(names.begin(), names.end(), item.first) != names.end(), where, ": unexpected tensor ",
                    detail::quoted(item.first), " (nn.MultiheadAttention(", E, ", ", num_heads,
                    packed ? "" : detail::message(", kdim=", kdim, ", vdim=", vdim), bias ? "" : ", bias=False",
                    ") has exactly ", detail::quoted_list(names), ")");

  // The initial parameters are overwritten at once: draw them from a generator of their own, so that converting
  // leaves default_generator() where it was.
  Generator scratch;
  MultiHeadAttention<Scalar> attention(kdim, E, vdim, E, num_heads, dropout, bias, scratch);
  attention.load_state_dict(d2l);
  return attention;
}

// nn.MultiheadAttention's key_padding_mask (batch, keys), true where a key is padding and must be ignored, as an
// attend Mask for num_queries queries: keep (batch, num_queries, keys), keep(b, q, j) = !key_padding_mask(b, j).
// Note the opposite polarity: PyTorch's true means ignore, Mask::keep's true means attend.
inline Mask key_padding_mask_from_torch(const Matrix<bool>& key_padding_mask, Index num_queries) {
  detail::require_at_least(num_queries, 0, "key_padding_mask_from_torch", "num_queries");
  const Index batch = key_padding_mask.rows(), num_keys = key_padding_mask.cols();
  Tensor3<bool> keep(batch, num_queries, num_keys);  // (batch, queries, keys)
  for (Index b = 0; b < batch; ++b)
    for (Index q = 0; q < num_queries; ++q)
      for (Index j = 0; j < num_keys; ++j) keep(b, q, j) = !key_padding_mask(b, j);
  return Mask::keep(std::move(keep));
}

// A TransformerEncoderBlock holding the parameters of a torch.nn.TransformerEncoderLayer's state_dict() (built with
// batch_first=True; with batch_first=False only PyTorch's tensors are transposed). The layer's sizes come from the
// tensors; num_heads, the activation ("relu" or "gelu"), norm_first and layer_norm_eps are not stored: pass the
// layer's. The names:
//
//   nn.TransformerEncoderLayer                         attend::TransformerEncoderBlock
//   self_attn.in_proj_weight, ...                  ->  attention.W_q.weight, ... (multi_head_attention_from_torch)
//   linear1.weight, linear1.bias                   ->  ffn.dense1.weight, ffn.dense1.bias
//   linear2.weight, linear2.bias                   ->  ffn.dense2.weight, ffn.dense2.bias
//   norm1.weight, norm1.bias, norm2.weight, ...    ->  addnorm1.ln.weight, addnorm1.ln.bias, addnorm2.ln.weight, ...
//
// Refused with std::invalid_argument naming the tensor: a layer built with bias=False (its linear layers and norms
// have no bias; d2l's feed-forward network always has one), a missing, misshapen or unexpected tensor. Masks: as for
// nn.MultiheadAttention above (src_key_padding_mask -> valid lengths or key_padding_mask_from_torch; the causal
// src_mask -> Mask::causal()). The block is in training mode, as any new module: call eval() for PyTorch's
// evaluation-mode outputs.
template <class Scalar>
TransformerEncoderBlock<Scalar> transformer_encoder_layer_from_torch(const StateDict<Scalar>& dict, Index num_heads,
                                                                     Activation activation = Activation::relu,
                                                                     bool norm_first = false,
                                                                     Scalar eps = Scalar(1e-5)) {
  constexpr const char* where = "transformer_encoder_layer_from_torch";
  detail::require_at_least(num_heads, 1, where, "num_heads");
  detail::require(
      activation == Activation::relu || activation == Activation::gelu, where,
      ": activation must be relu or gelu (nn.TransformerEncoderLayer's two), got ",
      detail::activation_name(activation) ? detail::activation_name(activation) : "a value outside the enum");
  const std::string attention_prefix = "self_attn.";
  const std::vector<std::pair<std::string, std::string>> renames = {
      {"linear1.weight", "ffn.dense1.weight"}, {"linear1.bias", "ffn.dense1.bias"},
      {"linear2.weight", "ffn.dense2.weight"}, {"linear2.bias", "ffn.dense2.bias"},
      {"norm1.weight", "addnorm1.ln.weight"},  {"norm1.bias", "addnorm1.ln.bias"},
      {"norm2.weight", "addnorm2.ln.weight"},  {"norm2.bias", "addnorm2.ln.bias"}};

  StateDict<Scalar> attention_dict, d2l;  // self_attn's tensors without the prefix; the block's under d2l's names
  for (const auto& item : dict) {
    if (item.first.compare(0, attention_prefix.size(), attention_prefix) == 0) {
      attention_dict[item.first.substr(attention_prefix.size())] = item.second;
      continue;
    }
    const auto rename =
        std::find_if(renames.begin(), renames.end(), [&](const auto& r) { return r.first == item.first; });
    detail::require(rename != renames.end(), where, ": unexpected tensor ", detail::quoted(item.first),
                    " (nn.TransformerEncoderLayer has self_attn.*, linear1, linear2, norm1 and norm2)");
    d2l[rename->second] = item.second;
  }
  for (const auto& rename : renames)
    detail::require(d2l.count(rename.second) != 0, where, ": missing ", detail::quoted(rename.first),
                    rename.first.find("bias") != std::string::npos
                        ? " (a layer built with bias=False has none, and d2l's feed-forward network always has one)"
                        : "");
  MultiHeadAttention<Scalar> attention = multi_head_attention_from_torch(attention_dict, num_heads);
  const Index E = attention.num_hiddens();
  const NamedTensor<Scalar>& linear1 = d2l["ffn.dense1.weight"];
  detail::require(linear1.rank() == 2 && linear1.shape[0] >= 1 && linear1.shape[1] == E, where,
                  ": \"linear1.weight\" must have shape (dim_feedforward, ", E, ") (dim_feedforward, d_model), got ",
                  detail::shape_text(linear1.shape));
  const bool bias = attention.W_q().has_bias();
  detail::require(bias, where,
                  ": \"self_attn.in_proj_bias\" is missing: a layer built with bias=False is not supported "
                  "(d2l's feed-forward network always has a bias)");
  for (const auto& item : attention.state_dict()) d2l["attention." + item.first] = item.second;

  // The initial parameters are overwritten at once: drawn from a generator of their own.
  Generator scratch;
  TransformerEncoderBlock<Scalar> block(E, linear1.shape[0], num_heads, Scalar(0), bias, activation, norm_first, eps,
                                        scratch);
  block.load_state_dict(d2l);
  return block;
}

}  // namespace ATTEND_ABI
}  // namespace attend
