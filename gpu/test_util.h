// Helpers shared by the gpu/ tests: deterministic data, temporary
// directories, plain file I/O and a safetensors writer.
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ckptfs::gpu::testing {

// Incompressible bytes determined by (seed, position).
inline std::string RandomBytes(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x1234567;
  for (size_t i = 0; i < n; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(&s[i], &x, std::min<size_t>(8, n - i));
  }
  return s;
}

// Bytes zstd shrinks a lot: runs of a few values with a counter.
inline std::string CompressibleBytes(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(((i / 97) + seed) % 7);
  return s;
}

// A fresh directory under /tmp, removed (recursively) on destruction.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/ckptfs-gpu-test.XXXXXX";
    path_ = mkdtemp(tmpl) ? tmpl : "";
  }
  ~TempDir() {
    if (!path_.empty() && !keep_) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  const std::string& path() const { return path_; }
  // Leaves the directory in place (something may still be mounted below).
  void Keep() { keep_ = true; }

 private:
  std::string path_;
  bool keep_ = false;
};

inline bool WriteFile(const std::string& path, const std::string& data) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n <= 0) {
      close(fd);
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return close(fd) == 0;
}

// XORs the byte at `pos` of `path` with `mask` (damage for checksum tests).
inline bool FlipByte(const std::string& path, uint64_t pos, char mask) {
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  char c;
  const off_t at = static_cast<off_t>(pos);
  bool ok = pread(fd, &c, 1, at) == 1;
  c = static_cast<char>(c ^ mask);
  ok = ok && pwrite(fd, &c, 1, at) == 1;
  return close(fd) == 0 && ok;
}

inline std::string ReadFile(const std::string& path) {
  std::string out;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

struct TestTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string data;
};

// A safetensors file: header padded with spaces to a multiple of 8, data
// in the given order.
inline std::string BuildSafetensors(const std::vector<TestTensor>& tensors,
                                    const std::map<std::string, std::string>& metadata = {}) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::string data;
  for (const TestTensor& t : tensors) {
    h[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
    data += t.data;
  }
  std::string header = h.dump();
  while (header.size() % 8 != 0) header.push_back(' ');
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

}  // namespace ckptfs::gpu::testing
