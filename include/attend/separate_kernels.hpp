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
// CMake does both for a target: attend_separate_kernels(<target> [SCALARS float double]) (cmake/attendKernels.cmake).
// The file compiles the kernels of the scalar types whose macro ATTEND_KERNELS_FLOAT or ATTEND_KERNELS_DOUBLE is 1
// (the default, for each) when it includes this header: a program that uses float alone sets ATTEND_KERNELS_DOUBLE
// to 0 and compiles half the kernels.
//
// The kernels and their run-time dispatch are the same in both ways of building. A file compiled with other -m flags
// names another attend namespace (attend/config.hpp), so a missing or mismatched definition is a link error
// ("undefined reference to ... kernels_for<float>"), never a silent mix.
#pragma once

#include <attend/detail/kernels.hpp>

#ifndef ATTEND_KERNELS_FLOAT
#define ATTEND_KERNELS_FLOAT 1
#endif
#ifndef ATTEND_KERNELS_DOUBLE
#define ATTEND_KERNELS_DOUBLE 1
#endif

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

#if ATTEND_KERNELS_FLOAT
template const Kernels<float>& kernels_for<float>(Isa);
#endif
#if ATTEND_KERNELS_DOUBLE
template const Kernels<double>& kernels_for<double>(Isa);
#endif

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
