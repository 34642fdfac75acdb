# The ODR test: two objects that include attend, one compiled with -march=x86-64 and one with -march=x86-64-v4, must
# share no attend function (every attend symbol lives in a namespace named after the compile flags: config.hpp); then
# the two are linked and run. Run as
#   cmake -DCXX=... -DSOURCE_DIR=<tests/odr> -DWORK_DIR=... -DINCLUDES="dir;dir" -P run.cmake
cmake_minimum_required(VERSION 3.16)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "failed (${result}): ${ARGN}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(flags -std=c++17 -O2)
foreach(dir IN LISTS INCLUDES)
  list(APPEND flags -I${dir})
endforeach()

# The attend functions each object defines: the code symbols (T, W, t, i) in namespace attend, by their mangled names
# (which hold "6attend"; a demangled name's brackets would confuse CMake's lists).
set(objects)
foreach(arch x86-64 x86-64-v4)
  string(REPLACE "-" "_" name ${arch})
  run(${CXX} ${flags} -march=${arch} -DSEED_ATTENTION=seed_attention_${name} -c ${SOURCE_DIR}/attention.cpp
      -o ${WORK_DIR}/${name}.o)
  run(nm --defined-only ${WORK_DIR}/${name}.o)
  string(REPLACE "\n" ";" lines "${last_output}")
  set(symbols)
  foreach(line IN LISTS lines)
    if(line MATCHES "^[0-9a-f]+ [TWti] (.*6attend.*)$")
      list(APPEND symbols "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  list(LENGTH symbols count)
  message(STATUS "${arch}: ${count} attend functions")
  if(count EQUAL 0)
    message(FATAL_ERROR "${arch}: no attend function found in ${name}.o (nm's output changed?)")
  endif()
  set(symbols_${name} ${symbols})
  list(APPEND objects ${WORK_DIR}/${name}.o)
endforeach()

set(common)
foreach(symbol IN LISTS symbols_x86_64)
  if(symbol IN_LIST symbols_x86_64_v4)
    list(APPEND common "${symbol}")
  endif()
endforeach()
list(LENGTH common count)
if(NOT count EQUAL 0)
  list(SUBLIST common 0 10 first)
  execute_process(COMMAND c++filt ${first} OUTPUT_VARIABLE demangled)
  message(FATAL_ERROR "${count} attend functions are defined by both objects, e.g.\n${demangled}")
endif()
message(STATUS "no attend function in common")

run(${CXX} ${flags} -c ${SOURCE_DIR}/main.cpp -o ${WORK_DIR}/main.o)
run(${CXX} ${WORK_DIR}/main.o ${objects} -o ${WORK_DIR}/odr)
run(${WORK_DIR}/odr)
message(STATUS "${last_output}")
