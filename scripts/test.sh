#!/usr/bin/env bash
# Runs every ckptfs test: installs what is missing, builds, then
#   1. all tests (unit, crash, concurrency, mount) in a release build,
#   2. under AddressSanitizer + UndefinedBehaviorSanitizer: the unit and
#      concurrency tests, and the mount tests labelled "asan" against the
#      instrumented daemon (mount_smoke, mount_posix); of the engine's
#      suites on PostgreSQL only the shared-store one (the others run there
#      on RocksDB and in memory, mem.*; the client on its own in pg.kv),
#   3. under ThreadSanitizer: the concurrency tests, and the tests labelled
#      "tsan" (the fs/ unit tests, mount_smoke, a short mount_stress),
#   4. a clang build of the libraries and the command, whose thread-safety
#      analysis (-Werror=thread-safety) fails the build on a locking contract
#      broken (base/thread_annotations.h), and a few quick tests from it.
# The sanitizer builds leave bench/ out. The mount harness fails a mount test
# when the daemon's sanitizer reports anything (tests/mount/ckptfs_harness.py).
# Usage: scripts/test.sh            (from anywhere; builds under build/)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/install-deps.sh || { echo "ckptfs: installing dependencies failed"; exit 1; }

jobs=$(nproc)
total_pass=0
total_fail=0
total_skip=0
failed_suites=()

# Each suite is built, then tested. The release suite runs alone (some of
# its mount tests need the machine to themselves: RUN_SERIAL); each
# sanitizer suite's tests run beside the next suite's build, at the lowest
# CPU priority (nice 19): the tests, which mostly wait on the kernel, the
# daemons and PostgreSQL, keep the CPUs they ask for, and the build takes
# what they leave.

# at: the time since the run began, as "12m05s".
at() { printf '%dm%02ds' $((SECONDS / 60)) $((SECONDS % 60)); }

# start_build NAME BUILD_DIR "CMAKE ARGS" ["NINJA TARGETS"] (no targets:
# everything); in the background, its exit status in BUILD_DIR.build.rc.
start_build() {
  local name=$1 dir=$2 cmake_args=$3 targets=${4:-}
  rm -f "$dir.build.rc"
  (
    # shellcheck disable=SC2086
    if ! nice -n 19 cmake -S "$root" -B "$dir" -G Ninja $cmake_args >"$dir.cmake.log" 2>&1; then
      cp "$dir.cmake.log" "$dir.build.log"; echo 1 >"$dir.build.rc"; exit
    fi
    # shellcheck disable=SC2086
    nice -n 19 ninja -C "$dir" -j "$jobs" $targets >"$dir.build.log" 2>&1
    echo $? >"$dir.build.rc"
  ) &
}

# finish_build NAME BUILD_DIR: waits for start_build's build; false (and
# the suite counted failed) when it failed.
finish_build() {
  local name=$1 dir=$2
  echo "=== $name: build ($dir), at $(at)"
  wait
  if [ "$(cat "$dir.build.rc" 2>/dev/null)" != 0 ]; then
    tail -50 "$dir.build.log"; failed_suites+=("$name (build)"); total_fail=$((total_fail + 1))
    return 1
  fi
}

# run_tests NAME BUILD_DIR "CTEST ARGS"
run_tests() {
  local name=$1 dir=$2 ctest_args=$3
  echo "=== $name: test, at $(at)"
  local log="$dir.ctest.log"
  # shellcheck disable=SC2086
  (cd "$dir" && ctest --output-on-failure --timeout 900 $ctest_args) 2>&1 | tee "$log"
  local pass fail skip total
  # ctest's summary: "NN% tests passed, F tests failed out of T".
  total=$(sed -nE 's/.*tests passed, [0-9]+ tests? failed out of ([0-9]+).*/\1/p' "$log" | tail -1)
  fail=$(sed -nE 's/.*tests passed, ([0-9]+) tests? failed out of [0-9]+.*/\1/p' "$log" | tail -1)
  skip=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*\*\*\*Skipped' "$log" || true)
  if [ -z "$total" ] || [ "$total" -eq 0 ]; then
    failed_suites+=("$name (ran no test)"); total=0; fail=1
  fi
  pass=$((total - fail - skip))
  total_skip=$((total_skip + skip))
  [ "$fail" -eq 0 ] || failed_suites+=("$name")
  total_pass=$((total_pass + pass))
  total_fail=$((total_fail + fail))
}

# Debug information: line tables only (CKPTFS_LINE_TABLES_ONLY), which is
# what the sanitizers' and gdb's backtraces print, for a third less compile
# time than -g.
lines="-DCKPTFS_LINE_TABLES_ONLY=ON"
asan_cmake="$lines -DCMAKE_BUILD_TYPE=Debug -DCKPTFS_SANITIZE=address -DCKPTFS_BUILD_FS=ON -DCKPTFS_BUILD_BENCH=OFF"
asan_ctest="-L unit|concurrency|asan -E ^pg\\.(namespace|data|data_file|model|corruption|fsck|accounting|fallocate|crash|power_loss|concurrency|overwrite|compact)_test$ -j 2"
tsan_cmake="$lines -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKPTFS_SANITIZE=thread -DCKPTFS_BUILD_FS=ON -DCKPTFS_BUILD_BENCH=OFF"
# Only what its labels run (the target tsan_suite, CMakeLists.txt).
tsan_targets="tsan_suite"
# Only what the analysis needs to see: every library (gpu/ without CUDA,
# which nvcc would compile, not clang) and the command; then the format/,
# read planner, size, index seam (meta.kv_*), snapshot file and peer tests and the
# GroupCommit and WriteOrder (CondVar) tests from that build. The engine's suites on
# PostgreSQL and in memory (pg.*, mem.*) need binaries this build leaves out.
clang_cmake="$lines -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCKPTFS_BUILD_BENCH=OFF -DCKPTFS_CUDA=OFF"
clang_targets="ckptfs_engine ckptfs_fsck ckptfs_options ckptfs_stats ckptfs_io_testing ckptfs_fs ckptfs ckptfs_loader_shared format_test extents_attr_test read_plan_test size_test group_commit_test write_order_test kv_test snapshot_file_test ckptfs_peer peer_wire_test peer_test"
clang_ctest="-L unit|concurrency -E ^(gpu|pg|mem)\\. -j 2"

start_build "release" build "$lines -DCMAKE_BUILD_TYPE=RelWithDebInfo"
finish_build "release" build && run_tests "release" build "-j 2"
start_build "asan+ubsan" build-asan "$asan_cmake"
finish_build "asan+ubsan" build-asan && asan_built=1 || asan_built=0
start_build "tsan" build-tsan "$tsan_cmake" "$tsan_targets"
[ $asan_built = 1 ] && run_tests "asan+ubsan" build-asan "$asan_ctest"
finish_build "tsan" build-tsan && tsan_built=1 || tsan_built=0
start_build "clang thread-safety" build-clang "$clang_cmake" "$clang_targets"
[ $tsan_built = 1 ] && run_tests "tsan" build-tsan "-L concurrency|tsan -j 2"
finish_build "clang thread-safety" build-clang && run_tests "clang thread-safety" build-clang "$clang_ctest"

echo
if [ ${#failed_suites[@]} -gt 0 ]; then
  echo "failing: ${failed_suites[*]}"
fi
echo "ckptfs: all suites done at $(at)"
echo "ckptfs: $total_pass passed, $total_fail failed, $total_skip skipped"
[ "$total_fail" -eq 0 ]
