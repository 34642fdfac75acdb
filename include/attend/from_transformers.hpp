// attend/from_transformers.hpp — decoder-only models saved by Hugging Face transformers (save_pretrained: a
// config.json and a model.safetensors) as attend CausalLMs.
//
//   auto config = attend::causal_lm_config_from_file("model/config.json");
//   auto model = attend::causal_lm_from_transformers<float>(config, attend::load_safetensors<float>(
//                    "model/model.safetensors"));
//
// Families: "llama" and "mistral" (LlamaForCausalLM, MistralForCausalLM: RMSNorm, grouped-query attention with
// RoPE, a SiLU-gated MLP; Mistral's sliding window) and "gpt2" (GPT2LMHeadModel: LayerNorm, learned positions,
// tanh-GELU MLP, lm_head tied to the token embedding). The names, per layer i:
//
//   transformers (Llama, Mistral)                  attend::CausalLM
//   model.embed_tokens.weight                      embedding.weight
//   model.layers.i.input_layernorm.weight          layers.i.norm1.weight
//   model.layers.i.self_attn.{q,k,v,o}_proj.*      layers.i.attention.W_{q,k,v,o}.*
//   model.layers.i.post_attention_layernorm.weight layers.i.norm2.weight
//   model.layers.i.mlp.{gate,up,down}_proj.*       layers.i.ffn.{gate,up,down}_proj.*
//   model.norm.weight, lm_head.weight              norm.weight, lm_head.weight (absent when tied)
//
//   transformers (GPT-2)                           attend::CausalLM
//   transformer.wte.weight, transformer.wpe.weight embedding.weight, positions.weight
//   transformer.h.i.ln_1.*, transformer.h.i.ln_2.* layers.i.norm1.*, layers.i.norm2.*
//   transformer.h.i.attn.c_attn.weight (d, 3d)     layers.i.attention.W_q, W_k, W_v weights: its transpose in three
//   transformer.h.i.attn.c_attn.bias (3d)          ... and their biases
//   transformer.h.i.attn.c_proj.* (d, d)           layers.i.attention.W_o.* (transposed)
//   transformer.h.i.mlp.c_fc.*, mlp.c_proj.*       layers.i.ffn.dense1.*, ffn.dense2.* (transposed: GPT-2's Conv1D
//                                                  stores (in, out))
//   transformer.ln_f.*                             norm.*
//
// Numerics: transformers runs Llama's RMSNorm and its rotary angles in float32 even in a float64 model; attend
// computes in Scalar throughout (angles in double), so a float64 model of transformers and attend's double differ by
// about 1e-7 there (tests/reference/make_causal_lm_fixtures.py measures it).
//
// Refused with std::invalid_argument naming the tensor or field: another model_type, a missing, misshapen or
// unexpected tensor, biases on some projections only (Qwen2's q, k and v biases without o's), a rope_scaling.
#pragma once

#include <attend/config.hpp>

#include <attend/activation.hpp>
#include <attend/causal_lm.hpp>
#include <attend/from_torch.hpp>
#include <attend/random.hpp>
#include <attend/state_dict.hpp>
#include <attend/tensor.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {

namespace detail {

// Field `key` of a config.json, or `fallback` when absent or null.
template <class T>
T json_field(const nlohmann::json& config, const char* key, T fallback) {
  const auto found = config.find(key);
  if (found == config.end() || found->is_null()) return fallback;
  try {
    return found->get<T>();
  } catch (const nlohmann::json::exception&) {
    throw std::invalid_argument(
        message("causal_lm_config_from_json: config field \"", key, "\" has the wrong type: ", found->dump()));
  }
}

inline Activation activation_from_transformers(const std::string& name) {
  if (name == "silu" || name == "swish") return Activation::silu;
  if (name == "gelu") return Activation::gelu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") return Activation::gelu_tanh;
  if (name == "relu") return Activation::relu;
  throw std::invalid_argument(message("causal_lm_config_from_json: activation \"", name,
                                      "\" is not one of silu, swish, gelu, gelu_new, gelu_pytorch_tanh, relu"));
}

// A rank-2 tensor transposed: GPT-2's Conv1D stores its weight (in, out), Linear's is (out, in).
template <class Scalar>
NamedTensor<Scalar> transposed(const NamedTensor<Scalar>& t) {
  return named_tensor(to_matrix(t, "").transpose());
}

}  // namespace detail

// A CausalLMConfig from a transformers config.json's contents (model_type "llama", "mistral" or "gpt2").
inline CausalLMConfig causal_lm_config_from_json(const nlohmann::json& j) {
  constexpr const char* where = "causal_lm_config_from_json";
  const std::string type = detail::json_field<std::string>(j, "model_type", "");
  CausalLMConfig c;
  if (type == "llama" || type == "mistral") {
    detail::require(!j.contains("rope_scaling") || j["rope_scaling"].is_null(), where,
                    ": rope_scaling is not supported, got ",
                    j.contains("rope_scaling") ? j["rope_scaling"].dump() : "");
    c = CausalLMConfig::llama(
        detail::json_field<Index>(j, "vocab_size", 0), detail::json_field<Index>(j, "hidden_size", 0),
        detail::json_field<Index>(j, "num_hidden_layers", 0), detail::json_field<Index>(j, "num_attention_heads", 0),
        detail::json_field<Index>(j, "num_key_value_heads", 0), detail::json_field<Index>(j, "intermediate_size", 0));
    double theta = detail::json_field<double>(j, "rope_theta", 10000.0);
    if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
      const auto& rope = j["rope_parameters"];
      const std::string rope_type = detail::json_field<std::string>(rope, "rope_type", "default");
      detail::require(rope_type == "default", where, ": rope_type \"", rope_type, "\" is not supported (default only)");
      theta = detail::json_field<double>(rope, "rope_theta", theta);
    }
    c.rope_theta = theta;
    c.norm_eps = detail::json_field<double>(j, "rms_norm_eps", 1e-6);
    c.head_dim = detail::json_field<Index>(j, "head_dim", 0);
    c.activation = detail::activation_from_transformers(detail::json_field<std::string>(j, "hidden_act", "silu"));
    c.attention_bias = detail::json_field<bool>(j, "attention_bias", false);
    c.ffn_bias = detail::json_field<bool>(j, "mlp_bias", false);
    c.tie_word_embeddings = detail::json_field<bool>(j, "tie_word_embeddings", false);
    if (type == "mistral") c.sliding_window = detail::json_field<Index>(j, "sliding_window", 0);
  } else if (type == "gpt2") {
    c = CausalLMConfig::gpt2(detail::json_field<Index>(j, "vocab_size", 0), detail::json_field<Index>(j, "n_embd", 0),
                             detail::json_field<Index>(j, "n_layer", 0), detail::json_field<Index>(j, "n_head", 0),
                             detail::json_field<Index>(j, "n_positions", 0),
                             detail::json_field<double>(j, "layer_norm_epsilon", 1e-5));
    c.ffn_num_hiddens = detail::json_field<Index>(j, "n_inner", 4 * c.num_hiddens);
    c.activation =
        detail::activation_from_transformers(detail::json_field<std::string>(j, "activation_function", "gelu_new"));
    c.tie_word_embeddings = detail::json_field<bool>(j, "tie_word_embeddings", true);
  } else {
    throw std::invalid_argument(
        detail::message(where, ": model_type must be \"llama\", \"mistral\" or \"gpt2\", got \"", type, "\""));
  }
  c.check(where);
  return c;
}

// The same from a config.json file.
inline CausalLMConfig causal_lm_config_from_file(const std::string& path) {
  std::ifstream in(path);
  detail::require(static_cast<bool>(in), "causal_lm_config_from_file: cannot open \"", path, "\"");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(detail::message("causal_lm_config_from_file: \"", path, "\" is not JSON: ", e.what()));
  }
  return causal_lm_config_from_json(j);
}

// transformers' tensor names -> attend's (see the top of this file). Throws on an unexpected name.
template <class Scalar>
StateDict<Scalar> causal_lm_state_dict_from_transformers(const CausalLMConfig& config, const StateDict<Scalar>& dict) {
  constexpr const char* where = "causal_lm_from_transformers";
  const bool gpt2 = dict.count("transformer.wte.weight") != 0;
  const Index d = config.num_hiddens;
  StateDict<Scalar> out;
  const auto layer_of = [&](const std::string& name, const std::string& prefix, std::string& rest) -> std::string {
    const std::size_t dot = name.find('.', prefix.size());
    rest = name.substr(dot + 1);
    return name.substr(prefix.size(), dot - prefix.size());
  };
  for (const auto& item : dict) {
    const std::string& name = item.first;
    const NamedTensor<Scalar>& t = item.second;
    std::string rest;
    if (!gpt2) {
      if (name == "model.embed_tokens.weight") {
        out["embedding.weight"] = t;
        continue;
      }
      if (name == "model.norm.weight") {
        out["norm.weight"] = t;
        continue;
      }
      if (name == "lm_head.weight") {
        if (!config.tie_word_embeddings) out["lm_head.weight"] = t;
        continue;
      }
      if (name.rfind("model.layers.", 0) == 0) {
        const std::string i = "layers." + layer_of(name, "model.layers.", rest) + ".";
        static const std::vector<std::pair<std::string, std::string>> names = {
            {"input_layernorm.weight", "norm1.weight"}, {"post_attention_layernorm.weight", "norm2.weight"},
            {"self_attn.q_proj.", "attention.W_q."},    {"self_attn.k_proj.", "attention.W_k."},
            {"self_attn.v_proj.", "attention.W_v."},    {"self_attn.o_proj.", "attention.W_o."},
            {"mlp.gate_proj.", "ffn.gate_proj."},       {"mlp.up_proj.", "ffn.up_proj."},
            {"mlp.down_proj.", "ffn.down_proj."}};
        bool known = false;
        for (const auto& n : names)
          if (rest.rfind(n.first, 0) == 0) {
            out[i + n.second + rest.substr(n.first.size())] = t;
            known = true;
            break;
          }
        if (known || rest == "self_attn.rotary_emb.inv_freq") continue;
      }
      if (name == "model.rotary_emb.inv_freq") continue;  // a buffer of older versions, recomputed here
    } else {
      if (name == "transformer.wte.weight") {
        out["embedding.weight"] = t;
        continue;
      }
      if (name == "transformer.wpe.weight") {
        out["positions.weight"] = t;
        continue;
      }
      if (name == "transformer.ln_f.weight" || name == "transformer.ln_f.bias") {
        out["norm." + name.substr(std::string("transformer.ln_f.").size())] = t;
        continue;
      }
      if (name == "lm_head.weight") continue;  // tied to transformer.wte.weight
      if (name.rfind("transformer.h.", 0) == 0) {
        const std::string i = "layers." + layer_of(name, "transformer.h.", rest) + ".";
        const bool matrix = rest.size() > 7 && rest.compare(rest.size() - 7, 7, ".weight") == 0;
        if (rest == "ln_1.weight" || rest == "ln_1.bias") {
          out[i + "norm1." + rest.substr(5)] = t;
          continue;
        }
        if (rest == "ln_2.weight" || rest == "ln_2.bias") {
          out[i + "norm2." + rest.substr(5)] = t;
          continue;
        }
        if (rest == "attn.bias" || rest == "attn.masked_bias") continue;  // buffers of older versions
        if (rest == "attn.c_attn.weight" || rest == "attn.c_attn.bias") {
          detail::require(matrix ? t.shape == std::vector<Index>{d, 3 * d} : t.shape == std::vector<Index>{3 * d},
                          where, ": \"", name, "\" must have shape ",
                          matrix ? detail::message("(", d, ", ", 3 * d, ")") : detail::message("(", 3 * d, ")"),
                          ", got ", detail::shape_text(t.shape));
          const NamedTensor<Scalar> W = matrix ? detail::transposed(t) : t;  // (3d, d) or (3d)
          const char* parts[] = {"attention.W_q.", "attention.W_k.", "attention.W_v."};
          for (Index p = 0; p < 3; ++p)
            out[i + parts[p] + (matrix ? "weight" : "bias")] = detail::torch_rows(W, p * d, d, matrix ? d : 0);
          continue;
        }
        static const std::vector<std::pair<std::string, std::string>> convs = {
            {"attn.c_proj.", "attention.W_o."}, {"mlp.c_fc.", "ffn.dense1."}, {"mlp.c_proj.", "ffn.dense2."}};
        bool known = false;
        for (const auto& n : convs)
          if (rest.rfind(n.first, 0) == 0) {
            detail::require(!matrix || t.rank() == 2, where, ": \"", name, "\" must be a matrix, got shape ",
                            detail::shape_text(t.shape));
            out[i + n.second + rest.substr(n.first.size())] = matrix ? detail::transposed(t) : t;
            known = true;
            break;
          }
        if (known) continue;
      }
    }
    throw std::invalid_argument(detail::message(where, ": unexpected tensor \"", name, "\" (not part of a ",
                                                gpt2 ? "GPT-2" : "Llama or Mistral", " model of this config)"));
  }
  return out;
}

// A CausalLM of `config` holding transformers' tensors (see the top of this file). Every tensor is checked (missing,
// misshapen, unexpected) before the model is returned; the model is in training mode, as any new module.
template <class Scalar>
CausalLM<Scalar> causal_lm_from_transformers(const CausalLMConfig& config, const StateDict<Scalar>& dict) {
  const StateDict<Scalar> mapped = causal_lm_state_dict_from_transformers(config, dict);
  Generator scratch;  // the initial parameters are overwritten at once
  CausalLM<Scalar> model(config, scratch);
  model.load_state_dict(mapped);
  return model;
}

}  // namespace ATTEND_ABI
}  // namespace attend
