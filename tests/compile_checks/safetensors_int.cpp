// expect: attend's safetensors functions read float, double or bfloat16
// A state dict of another scalar type, read from a file.
#include <attend/safetensors.hpp>

void call(attend::Metadata& metadata) { attend::load_safetensors<int>("weights.safetensors", metadata); }
