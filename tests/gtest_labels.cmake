# ckptfs_gtest_labels(TARGET LABEL...): the ctest labels of every test that
# gtest_discover_tests(TARGET) finds, and the sanitizer's environment
# (CKPTFS_SANITIZER_ENV). Its PROPERTIES option cannot carry a list (the
# labels arrive one by one, and the properties after them are misread), so a
# script that ctest runs after the discovery's own sets them on the
# discovered tests, the list TARGET_TESTS.
function(ckptfs_gtest_labels target)
  ckptfs_suite_targets(${target} ${ARGN})
  set(script "${CMAKE_CURRENT_BINARY_DIR}/${target}_labels.cmake")
  file(WRITE "${script}"
    "foreach(t IN LISTS ${target}_TESTS)\n"
    "  set_tests_properties(\"\${t}\" PROPERTIES LABELS \"${ARGN}\"\n"
    "    ENVIRONMENT \"${CKPTFS_SANITIZER_ENV}\")\n"
    "endforeach()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${script}")
endfunction()

# ckptfs_suite_targets(TARGET LABEL...): TARGET builds tests that the
# ThreadSanitizer suite of scripts/test.sh runs when one of the LABELs is
# "concurrency" or "tsan". The target tsan_suite (CMakeLists.txt) depends on
# every such TARGET, and that suite builds only it. Every function here that
# gives tests a label calls it.
function(ckptfs_suite_targets target)
  foreach(label IN LISTS ARGN)
    if(label STREQUAL "concurrency" OR label STREQUAL "tsan")
      set_property(GLOBAL APPEND PROPERTY CKPTFS_TSAN_SUITE_TARGETS ${target})
      return()
    endif()
  endforeach()
endfunction()
