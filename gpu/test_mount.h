// Real ckptfs mounts for the gpu/ tests, made with the built `ckptfs`
// binary (CKPTFS_BIN, a compile definition).
//
// Never leaves a mount behind: TestMount's destructor unmounts (`ckptfs
// umount`, then `fusermount3 -u -z`), and each mount has a guardian process
// that holds the read end of a pipe whose write end only this process has;
// when this process ends in any way (a crash, SIGKILL), the guardian reads
// EOF and lazily unmounts.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace ckptfs::gpu::testing {

// Runs argv[0] (a path) with `argv`; returns its exit status (-1 when it
// could not run or died of a signal). Collects stdout+stderr in *output.
inline int RunCommand(const std::vector<std::string>& argv, std::string* output = nullptr) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return -1;
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(out[1], 2);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  std::string text;
  char buf[4096];
  for (;;) {
    ssize_t n = read(out[0], buf, sizeof(buf));
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

// True when `path` is a FUSE mountpoint (/proc/mounts).
inline bool IsFuseMounted(const std::string& path) {
  std::ifstream in("/proc/mounts");
  std::string dev, mnt, type, rest;
  while (in >> dev >> mnt >> type && std::getline(in, rest)) {
    if (mnt == path && type.rfind("fuse", 0) == 0) return true;
  }
  return false;
}

// Why mounts cannot be tested here ("" when they can).
inline std::string MountUnavailable() {
  if (access("/dev/fuse", R_OK | W_OK) != 0) return "/dev/fuse is not usable";
  if (access("/bin/fusermount3", X_OK) != 0 && access("/usr/bin/fusermount3", X_OK) != 0) {
    return "fusermount3 is missing";
  }
  return "";
}

class TestMount {
 public:
  // Mounts `store` on `mnt` (created when missing) with `-o options` (may
  // be empty). nullptr, with *error set, on failure.
  static std::unique_ptr<TestMount> Mount(const std::string& store, const std::string& mnt,
                                          const std::string& options, std::string* error) {
    std::filesystem::create_directories(mnt);
    std::unique_ptr<TestMount> m(new TestMount(mnt));
    if (!m->StartGuardian()) {
      *error = "cannot start the unmount guardian";
      return nullptr;
    }
    std::vector<std::string> argv = {CKPTFS_BIN, "mount"};
    if (!options.empty()) {
      argv.push_back("-o");
      argv.push_back(options);
    }
    argv.push_back(store);
    argv.push_back(mnt);
    std::string out;
    const int rc = RunCommand(argv, &out);
    if (rc != 0 || !IsFuseMounted(mnt)) {
      *error = "ckptfs mount failed (" + std::to_string(rc) + "): " + out;
      return nullptr;  // the destructor cleans up whatever did happen
    }
    return m;
  }

  ~TestMount() { Unmount(); }
  TestMount(const TestMount&) = delete;
  TestMount& operator=(const TestMount&) = delete;

  const std::string& path() const { return mnt_; }

  // Unmounts and waits for the daemon to close the store. True when
  // nothing is mounted there afterwards.
  bool Unmount() {
    if (IsFuseMounted(mnt_)) {
      std::string out;
      if (RunCommand({CKPTFS_BIN, "umount", mnt_}, &out) != 0) {
        std::fprintf(stderr, "ckptfs umount %s failed: %s; unmounting lazily\n", mnt_.c_str(),
                     out.c_str());
        const char* fm =
            access("/bin/fusermount3", X_OK) == 0 ? "/bin/fusermount3" : "/usr/bin/fusermount3";
        RunCommand({fm, "-u", "-z", mnt_});
      }
    }
    StopGuardian();
    return !IsFuseMounted(mnt_);
  }

 private:
  explicit TestMount(std::string mnt) : mnt_(std::move(mnt)) {}

  bool StartGuardian() {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return false;
    const std::string script =
        "read -r _; for f in /bin/fusermount3 /usr/bin/fusermount3; do "
        "[ -x \"$f\" ] && exec \"$f\" -u -z \"$1\" 2>/dev/null; done";
    const pid_t pid = fork();
    if (pid < 0) {
      close(p[0]);
      close(p[1]);
      return false;
    }
    if (pid == 0) {
      dup2(p[0], 0);  // the copy is not close-on-exec; p[1] is closed at exec
      execl("/bin/sh", "sh", "-c", script.c_str(), "sh", mnt_.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(p[0]);
    guardian_fd_ = p[1];
    guardian_pid_ = pid;
    return true;
  }

  void StopGuardian() {
    if (guardian_fd_ >= 0) close(guardian_fd_);  // EOF: it tries an unmount of nothing
    guardian_fd_ = -1;
    if (guardian_pid_ > 0) {
      int status;
      waitpid(guardian_pid_, &status, 0);
    }
    guardian_pid_ = -1;
  }

  std::string mnt_;
  int guardian_fd_ = -1;
  pid_t guardian_pid_ = -1;
};

}  // namespace ckptfs::gpu::testing
