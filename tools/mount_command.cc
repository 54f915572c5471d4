// `ckptfs mount` and `ckptfs umount`.
//
// mount checks everything it can in the calling process (so that mistakes are
// reported before anything is created), then, unless -f, forks: the child
// opens the store, mounts and reports through a pipe either "OK" or its error;
// the parent exits 0 only after "OK". The store is opened in the child
// because RocksDB's threads do not survive fork().
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "tools/commands.h"

namespace ckptfs::tools {

using engine::Result;
using engine::Status;

namespace {

constexpr const char* kReady = "OK";

int Fail(const std::string& msg) {
  std::fprintf(stderr, "ckptfs: %s\n", msg.c_str());
  return 1;
}

bool WriteAll(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// After the mount is up, a daemon must not hold the terminal or a directory.
void Detach() {
  if (chdir("/") != 0) {
    // Paths are absolute; staying where we are only pins a directory.
  }
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    dup2(null, STDIN_FILENO);
    dup2(null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
    if (null > STDERR_FILENO) close(null);
  }
}

int RunDaemon(const fs::MountOptions& options) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return Fail(std::string("pipe: ") + strerror(errno));
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return Fail(std::string("fork: ") + strerror(errno));
  if (pid == 0) {
    close(pipe_fds[0]);
    setsid();
    int ready_fd = pipe_fds[1];
    int rc = 1;
    try {
      rc = fs::ServeMount(options, [&](const Status& st) {
        WriteAll(ready_fd, st.ok() ? std::string(kReady) : st.ToString());
        close(ready_fd);
        ready_fd = -1;
        if (st.ok()) Detach();
      });
    } catch (const std::exception& e) {
      if (ready_fd >= 0) WriteAll(ready_fd, std::string("mount daemon failed: ") + e.what());
    }
    std::fflush(nullptr);
    _exit(rc);
  }
  close(pipe_fds[1]);
  const std::string msg = ReadAll(pipe_fds[0]);
  close(pipe_fds[0]);
  if (msg == kReady) return 0;
  int status = 0;
  waitpid(pid, &status, 0);
  if (!msg.empty()) return Fail(msg);
  if (WIFSIGNALED(status)) {
    return Fail("mount daemon was killed by signal " + std::to_string(WTERMSIG(status)));
  }
  return Fail("mount daemon exited with status " + std::to_string(WEXITSTATUS(status)) +
              " before the mount was ready");
}

}  // namespace

int RunMount(fs::MountOptions options, bool foreground) {
  Status st = fs::CheckPrivileges(options, geteuid());
  if (st.ok()) st = fs::ResolvePaths(&options);
  if (st.ok()) st = fs::CheckFuseDevice();
  if (st.ok()) st = fs::CheckMountpoint(options.mountpoint);
  if (st.ok()) st = fs::CheckStoreDir(options.store_dir);
  if (!st.ok()) return Fail(st.ToString());
  if (!foreground) return RunDaemon(options);
  return fs::ServeMount(options, [](const Status& ready) {
    if (!ready.ok()) Fail(ready.ToString());
  });
}

namespace {

// The pid of the daemon serving `mountpoint`, from its stats file; 0 when
// unknown.
pid_t DaemonPid(const std::string& mountpoint) {
  std::ifstream in(mountpoint + "/.ckptfs/stats");
  if (!in) return 0;
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("pid") || !j["pid"].is_number_integer()) return 0;
  return j["pid"].get<pid_t>();
}

bool ProcessGone(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  // A zombie waiting for a parent that never reaps it has finished too.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

}  // namespace

int RunUmount(const std::string& mountpoint_arg) {
  // Only a ckptfs mount: `ckptfs umount` of another filesystem's mountpoint
  // is a mistake, not a request.
  Result<std::string> resolved = fs::ResolvePath(mountpoint_arg, "mountpoint");
  if (!resolved.ok()) return Fail(resolved.status().ToString());
  const std::string& mountpoint = *resolved;
  if (Status st = fs::CheckUnmountable(mountpoint); !st.ok()) return Fail(st.ToString());
  const pid_t daemon = DaemonPid(mountpoint);
  if (geteuid() == 0) {
    if (umount2(mountpoint.c_str(), 0) != 0) {
      const int err = errno;
      return Fail("cannot unmount " + mountpoint + ": " + strerror(err) +
                  (err == EBUSY ? " (a file or directory on it is in use)" : ""));
    }
  } else {
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid < 0) return Fail(std::string("fork: ") + strerror(errno));
    if (pid == 0) {
      execlp("fusermount3", "fusermount3", "-u", "--", mountpoint.c_str(), nullptr);
      std::fprintf(stderr, "ckptfs: cannot run fusermount3: %s\n", strerror(errno));
      _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;  // fusermount3 said why
  }
  // The store is closed (flushed, marked clean, unlocked) only when the daemon
  // exits; wait for that so that a remount right after us succeeds.
  if (daemon > 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!ProcessGone(daemon)) {
      if (std::chrono::steady_clock::now() > deadline) {
        return Fail("unmounted " + mountpoint + ", but daemon " + std::to_string(daemon) +
                    " is still closing the store");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  return 0;
}

}  // namespace ckptfs::tools
