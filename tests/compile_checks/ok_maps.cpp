// The control case: the calls the other cases break, made with arguments of the right kind (Tensor3s and maps of the
// caller's memory), must compile; otherwise a broken include path would make every other case "fail" and pass.
#include <attend/additive_attention.hpp>
#include <attend/conv1d.hpp>
#include <attend/grouped_query_attention.hpp>
#include <attend/kv_cache.hpp>
#include <attend/linear.hpp>
#include <attend/loss.hpp>
#include <attend/masked_softmax.hpp>
#include <attend/multi_head_attention.hpp>
#include <attend/rnn.hpp>
#include <attend/safetensors.hpp>
#include <attend/scaled_dot_product_attention.hpp>
#include <attend/transpose_qkv.hpp>
#include <vector>

void calls() {
  std::vector<float> q(2 * 3 * 8), k(2 * 4 * 4), v(2 * 4 * 4), out(2 * 3 * 8);
  const attend::ConstTensorMap3<float> Q(q.data(), 2, 3, 8), K(k.data(), 2, 4, 4), V(v.data(), 2, 4, 4);
  attend::TensorMap3<float> O(out.data(), 2, 3, 8);
  attend::Tensor3<float> lse;
  attend::Tensor3<float> Y = attend::scaled_dot_product_attention(Q, K, V, 4, 2, {}, {}, &lse);
  attend::scaled_dot_product_attention(Q, K, V, 4, 2, {}, {}, nullptr, O);
  attend::scaled_dot_product_attention(Q, K, V, 4, 2, {}, {}, nullptr, Y);
  attend::scaled_dot_product_attention_backward(Q, K, V, Y, lse, O, 4, 2);

  attend::KVCache<float> cache(2, 2, 2, 16);
  cache.append(K, V);
  attend::scaled_dot_product_attention(Q, cache, 4);
  attend::scaled_dot_product_attention(Q, cache, 4, {}, {}, nullptr, O);

  attend::GroupedQueryAttention<float> gqa(8, 4, 2);
  gqa(Q);
  gqa.forward(Q);
  gqa.forward(Q, attend::Mask::causal(), O);
  gqa(Q, cache, attend::Mask::causal(), O);

  attend::Metadata metadata;
  attend::load_safetensors<float>("weights.safetensors", metadata);
}

// The modules and functions of d2l's chapter, on the same maps.
void chapter(attend::MultiHeadAttention<float>& mha, attend::Linear<float>& linear, attend::RNN<float>& rnn,
             attend::Conv1d<float>& conv, attend::AdditiveAttention<float>& additive,
             attend::AttentionWorkspace<float>& workspace, const float* x, float* y) {
  const attend::ConstTensorMap3<float> X(x, 2, 16, 64);
  attend::TensorMap3<float> Y(y, 2, 16, 64);
  mha(X, X, X, attend::ValidLens{3, 16});
  mha.backward(X);
  mha.forward(X, X, X, attend::Mask::causal(), workspace, Y);
  linear.forward(X, Y);
  rnn.forward(X, Y);
  conv.forward(X, Y);
  additive.forward(X, X, X, attend::Mask{}, Y);
  attend::masked_softmax(X);
  attend::transpose_qkv(X, 4);
  attend::mse_loss(X, Y);
}
