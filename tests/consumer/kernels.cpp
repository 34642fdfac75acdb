// The consumer's kernels, compiled in this one file (attend/separate_kernels.hpp).
#include <attend/separate_kernels.hpp>
