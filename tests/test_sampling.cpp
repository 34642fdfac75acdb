// sample_token: greedy is the largest logit; sampling draws from softmax(logits / temperature) over the top k (its
// definition), checked by frequencies over many draws; bad options are refused.
#include <attend/sampling.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <support/checks.hpp>
#include <vector>

using attend::Index;
using attend::SamplingOptions;

TEMPLATE_TEST_CASE("sample_token: greedy, temperature and top-k", "[sampling]", float, double) {
  // softmax at temperature 1: 0.5, 0.3, 0.2, and a token far below.
  const std::vector<TestType> logits = {TestType(std::log(0.3)), TestType(std::log(0.5)), TestType(std::log(0.2)),
                                        TestType(-30)};
  attend::Generator generator(3);
  REQUIRE(attend::sample_token(logits.data(), 4, SamplingOptions{}, generator) == 1);
  REQUIRE(attend::sample_token(logits.data(), 4, SamplingOptions{1.0, 1}, generator) == 1);

  const auto frequencies = [&](SamplingOptions options) {
    std::vector<double> counts(4, 0.0);
    const int draws = 40000;
    for (int i = 0; i < draws; ++i)
      counts[std::size_t(attend::sample_token(logits.data(), 4, options, generator))] += 1;
    for (double& c : counts) c /= draws;
    return counts;
  };
  // Binomial standard deviation at 40000 draws: at most 0.0025; 4 of them.
  const std::vector<double> all = frequencies(SamplingOptions{1.0, 0});
  CHECK(std::abs(all[0] - 0.3) < 0.01);
  CHECK(std::abs(all[1] - 0.5) < 0.01);
  CHECK(std::abs(all[2] - 0.2) < 0.01);
  const std::vector<double> top2 = frequencies(SamplingOptions{1.0, 2});  // 0.5 : 0.3 renormalised
  CHECK(std::abs(top2[1] - 0.625) < 0.01);
  CHECK(std::abs(top2[0] - 0.375) < 0.01);
  CHECK(top2[2] == 0.0);
  const std::vector<double> sharp = frequencies(SamplingOptions{0.5, 0});  // p^2 renormalised: 0.25, 0.09, 0.04
  CHECK(std::abs(sharp[1] - 0.25 / 0.38) < 0.01);
  CHECK(std::abs(sharp[0] - 0.09 / 0.38) < 0.01);

  attend_test::require_invalid(
      [&] {
        attend::sample_token(logits.data(), 4, SamplingOptions{-1.0, 0}, generator);
      },
      "sample_token: temperature must be finite and at least 0, got -1");
  attend_test::require_invalid(
      [&] {
        attend::sample_token(logits.data(), 4, SamplingOptions{1.0, -2}, generator);
      },
      "sample_token: top_k must be at least 0, got -2");
}
