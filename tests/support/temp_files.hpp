// A directory of this process's own for the files a test writes, removed at exit (ctest runs each test case in a
// process of its own, in parallel), and the safetensors file names in it.
//
//   attend::save_safetensors(attend_test::safetensors_path<T>("round_trip"), dict);  // round_trip_float.safetensors
#pragma once

#include <filesystem>
#include <random>
#include <string>
#include <system_error>

namespace attend_test {

inline const std::filesystem::path& temp_dir() {
  struct Dir {
    std::filesystem::path path;
    Dir() {
      path = std::filesystem::temp_directory_path() / ("attend_test_" + std::to_string(std::random_device{}()));
      std::filesystem::create_directories(path);
    }
    ~Dir() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  };
  static const Dir dir;
  return dir.path;
}

// temp_dir() / "<stem>_float.safetensors" (or _double): float and double cases never share a file.
template <class Scalar>
std::string safetensors_path(const std::string& stem) {
  return (temp_dir() / (stem + (sizeof(Scalar) == 4 ? "_float" : "_double") + ".safetensors")).string();
}

}  // namespace attend_test
