// attend/sampling.hpp — choosing the next token from a row of logits: greedy, or sampled with a temperature from the
// top k.
//
//   temperature 0          the largest logit (the first of equal ones)
//   temperature t > 0      softmax(logits / t) over the top_k largest logits (all when top_k is 0), one draw from the
//                          Generator (its uniform01<double>), walking the candidates from the largest
#pragma once

#include <attend/config.hpp>

#include <algorithm>
#include <attend/random.hpp>
#include <attend/tensor.hpp>
#include <cmath>
#include <numeric>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {

struct SamplingOptions {
  double temperature = 0;  // 0: greedy
  Index top_k = 0;         // 0: every token
};

// logits: vocab values -> the chosen token in [0, vocab).
template <class Scalar>
Index sample_token(const Scalar* logits, Index vocab, const SamplingOptions& options, Generator& generator) {
  constexpr const char* where = "sample_token";
  detail::require_at_least(vocab, 1, where, "vocab");
  detail::require(options.temperature >= 0 && std::isfinite(options.temperature), where,
                  ": temperature must be finite and at least 0, got ", options.temperature);
  detail::require_at_least(options.top_k, 0, where, "top_k");
  if (options.temperature == 0) return static_cast<Index>(std::max_element(logits, logits + vocab) - logits);
  const Index k = options.top_k == 0 ? vocab : std::min(options.top_k, vocab);
  std::vector<Index> order(static_cast<std::size_t>(vocab));  // the token ids, the k largest logits first
  std::iota(order.begin(), order.end(), Index(0));
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](Index a, Index b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  std::vector<double> weights(static_cast<std::size_t>(k));  // exp((logit - largest) / temperature)
  double total = 0;
  for (Index i = 0; i < k; ++i) {
    const double z = (double(logits[order[std::size_t(i)]]) - double(logits[order[0]])) / options.temperature;
    weights[std::size_t(i)] = std::exp(z);
    total += weights[std::size_t(i)];
  }
  double u = generator.uniform01<double>() * total;
  for (Index i = 0; i < k; ++i) {
    u -= weights[std::size_t(i)];
    if (u < 0) return order[std::size_t(i)];
  }
  return order[std::size_t(k - 1)];
}

}  // namespace ATTEND_ABI
}  // namespace attend
