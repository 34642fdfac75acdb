# The compile checks: each file of tests/compile_checks/ is one call of attend's public API. A file whose name starts
# with ok_ must compile (so must README.md's examples: tests/CMakeLists.txt writes them into one); any other must not,
# and the compiler's output must hold, on an error line, the text its first line names:
#   // expect: must be a rank-3 tensor
# (a substring of the static_assert's message), so that a call is known to stop at the check meant and not at some
# other error. Only the syntax is checked (-fsyntax-only instantiates the templates, so static_asserts fire); nothing is
# built. Run as
#   cmake -DCXX=... -DCASE=<tests/compile_checks/case.cpp> -DINCLUDES="dir;dir" -P run.cmake
cmake_minimum_required(VERSION 3.16)

foreach(variable CXX CASE INCLUDES)
  if(NOT DEFINED ${variable})
    message(FATAL_ERROR "compile check: run as cmake -DCXX=... -DCASE=<file.cpp> -DINCLUDES=\"dir;dir\" -P run.cmake")
  endif()
endforeach()

get_filename_component(name "${CASE}" NAME_WE)
set(must_compile FALSE)
if(name MATCHES "^ok_")
  set(must_compile TRUE)
else()
  file(STRINGS "${CASE}" first_line LIMIT_COUNT 1)
  if(NOT first_line MATCHES "^// expect: (.+)$")
    message(FATAL_ERROR "${CASE}: the first line must be `// expect: <text of the static_assert's message>` "
                        "(or the name must start with ok_ for a call that compiles)")
  endif()
  string(STRIP "${CMAKE_MATCH_1}" expected)
endif()

# The compiler's messages in English and without colours, for the search below.
set(ENV{LC_ALL} C)
set(flags -std=c++17 -fsyntax-only -fdiagnostics-color=never)
foreach(dir IN LISTS INCLUDES)
  list(APPEND flags -I${dir})
endforeach()
execute_process(COMMAND ${CXX} ${flags} ${CASE} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(output "${out}${err}")

if(must_compile)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${name}: must compile, but did not (${result}):\n${output}")
  endif()
  message(STATUS "${name}: compiles")
  return()
endif()

if(result EQUAL 0)
  message(FATAL_ERROR "${name}: compiled, but must stop with \"${expected}\"")
endif()
# Each occurrence of the text, until one is on an error line (g++: "error: static assertion failed: <message>",
# clang: "error: static_assert failed due to requirement '...' \"<message>\""): a source line the compiler quotes
# around another error does not count.
set(rest "${output}")
set(found FALSE)
while(NOT found)
  string(FIND "${rest}" "${expected}" at)
  if(at EQUAL -1)
    break()
  endif()
  string(SUBSTRING "${rest}" 0 ${at} before)
  string(FIND "${before}" "\n" line_start REVERSE)
  math(EXPR line_start "${line_start} + 1")
  string(SUBSTRING "${before}" ${line_start} -1 line_head)
  if(line_head MATCHES "error:")
    set(found TRUE)
  endif()
  string(LENGTH "${expected}" length)
  math(EXPR next "${at} + ${length}")
  string(SUBSTRING "${rest}" ${next} -1 rest)
endwhile()
if(NOT found)
  message(FATAL_ERROR "${name}: did not compile, but no error says \"${expected}\":\n${output}")
endif()
# And it is the only error: the check stops the compilation by itself, with no errors after it for the user to read
# through.
string(REGEX MATCHALL "error:" errors "${output}")
list(LENGTH errors error_count)
if(NOT error_count EQUAL 1)
  message(FATAL_ERROR "${name}: stops with \"${expected}\", but with ${error_count} errors, not 1:\n${output}")
endif()
message(STATUS "${name}: stops with \"${expected}\"")
