// The instruction-set levels this CPU runs (attend/isa.hpp), for tests that check each level's kernels directly.
#pragma once

#include <attend/detail/kernels.hpp>
#include <attend/isa.hpp>

#include <vector>

namespace attend_test {

// Every level this CPU can run, best first (generic always among them).
inline std::vector<attend::Isa> levels() { return attend::available_isas(); }

}  // namespace attend_test
