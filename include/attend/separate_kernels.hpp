// attend/separate_kernels.hpp — attend's kernels compiled in one translation unit instead of in every one.
//
// attend is header-only, and each translation unit that runs a module compiles the kernels of every instruction-set
// level for float and double: most of its compile time (docs/ARCHITECTURE.md). A program with many such files may
// compile them once:
//
//   - define ATTEND_SEPARATE_KERNELS for every file of the program (target_compile_definitions), so that attend's
//     headers declare the kernel tables and do not compile them;
//   - include this header in exactly one .cpp file, compiled with the same -m flags as the others.
//
// The kernels and their run-time dispatch are the same in both ways of building. A file compiled with other -m flags
// names another attend namespace (attend/config.hpp), so a missing or mismatched definition is a link error
// ("undefined reference to ... kernels_for<float>"), never a silent mix.
#pragma once

#include <attend/detail/kernels.hpp>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

template const Kernels<float>& kernels_for<float>(Isa);
template const Kernels<double>& kernels_for<double>(Isa);

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
