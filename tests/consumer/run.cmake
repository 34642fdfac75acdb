# Builds and runs the consumer project; run as
#   cmake -DMODE=subdirectory|find_package -DATTEND_SOURCE_DIR=... -DWORK_DIR=... -DCXX=... [-DPREFIX=...] -P run.cmake
# MODE=find_package installs attend into PREFIX first, then finds it there.
cmake_minimum_required(VERSION 3.16)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "failed (${result}): ${ARGN}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
  set(last_error "${err}" PARENT_SCOPE)
endfunction()

# The consumer is configured without a build type, as a newcomer's first project often is: attend must say that its
# kernels are then unoptimised (cmake/attendBuildType.cmake).
macro(require_build_type_warning)
  if(NOT last_error MATCHES "attend: CMAKE_BUILD_TYPE is empty")
    message(FATAL_ERROR "configuring the consumer without a build type gave no warning from attend:\n${last_error}")
  endif()
endmacro()

file(REMOVE_RECURSE ${WORK_DIR})
set(consumer_source ${ATTEND_SOURCE_DIR}/tests/consumer)
if(MODE STREQUAL "subdirectory")
  run(${CMAKE_COMMAND} -S ${consumer_source} -B ${WORK_DIR}/build -DCMAKE_CXX_COMPILER=${CXX}
      -DATTEND_SOURCE_DIR=${ATTEND_SOURCE_DIR})
  require_build_type_warning()
elseif(MODE STREQUAL "find_package")
  # Install from a build tree of attend alone (no tests, no examples), as a packager would.
  run(${CMAKE_COMMAND} -S ${ATTEND_SOURCE_DIR} -B ${WORK_DIR}/attend-build -DCMAKE_CXX_COMPILER=${CXX}
      -DATTEND_BUILD_TESTS=OFF -DATTEND_BUILD_EXAMPLES=OFF -DATTEND_BUILD_BENCHMARKS=OFF)
  run(${CMAKE_COMMAND} --install ${WORK_DIR}/attend-build --prefix ${WORK_DIR}/prefix)
  # attend_separate_kernels refuses a scalar type it has no kernels for, naming it.
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${consumer_source} -B ${WORK_DIR}/wrong -DCMAKE_CXX_COMPILER=${CXX}
                  -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DWRONG_SCALAR=ON
                  RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(result EQUAL 0 OR NOT err MATCHES "SCALARS takes float and double, got 'half'")
    message(FATAL_ERROR "attend_separate_kernels(... SCALARS half) did not stop with its message:\n${out}\n${err}")
  endif()
  # The installed headers, used the second way: the float kernels in a file of their own.
  run(${CMAKE_COMMAND} -S ${consumer_source} -B ${WORK_DIR}/build -DCMAKE_CXX_COMPILER=${CXX}
      -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DSEPARATE_KERNELS=ON)
  require_build_type_warning()
else()
  message(FATAL_ERROR "MODE must be subdirectory or find_package, got '${MODE}'")
endif()
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer)
if(NOT last_output STREQUAL "2 4 100\n")
  message(FATAL_ERROR "consumer printed '${last_output}', expected '2 4 100'")
endif()
message(STATUS "consumer (${MODE}) printed: ${last_output}")
