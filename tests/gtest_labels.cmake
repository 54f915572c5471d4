# ckptfs_gtest_labels(TARGET LABEL...): the ctest labels of every test that
# gtest_discover_tests(TARGET) finds. Its PROPERTIES option cannot carry a
# list (the labels arrive one by one, and the properties after them are
# misread), so a script that ctest runs after the discovery's own sets the
# labels on the discovered tests, the list TARGET_TESTS.
function(ckptfs_gtest_labels target)
  set(script "${CMAKE_CURRENT_BINARY_DIR}/${target}_labels.cmake")
  file(WRITE "${script}"
    "foreach(t IN LISTS ${target}_TESTS)\n"
    "  set_tests_properties(\"\${t}\" PROPERTIES LABELS \"${ARGN}\")\n"
    "endforeach()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${script}")
endfunction()
