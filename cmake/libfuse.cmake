# libfuse 3.17, built from the Debian source package that
# scripts/fetch-libfuse.sh (run by scripts/install-deps.sh) unpacks, as a
# static library in this build tree. Bookworm's libfuse3-dev (3.14) cannot
# negotiate FUSE_HANDLE_KILLPRIV_V2 or passthrough. The mount helper stays
# the system's: the library runs the fusermount3 on PATH (package fuse3).
#
# Defines the target ckptfs::libfuse (headers, static library, threads) and
# CKPTFS_LIBFUSE_VERSION (the Debian version of the source).
include(ExternalProject)

set(_ckptfs_deps_dir "${PROJECT_SOURCE_DIR}/.deps")
if(DEFINED ENV{CKPTFS_DEPS_DIR} AND NOT "$ENV{CKPTFS_DEPS_DIR}" STREQUAL "")
  set(_ckptfs_deps_dir "$ENV{CKPTFS_DEPS_DIR}")
endif()
set(CKPTFS_LIBFUSE_SOURCE_DIR "${_ckptfs_deps_dir}/fuse3/source" CACHE PATH
    "Unpacked libfuse 3.17 source (scripts/fetch-libfuse.sh)")
if(NOT EXISTS "${CKPTFS_LIBFUSE_SOURCE_DIR}/meson.build")
  message(FATAL_ERROR "ckptfs: no libfuse 3.17 source in ${CKPTFS_LIBFUSE_SOURCE_DIR}: "
                      "run scripts/install-deps.sh (it fetches fuse3 3.17.2 from the Debian archive)")
endif()
set(CKPTFS_LIBFUSE_VERSION "unknown")
if(EXISTS "${CKPTFS_LIBFUSE_SOURCE_DIR}/../VERSION")
  file(STRINGS "${CKPTFS_LIBFUSE_SOURCE_DIR}/../VERSION" CKPTFS_LIBFUSE_VERSION LIMIT_COUNT 1)
endif()

find_program(CKPTFS_MESON meson REQUIRED)
find_program(CKPTFS_NINJA NAMES ninja ninja-build REQUIRED)

set(_libfuse_build "${CMAKE_BINARY_DIR}/_deps/libfuse")
set(_libfuse_meson "${_libfuse_build}/meson")
set(_libfuse_lib "${_libfuse_meson}/lib/libfuse3.a")
# The library only: no helpers, examples or tests, nothing installed. Built
# with the project's C compiler, without the project's sanitizer flags.
ExternalProject_Add(ckptfs_libfuse_build
  SOURCE_DIR "${CKPTFS_LIBFUSE_SOURCE_DIR}"
  BINARY_DIR "${_libfuse_build}"
  CONFIGURE_COMMAND ${CMAKE_COMMAND} -E rm -rf "${_libfuse_meson}"
  COMMAND ${CMAKE_COMMAND} -E env CC=${CMAKE_C_COMPILER}
    ${CKPTFS_MESON} setup "${_libfuse_meson}" "${CKPTFS_LIBFUSE_SOURCE_DIR}"
      --buildtype=release -Ddefault_library=static -Db_staticpic=true
      -Dutils=false -Dexamples=false -Dtests=false -Duseroot=false -Dinitscriptdir=
  BUILD_COMMAND ${CKPTFS_NINJA} -C "${_libfuse_meson}" lib/libfuse3.a
  BUILD_BYPRODUCTS "${_libfuse_lib}"
  INSTALL_COMMAND ""
  LOG_CONFIGURE ON
  LOG_BUILD ON
  LOG_OUTPUT_ON_FAILURE ON)

# The include directories must exist when CMake generates.
file(MAKE_DIRECTORY "${_libfuse_meson}")
add_library(ckptfs_libfuse INTERFACE)
add_library(ckptfs::libfuse ALIAS ckptfs_libfuse)
# libfuse_config.h is generated into the build directory.
target_include_directories(ckptfs_libfuse SYSTEM INTERFACE
  "${CKPTFS_LIBFUSE_SOURCE_DIR}/include" "${_libfuse_meson}")
target_link_libraries(ckptfs_libfuse INTERFACE "${_libfuse_lib}" Threads::Threads ${CMAKE_DL_LIBS})
add_dependencies(ckptfs_libfuse ckptfs_libfuse_build)
