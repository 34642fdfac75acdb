// The kernels of every test program, compiled once (attend/separate_kernels.hpp).
#include <attend/separate_kernels.hpp>
