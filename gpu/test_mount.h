// Real ckptfs mounts for the gpu/ tests, through the mount harness that
// every mount test uses (tests/mount/ckptfs_harness.py, its command line):
// it mounts with the built `ckptfs` binary, skips where mounts are
// impossible, and checks the daemon's sanitizer reports at unmount.
// Compile definitions: CKPTFS_BIN (the binary), CKPTFS_HARNESS (the
// script) and CKPTFS_TEST_PYTHON (the interpreter).
//
// Never leaves a mount behind: TestMount's destructor unmounts, and the
// harness session this process owns has a guardian process that unmounts
// whatever is left when this process ends in any way (a crash, SIGKILL),
// and stops it past $CKPTFS_TEST_DEADLINE.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <string>
#include <vector>

namespace ckptfs::gpu::testing {

// Runs argv[0] (a path) with `argv`; returns its exit status (-1 when it
// could not run or died of a signal). Collects stdout (and, unless
// `stdout_only`, stderr) in *output.
inline int RunCommand(const std::vector<std::string>& argv, std::string* output = nullptr,
                      bool stdout_only = false) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return -1;
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    dup2(out[1], 1);
    if (!stdout_only) dup2(out[1], 2);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  std::string text;
  char buf[4096];
  for (;;) {
    ssize_t n = read(out[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  if (output) *output = text;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// `ckptfs_harness.py ARGS...`; see RunCommand.
inline int RunHarness(const std::vector<std::string>& args, std::string* output = nullptr,
                      bool stdout_only = false) {
  std::vector<std::string> argv = {CKPTFS_TEST_PYTHON, CKPTFS_HARNESS};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, output, stdout_only);
}

// Why mounts cannot be tested here ("" when they can).
inline std::string MountUnavailable() {
  std::string out;
  const int rc = RunHarness({"check"}, &out);
  if (rc == 0) return "";
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return rc == 77 ? out : "the mount harness failed (" + std::to_string(rc) + "): " + out;
}

// Starts this process's harness session on first use (its directory goes to
// $CKPTFS_HARNESS_SESSION for the later harness commands). False, with
// *error set, when it cannot.
inline bool EnsureHarnessSession(std::string* error) {
  if (getenv("CKPTFS_HARNESS_SESSION") != nullptr) return true;
  std::string dir;
  // stdout only: the session's guardian keeps our stderr for its reports.
  const int rc = RunHarness({"session", "--owner", std::to_string(getpid())}, &dir,
                            /*stdout_only=*/true);
  while (!dir.empty() && dir.back() == '\n') dir.pop_back();
  if (rc != 0 || dir.empty()) {
    *error = "cannot start a mount harness session (" + std::to_string(rc) + "): " + dir;
    return false;
  }
  setenv("CKPTFS_HARNESS_SESSION", dir.c_str(), 1);
  setenv("CKPTFS_BIN", CKPTFS_BIN, 1);
  return true;
}

class TestMount {
 public:
  // Mounts `store` on `mnt` (created when missing) with `-o options` (may
  // be empty). nullptr, with *error set, on failure.
  static std::unique_ptr<TestMount> Mount(const std::string& store, const std::string& mnt,
                                          const std::string& options, std::string* error) {
    if (!EnsureHarnessSession(error)) return nullptr;
    std::string out;
    const int rc = RunHarness({"mount", store, mnt, options}, &out);
    if (rc != 0) {
      *error = "mount failed (" + std::to_string(rc) + "): " + out;
      return nullptr;
    }
    return std::unique_ptr<TestMount>(new TestMount(mnt));
  }

  ~TestMount() { Unmount(); }
  TestMount(const TestMount&) = delete;
  TestMount& operator=(const TestMount&) = delete;

  const std::string& path() const { return mnt_; }

  // Unmounts and waits for the daemon to close the store. True when
  // nothing is mounted there afterwards and the daemon's sanitizer (in a
  // sanitizer build) reported nothing; otherwise the current test fails.
  bool Unmount() {
    if (unmounted_) return ok_;
    unmounted_ = true;
    std::string out;
    ok_ = RunHarness({"unmount", mnt_}, &out) == 0;
    if (!ok_) ADD_FAILURE() << "unmount of " << mnt_ << ": " << out;
    return ok_;
  }

 private:
  explicit TestMount(std::string mnt) : mnt_(std::move(mnt)) {}

  std::string mnt_;
  bool unmounted_ = false;
  bool ok_ = false;
};

}  // namespace ckptfs::gpu::testing
