// attend/isa.hpp: the level the kernels run on, how it is chosen, forced and reported, and its errors; and that
// every level gives the seed's multi-head attention within float rounding of the double-precision fixture's result.
#include <attend/attend.hpp>
#include <attend/isa.hpp>
#include <catch2/catch.hpp>
#include <support/levels.hpp>
#include <support/matchers.hpp>
#include <support/random_tensor.hpp>

#include <cstdlib>
#include <stdexcept>
#include <string>

using attend::Isa;

namespace {

// Restores the process's choice, and ATTEND_ISA, when a test is done with them.
struct RestoreChoice {
  int chosen = attend::process::chosen_isa.load();
  std::string env = std::getenv("ATTEND_ISA") != nullptr ? std::getenv("ATTEND_ISA") : "";
  bool had_env = std::getenv("ATTEND_ISA") != nullptr;
  ~RestoreChoice() {
    if (had_env) {
      setenv("ATTEND_ISA", env.c_str(), 1);
    } else {
      unsetenv("ATTEND_ISA");
    }
    attend::process::chosen_isa.store(chosen);
  }
};

// The first call of a fresh process: nothing chosen yet.
void forget_choice() { attend::process::chosen_isa.store(-1); }

}  // namespace

TEST_CASE("available_isas lists the levels this CPU runs, best first, generic last", "[isa]") {
  const auto levels = attend::available_isas();
  REQUIRE(!levels.empty());
  REQUIRE(levels.back() == Isa::generic);
  for (std::size_t i = 1; i < levels.size(); ++i) REQUIRE(static_cast<int>(levels[i - 1]) > static_cast<int>(levels[i]));
  REQUIRE(attend::best_isa() == levels.front());
  // avx512 needs avx2 (every AVX-512 CPU has AVX2 and FMA), avx512_bf16 avx512
  if (levels.front() == Isa::avx512_bf16) REQUIRE(levels.size() == 4);
  if (levels.front() == Isa::avx512) REQUIRE(levels.size() == 3);
  CHECK(std::string(attend::isa_name(Isa::avx512_bf16)) == "avx512_bf16");
  CHECK(std::string(attend::isa_name(Isa::avx512)) == "avx512");
  CHECK(std::string(attend::isa_name(Isa::avx2)) == "avx2");
  CHECK(std::string(attend::isa_name(Isa::generic)) == "generic");
}

TEST_CASE("the first call takes the best level, or the one ATTEND_ISA names", "[isa]") {
  RestoreChoice restore;
  unsetenv("ATTEND_ISA");
  forget_choice();
  REQUIRE(attend::active_isa() == attend::best_isa());
  for (Isa isa : attend_test::bf16_levels()) {
    setenv("ATTEND_ISA", attend::isa_name(isa), 1);
    forget_choice();
    REQUIRE(attend::active_isa() == isa);
    // avx512_bf16 adds bfloat16 products: float and double run avx512's kernels there
    const Isa float_level = isa == Isa::avx512_bf16 ? Isa::avx512 : isa;
    REQUIRE(attend::detail::kernels<float>().isa == float_level);
    REQUIRE(attend::detail::kernels<double>().isa == float_level);
  }
  setenv("ATTEND_ISA", "", 1);  // empty: as unset
  forget_choice();
  REQUIRE(attend::active_isa() == attend::best_isa());
}

TEST_CASE("set_isa forces a level, by value or by name, over ATTEND_ISA", "[isa]") {
  RestoreChoice restore;
  setenv("ATTEND_ISA", "generic", 1);
  for (Isa isa : attend_test::bf16_levels()) {
    attend::set_isa(isa);
    REQUIRE(attend::active_isa() == isa);
    attend::set_isa(Isa::generic);
    attend::set_isa(std::string(attend::isa_name(isa)));
    REQUIRE(attend::active_isa() == isa);
  }
  attend::set_isa("best");
  REQUIRE(attend::active_isa() == attend::best_isa());
}

TEST_CASE("an unknown level, or one this CPU lacks, is a clear error naming the value and the levels offered",
          "[isa][errors]") {
  RestoreChoice restore;
  std::string offered;
  for (Isa isa : attend_test::bf16_levels())
    offered += (offered.empty() ? "" : ", ") + std::string(attend::isa_name(isa));
  attend::set_isa(Isa::generic);
  REQUIRE_THROWS_MATCHES(attend::set_isa("sse9"), std::invalid_argument,
                         Catch::Matchers::Message("set_isa: unknown instruction set \"sse9\"; expected one of "
                                                  "avx512_bf16, avx512, avx2, generic (this CPU offers " + offered +
                                                  ")"));
  REQUIRE(attend::active_isa() == Isa::generic);  // unchanged
  setenv("ATTEND_ISA", "AVX2", 1);                // names are lower case
  forget_choice();
  REQUIRE_THROWS_MATCHES(attend::active_isa(), std::invalid_argument,
                         Catch::Matchers::Message("ATTEND_ISA: unknown instruction set \"AVX2\"; expected one of "
                                                  "avx512_bf16, avx512, avx2, generic (this CPU offers " + offered +
                                                  ")"));
  // a module's call throws it too, before any work, and the module is unchanged
  attend::MultiHeadAttention<float> attention(8, 8, 8, 8, 2, 0.0f);
  attention.eval();
  attend::Tensor3<float> X(1, 3, 8);
  X.setConstant(0.25f);
  const attend::Matrix<float> W_q = attention.W_q().weight();
  REQUIRE_THROWS_AS(attention(X, X, X), std::invalid_argument);
  REQUIRE(attention.W_q().weight() == W_q);
  for (Isa isa : {Isa::avx512_bf16, Isa::avx512, Isa::avx2}) {
    if (attend::detail::cpu_has(isa)) continue;
    const std::string name = attend::isa_name(isa);
    REQUIRE_THROWS_MATCHES(attend::set_isa(isa), std::invalid_argument,
                           Catch::Matchers::Message("set_isa: this CPU cannot run \"" + name + "\"; it offers " +
                                                    offered));
    REQUIRE_THROWS_MATCHES(attend::set_isa(name), std::invalid_argument,
                           Catch::Matchers::Message("set_isa: this CPU cannot run \"" + name + "\"; it offers " +
                                                    offered));
    setenv("ATTEND_ISA", name.c_str(), 1);
    forget_choice();
    REQUIRE_THROWS_MATCHES(attend::active_isa(), std::invalid_argument,
                           Catch::Matchers::Message("ATTEND_ISA: this CPU cannot run \"" + name + "\"; it offers " +
                                                    offered));
  }
  attend::set_isa(Isa::generic);  // set_isa recovers from a bad ATTEND_ISA
  REQUIRE(attend::active_isa() == Isa::generic);
}

TEST_CASE("a value outside the enum is no level: set_isa refuses it, cpu_has and isa_name do not take it for one",
          "[isa][errors]") {
  RestoreChoice restore;
  attend::set_isa(Isa::generic);
  REQUIRE_THROWS_MATCHES(attend::set_isa(static_cast<Isa>(7)), std::invalid_argument,
                         Catch::Matchers::Message("set_isa: isa must be Isa::generic, Isa::avx2, Isa::avx512 or "
                                                  "Isa::avx512_bf16, got Isa(7)"));
  REQUIRE_THROWS_MATCHES(attend::set_isa(static_cast<Isa>(-1)), std::invalid_argument,
                         Catch::Matchers::Message("set_isa: isa must be Isa::generic, Isa::avx2, Isa::avx512 or "
                                                  "Isa::avx512_bf16, got Isa(-1)"));
  REQUIRE(attend::active_isa() == Isa::generic);  // unchanged
  for (int value : {-1, 4, 7}) {
    CAPTURE(value);
    CHECK_FALSE(attend::detail::cpu_has(static_cast<Isa>(value)));
    CHECK(std::string(attend::isa_name(static_cast<Isa>(value))) == "unknown");
  }
}

TEMPLATE_TEST_CASE("every level gives the seed's attention within rounding of the others", "[isa]", float, double) {
  // The seed's MultiHeadAttention (100 features, 5 heads, valid lengths (3, 2)) and a larger self-attention on the
  // tiled path (n = 300, 2 heads of 16, causal), on every level: each within the suite's tolerance of the generic
  // level's result (the suite's fixtures check each level against PyTorch in test_multi_head_attention, run once per
  // level).
  RestoreChoice restore;
  attend::Generator generator(7);
  attend::MultiHeadAttention<TestType> seed(100, 100, 100, 100, 5, TestType(0), false, generator);
  attend::MultiHeadAttention<TestType> tiled(32, 32, 32, 32, 2, TestType(0), true, generator);
  seed.eval();
  tiled.eval();
  tiled.set_path(attend::AttentionPath::tiled);
  const attend::Tensor3<TestType> X = attend_test::random_tensor<TestType>(2, 4, 100, 8);
  const attend::Tensor3<TestType> Z = attend_test::random_tensor<TestType>(1, 300, 32, 9);
  attend::set_isa(Isa::generic);
  const attend::Tensor3<TestType> seed_generic = seed(X, X, X, attend::ValidLens{3, 2});
  const attend::Tensor3<TestType> tiled_generic = tiled(Z, Z, Z, attend::Mask::causal());
  for (Isa isa : attend_test::levels()) {
    CAPTURE(attend::isa_name(isa));
    attend::set_isa(isa);
    REQUIRE_THAT(seed(X, X, X, attend::ValidLens{3, 2}),
                 attend_test::Near(seed_generic, attend_test::tolerance<TestType>()));
    REQUIRE_THAT(tiled(Z, Z, Z, attend::Mask::causal()),
                 attend_test::Near(tiled_generic, attend_test::tolerance<TestType>()));
  }
}
