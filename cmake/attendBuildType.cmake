# Tells a consumer whose build has no optimisation flags at all (a single-configuration generator with an empty
# CMAKE_BUILD_TYPE): attend is header-only, so its kernels compile with the consumer's flags, and without -O they run
# tens of times slower. Included by attend's CMakeLists.txt for add_subdirectory() and by attendConfig.cmake for
# find_package(); says it once per configure.
if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  get_property(attend_build_type_told GLOBAL PROPERTY ATTEND_BUILD_TYPE_TOLD)
  if(NOT attend_build_type_told)
    set_property(GLOBAL PROPERTY ATTEND_BUILD_TYPE_TOLD ON)
    message(WARNING "attend: CMAKE_BUILD_TYPE is empty, so nothing is optimised: attend's header-only kernels then run "
                    "tens of times slower. Configure with -DCMAKE_BUILD_TYPE=Release (or RelWithDebInfo).")
  endif()
  unset(attend_build_type_told)
endif()
