// The instruction-set levels this CPU runs (attend/isa.hpp), for tests that check each level's kernels directly.
#pragma once

#include <attend/detail/kernels.hpp>
#include <attend/isa.hpp>

#include <vector>

namespace attend_test {

// Every level this CPU can run whose float and double kernels are its own, best first (generic always among them):
// avx512_bf16 runs avx512's and is left out.
inline std::vector<attend::Isa> levels() {
  std::vector<attend::Isa> own;
  for (attend::Isa isa : attend::available_isas())
    if (attend::detail::float_level(isa) == isa) own.push_back(isa);
  return own;
}

// Every level this CPU can run, best first: each takes bfloat16 products its own way (detail/bf16_products.hpp).
inline std::vector<attend::Isa> bf16_levels() { return attend::available_isas(); }

// The level in force until the scope ends, then the one before.
class ForcedLevel {
 public:
  explicit ForcedLevel(attend::Isa isa) : before_(attend::active_isa()) { attend::set_isa(isa); }
  ~ForcedLevel() { attend::set_isa(before_); }
  ForcedLevel(const ForcedLevel&) = delete;
  ForcedLevel& operator=(const ForcedLevel&) = delete;

 private:
  attend::Isa before_;
};

}  // namespace attend_test
