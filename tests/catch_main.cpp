// The main of every test program. With ATTEND_ISA set (ctest runs each program once per instruction-set level), the
// program runs on that level, or, when this CPU lacks it, exits 77: ctest's SKIP_RETURN_CODE, a skipped test.
#define CATCH_CONFIG_RUNNER
#include <attend/isa.hpp>
#include <catch2/catch.hpp>

#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>

int main(int argc, char* argv[]) {
  const char* level = std::getenv("ATTEND_ISA");
  if (level != nullptr && *level != '\0') {
    try {
      attend::set_isa(std::string(level));
    } catch (const std::invalid_argument& error) {
      std::cout << "skipped: " << error.what() << '\n';
      return 77;
    }
    std::cout << "instruction set: " << attend::isa_name(attend::active_isa()) << '\n';
  }
  return Catch::Session().run(argc, argv);
}
