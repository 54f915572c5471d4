// The files of a store's segments/, data/ and snapshots/ as the store itself
// reaches them: in its directory, or in the object store that its STORAGE
// file names (the ceph.* runs of the engine's suites). For tests that look
// at, measure or damage those files by their path.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/data/data_storage.h"
#include "io/env.h"

namespace ckptfs::engine::test {

class StoreFiles {
 public:
  // `dir`: the store's directory (its STORAGE file, when it has one, must
  // exist: open the store once first).
  explicit StoreFiles(const std::string& dir) {
    Result<std::optional<format::DataStorage>> where = ReadStorageFile(dir);
    EXPECT_TRUE(where.ok()) << where.status().ToString();
    if (!where.ok()) return;
    Result<std::shared_ptr<io::Env>> env = OpenDataEnv(dir, *where, io::Env::Posix());
    EXPECT_TRUE(env.ok()) << env.status().ToString();
    if (env.ok()) env_ = *env;
  }

  bool Exists(const std::string& path) const {
    if (env_ == nullptr) return false;
    return env_->Open(path, io::OpenMode::kRead).ok();
  }

  // The size of `path`; 0 when it is gone.
  uint64_t Size(const std::string& path) const {
    if (env_ == nullptr) return 0;
    Result<std::unique_ptr<io::File>> f = env_->Open(path, io::OpenMode::kRead);
    if (!f.ok()) return 0;
    Result<uint64_t> size = (*f)->Size();
    return size.ok() ? *size : 0;
  }

  // The whole of `path`; "" when it cannot be read.
  std::string Contents(const std::string& path) const {
    if (env_ == nullptr) return "";
    Result<std::unique_ptr<io::File>> f = env_->Open(path, io::OpenMode::kRead);
    if (!f.ok()) return "";
    Result<uint64_t> size = (*f)->Size();
    if (!size.ok()) return "";
    std::string out(*size, '\0');
    Result<size_t> n = (*f)->ReadAt(0, out.size(), out.data());
    if (!n.ok()) return "";
    out.resize(*n);
    return out;
  }

  // The sum of the sizes of the files in `dir` (a file removed meanwhile
  // counts as gone).
  uint64_t BytesIn(const std::string& dir) const {
    if (env_ == nullptr) return 0;
    Result<std::vector<std::string>> names = env_->List(dir);
    if (!names.ok()) return 0;
    uint64_t n = 0;
    for (const std::string& name : *names) n += Size(dir + "/" + name);
    return n;
  }

  // Inverts the byte at `offset` of `path`, durably.
  void FlipByte(const std::string& path, uint64_t offset) const {
    ASSERT_NE(env_, nullptr);
    Result<std::unique_ptr<io::File>> f = env_->Open(path, io::OpenMode::kReadWrite);
    ASSERT_TRUE(f.ok()) << path << ": " << f.status().ToString();
    char c = 0;
    Result<size_t> n = (*f)->ReadAt(offset, 1, &c);
    ASSERT_TRUE(n.ok() && *n == 1) << path << " @" << offset;
    c = static_cast<char>(~c);
    const std::string_view piece(&c, 1);
    ASSERT_TRUE((*f)->WriteAt(offset, std::span<const std::string_view>(&piece, 1)).ok());
    ASSERT_TRUE((*f)->Sync().ok());
  }

 private:
  std::shared_ptr<io::Env> env_;
};

}  // namespace ckptfs::engine::test
