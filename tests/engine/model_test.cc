// A randomized model test: thousands of random namespace and data operations
// against the engine and an in-memory reference, with Close + reopen at random
// points, comparing every result (errno and bytes).
//
// CKPTFS_SEED=<n> repeats a run; CKPTFS_MODEL_OPS=<n> changes its length.
// The seed and the last operations are printed on the first failure.
#include <sys/stat.h>

#include <chrono>
#include <deque>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "tests/engine/test_util.h"

namespace ckptfs::engine::test {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMaxFile = 300 * kKiB;

// The reference: a tree of inodes keyed by the numbers the engine gave them.
struct Node {
  bool is_dir = false;
  std::string data;                      // regular files
  std::map<std::string, Ino> children;   // directories
  uint32_t nlink = 1;
  int open = 0;                          // handles (regular files)
  Ino parent = 0;                        // directories
};

std::string ErrSetString(const std::set<int>& errs) {
  if (errs.empty()) return "success";
  std::string s;
  for (int e : errs) s += (s.empty() ? "" : " or ") + ErrnoName(e);
  return s;
}

class ModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* env = std::getenv("CKPTFS_SEED");
    seed_ = env ? std::strtoull(env, nullptr, 10)
                : static_cast<uint64_t>(
                      std::chrono::system_clock::now().time_since_epoch().count());
    rng_.seed(seed_);
    const char* ops = std::getenv("CKPTFS_MODEL_OPS");
    num_ops_ = ops ? std::atoi(ops) : 20000;
    options_ = SmallOptions();
    options_.data_file_min = 128u << 10;  // both layouts, and moves between them
    ASSERT_NO_FATAL_FAILURE(OpenStore());
    ASSERT_OK_AND_ASSIGN(FsStats st, store_->StatFs());
    base_inodes_ = st.inodes - 1;  // the root is in the model
    nodes_[kRootIno].is_dir = true;
    nodes_[kRootIno].nlink = 2;
    nodes_[kRootIno].parent = kRootIno;
  }
  void TearDown() override {
    if (HasFailure()) {
      std::ostringstream msg;
      msg << "model test failed with CKPTFS_SEED=" << seed_ << " after " << op_index_
          << " operations; the last ones were:\n";
      for (const std::string& h : history_) msg << "  " << h << "\n";
      ADD_FAILURE() << msg.str();
      std::fprintf(stderr, "%s", msg.str().c_str());
    }
    if (store_) {
      EXPECT_OK(store_->Close());
    }
  }

  void OpenStore() { ASSERT_OK_AND_ASSIGN(store_, Store::Open(dir_.store(), options_)); }

  void Reopen() {
    Note("reopen");
    ASSERT_OK(store_->Close());
    store_.reset();
    ASSERT_NO_FATAL_FAILURE(OpenStore());
    // Handles do not survive; unlinked-but-open files are purged.
    handles_.clear();
    for (auto it = nodes_.begin(); it != nodes_.end();) {
      it->second.open = 0;
      if (!it->second.is_dir && it->second.nlink == 0) {
        orphans_gone_.push_back(it->first);
        it = nodes_.erase(it);
      } else {
        ++it;
      }
    }
    ASSERT_NO_FATAL_FAILURE(CompareEverything());
  }

  // ---- Random choices. ----
  uint64_t Rand(uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  bool Chance(int percent) { return static_cast<int>(Rand(100)) < percent; }
  std::string RandName() {
    static const char* kNames[] = {"a", "b", "c", "d", "e", "f", "g", "h", "ckpt", "x.bin",
                                   "shard-00000", "shard-00001"};
    return kNames[Rand(sizeof(kNames) / sizeof(kNames[0]))];
  }
  std::vector<Ino> Select(bool dirs, bool include_orphans) {
    std::vector<Ino> out;
    for (const auto& [ino, n] : nodes_) {
      if (n.is_dir != dirs) continue;
      if (!include_orphans && n.nlink == 0) continue;
      out.push_back(ino);
    }
    return out;
  }
  Ino RandDir() {
    auto d = Select(true, false);
    return d[Rand(d.size())];
  }
  // A random regular file, or 0 when there is none.
  Ino RandFile(bool include_orphans) {
    auto f = Select(false, include_orphans);
    return f.empty() ? 0 : f[Rand(f.size())];
  }
  // A random existing entry (dir, name), or a random dir and random name.
  std::pair<Ino, std::string> RandEntry(int percent_existing = 80) {
    Ino d = RandDir();
    const Node& n = nodes_[d];
    if (!n.children.empty() && Chance(percent_existing)) {
      auto it = n.children.begin();
      std::advance(it, Rand(n.children.size()));
      return {d, it->first};
    }
    return {d, RandName()};
  }
  std::string RandData(uint64_t off, size_t len) { return PatternData(rng_(), off, len); }

  // ---- Checking. ----
  void Note(std::string what) {
    history_.push_back("#" + std::to_string(op_index_) + " " + std::move(what));
    if (history_.size() > 40) history_.pop_front();
  }
  // Fails unless `got` is success (errs empty) or one of `errs`.
  void Expect(const Status& got, const std::set<int>& errs) {
    std::string op = history_.back().substr(history_.back().find(' ') + 1);
    op = op.substr(0, op.find(' '));
    (got.ok() ? counts_[op].first : counts_[op].second)++;
    if (errs.empty()) {
      ASSERT_TRUE(got.ok()) << history_.back() << ": expected success, got " << got.ToString();
    } else {
      ASSERT_TRUE(errs.count(got.code()))
          << history_.back() << ": expected " << ErrSetString(errs) << ", got "
          << (got.ok() ? std::string("success") : got.ToString());
    }
  }
  uint32_t TypeOf(Ino ino) { return nodes_[ino].is_dir ? S_IFDIR : S_IFREG; }
  void CheckAttr(Ino ino, const Attr& a) {
    const Node& n = nodes_[ino];
    ASSERT_EQ(a.ino, ino) << history_.back();
    ASSERT_EQ(a.mode & S_IFMT, TypeOf(ino)) << history_.back() << " ino " << ino;
    ASSERT_EQ(a.nlink, n.nlink) << history_.back() << " ino " << ino;
    if (!n.is_dir) {
      ASSERT_EQ(a.size, n.data.size()) << history_.back() << " ino " << ino;
    }
    if (n.is_dir && ino != kRootIno) {
      ASSERT_EQ(a.parent, n.parent) << history_.back() << " ino " << ino;
    }
  }
  bool IsDescendantOrSelf(Ino maybe_child, Ino ancestor) {
    for (Ino cur = maybe_child;; cur = nodes_[cur].parent) {
      if (cur == ancestor) return true;
      if (cur == kRootIno) return false;
    }
  }
  void DropLink(Ino ino) {
    Node& n = nodes_[ino];
    if (n.is_dir) {
      nodes_.erase(ino);
      return;
    }
    if (--n.nlink == 0 && n.open == 0) nodes_.erase(ino);
  }

  void CompareDir(Ino dir, std::string_view after) {
    std::vector<DirEntry> got;
    Status st = store_->ReadDir(dir, after, [&](const DirEntry& e) {
      if (e.name != "." && e.name != "..") got.push_back(e);
      return true;
    });
    ASSERT_OK(st);
    const auto& kids = nodes_[dir].children;
    auto it = kids.upper_bound(std::string(after));
    size_t i = 0;
    for (; it != kids.end(); ++it, ++i) {
      ASSERT_LT(i, got.size()) << history_.back() << ": readdir of " << dir << " lacks "
                               << it->first;
      ASSERT_EQ(got[i].name, it->first) << history_.back() << ": readdir of " << dir;
      ASSERT_EQ(got[i].ino, it->second) << history_.back() << ": " << it->first;
      ASSERT_EQ(got[i].type, TypeOf(it->second)) << history_.back() << ": " << it->first;
    }
    ASSERT_EQ(got.size(), i) << history_.back() << ": readdir of " << dir << " has extra "
                             << (got.size() > i ? got[i].name : "");
  }

  void CompareEverything() {
    for (const auto& [ino, n] : nodes_) {
      ASSERT_OK_AND_ASSIGN(Attr a, store_->GetAttr(ino));
      ASSERT_NO_FATAL_FAILURE(CheckAttr(ino, a));
      if (n.is_dir) {
        ASSERT_NO_FATAL_FAILURE(CompareDir(ino, ""));
      } else {
        ASSERT_OK_AND_ASSIGN(std::string data, ReadAll(store_.get(), ino));
        ASSERT_TRUE(data == n.data) << history_.back() << ": contents of " << ino << " differ";
      }
    }
    for (Ino gone : orphans_gone_) {
      Status st = store_->GetAttr(gone).status();
      ASSERT_TRUE(st.code() == ENOENT || st.code() == ESTALE)
          << "orphan " << gone << " survived a reopen: " << st.ToString();
    }
    ASSERT_OK_AND_ASSIGN(FsStats fs, store_->StatFs());
    ASSERT_EQ(fs.inodes - base_inodes_, nodes_.size()) << history_.back() << ": inode count";
  }

  // ---- Operations. ----
  void OpCreate(bool dir) {
    auto [p, name] = RandEntry(25);
    Note(std::string(dir ? "mkdir " : "create ") + std::to_string(p) + "/" + name);
    std::set<int> errs;
    if (nodes_[p].children.count(name)) errs.insert(EEXIST);
    auto r = dir ? store_->Mkdir(p, name, 0755, 0, 0)
                 : store_->Create(p, name, S_IFREG | 0644, 0, 0);
    ASSERT_NO_FATAL_FAILURE(Expect(r.status(), errs));
    if (!r.ok()) return;
    ASSERT_EQ(nodes_.count(r->ino), 0u) << history_.back() << ": inode number reused";
    Node n;
    n.is_dir = dir;
    n.nlink = dir ? 2 : 1;
    n.parent = dir ? p : 0;
    nodes_[r->ino] = n;
    nodes_[p].children[name] = r->ino;
    if (dir) nodes_[p].nlink++;
    ASSERT_NO_FATAL_FAILURE(CheckAttr(r->ino, *r));
  }

  void OpWrite() {
    Ino f = RandFile(true);
    if (f == 0) return;
    uint64_t off = Chance(40) ? Rand(8 * kKiB) : Rand(kMaxFile);
    size_t len;
    int k = static_cast<int>(Rand(100));
    if (k < 45) len = 1 + Rand(4000);
    else if (k < 80) len = 1 + Rand(64 * kKiB);
    else len = 64 * kKiB + Rand(136 * kKiB);
    if (off + len > kMaxFile + 20 * kKiB) len = kMaxFile + 20 * kKiB - off;
    Note("write ino " + std::to_string(f) + " off " + std::to_string(off) + " len " +
         std::to_string(len));
    std::string data = RandData(off, len);
    auto r = store_->Write(f, off, data);
    ASSERT_NO_FATAL_FAILURE(Expect(r.status(), {}));
    ASSERT_EQ(*r, len) << history_.back();
    std::string& d = nodes_[f].data;
    if (d.size() < off + len) d.resize(off + len, '\0');
    d.replace(off, len, data);
  }

  void OpRead() {
    Ino f = RandFile(true);
    if (f == 0) return;
    const std::string& d = nodes_[f].data;
    uint64_t off = Chance(10) ? Rand(kMaxFile + 10 * kKiB) : Rand(d.size() + 1);
    size_t len = Chance(30) ? 1 + Rand(300 * kKiB) : 1 + Rand(8 * kKiB);
    Note("read ino " + std::to_string(f) + " off " + std::to_string(off) + " len " +
         std::to_string(len));
    if (Chance(20)) store_->DropCache();
    auto r = ReadRange(store_.get(), f, off, len);
    ASSERT_NO_FATAL_FAILURE(Expect(r.status(), {}));
    std::string want = off >= d.size() ? "" : d.substr(off, len);
    ASSERT_EQ(r->size(), want.size()) << history_.back();
    ASSERT_TRUE(*r == want) << history_.back() << ": bytes differ";
  }

  void OpTruncate() {
    Ino f = RandFile(true);
    if (f == 0) return;
    uint64_t size = Chance(20) ? 0 : Rand(kMaxFile);
    Note("truncate ino " + std::to_string(f) + " to " + std::to_string(size));
    SetAttrRequest req;
    req.size = size;
    auto r = store_->SetAttr(f, req);
    ASSERT_NO_FATAL_FAILURE(Expect(r.status(), {}));
    nodes_[f].data.resize(size, '\0');
    ASSERT_NO_FATAL_FAILURE(CheckAttr(f, *r));
  }

  void OpRename() {
    auto [p1, n1] = RandEntry();
    auto [p2, n2] = RandEntry();
    if (Chance(30)) n2 = RandName();
    int m = static_cast<int>(Rand(100));
    RenameMode mode = m < 70 ? RenameMode::kReplace
                             : (m < 85 ? RenameMode::kNoReplace : RenameMode::kExchange);
    const char* mode_name = mode == RenameMode::kReplace
                                ? "replace"
                                : (mode == RenameMode::kNoReplace ? "noreplace" : "exchange");
    auto& c1 = nodes_[p1].children;
    auto& c2 = nodes_[p2].children;
    Ino src = c1.count(n1) ? c1[n1] : 0;
    Ino dst = c2.count(n2) ? c2[n2] : 0;
    // Renaming onto another link of the same inode is answered by the kernel.
    if (src != 0 && src == dst) return;
    Note(std::string("rename(") + mode_name + ") " + std::to_string(p1) + "/" + n1 + " -> " +
         std::to_string(p2) + "/" + n2 + " (src " + std::to_string(src) + ", dst " +
         std::to_string(dst) + ")");
    std::set<int> errs;
    if (src == 0) {
      errs.insert(ENOENT);
    } else if (mode == RenameMode::kExchange && dst == 0) {
      errs.insert(ENOENT);
    } else if (mode == RenameMode::kNoReplace && dst != 0) {
      errs.insert(EEXIST);
      if (nodes_[src].is_dir && IsDescendantOrSelf(p2, src)) errs.insert(EINVAL);
    } else {
      bool src_dir = nodes_[src].is_dir;
      if (src_dir && IsDescendantOrSelf(p2, src)) errs.insert(EINVAL);
      if (dst != 0) {
        bool dst_dir = nodes_[dst].is_dir;
        if (mode == RenameMode::kExchange) {
          if (dst_dir && IsDescendantOrSelf(p1, dst)) errs.insert(EINVAL);
        } else {
          if (src_dir && !dst_dir) errs.insert(ENOTDIR);
          if (!src_dir && dst_dir) errs.insert(EISDIR);
          if (dst_dir && !nodes_[dst].children.empty()) errs.insert(ENOTEMPTY);
        }
      }
    }
    Status st = store_->Rename(p1, n1, p2, n2, mode);
    ASSERT_NO_FATAL_FAILURE(Expect(st, errs));
    if (!st.ok()) return;
    if (mode == RenameMode::kExchange) {
      c1[n1] = dst;
      c2[n2] = src;
      if (p1 != p2) {
        for (auto [ino, from, to] : {std::tuple{src, p1, p2}, std::tuple{dst, p2, p1}}) {
          if (nodes_[ino].is_dir) {
            nodes_[ino].parent = to;
            nodes_[from].nlink--;
            nodes_[to].nlink++;
          }
        }
      }
      return;
    }
    if (p1 == p2 && n1 == n2) return;
    if (dst != 0) {
      if (nodes_[dst].is_dir) nodes_[p2].nlink--;
      DropLink(dst);
    }
    c1.erase(n1);
    nodes_[p2].children[n2] = src;
    if (nodes_[src].is_dir) {
      nodes_[src].parent = p2;
      nodes_[p1].nlink--;
      nodes_[p2].nlink++;
    }
  }

  void OpUnlink() {
    auto [p, name] = RandEntry();
    Note("unlink " + std::to_string(p) + "/" + name);
    auto& c = nodes_[p].children;
    std::set<int> errs;
    if (!c.count(name)) errs.insert(ENOENT);
    else if (nodes_[c[name]].is_dir) errs.insert(EISDIR);
    Status st = store_->Unlink(p, name);
    ASSERT_NO_FATAL_FAILURE(Expect(st, errs));
    if (!st.ok()) return;
    Ino ino = c[name];
    c.erase(name);
    DropLink(ino);
  }

  void OpRmdir() {
    auto [p, name] = RandEntry();
    Note("rmdir " + std::to_string(p) + "/" + name);
    auto& c = nodes_[p].children;
    std::set<int> errs;
    if (!c.count(name)) errs.insert(ENOENT);
    else if (!nodes_[c[name]].is_dir) errs.insert(ENOTDIR);
    else if (!nodes_[c[name]].children.empty()) errs.insert(ENOTEMPTY);
    Status st = store_->Rmdir(p, name);
    ASSERT_NO_FATAL_FAILURE(Expect(st, errs));
    if (!st.ok()) return;
    Ino ino = c[name];
    c.erase(name);
    nodes_.erase(ino);
    nodes_[p].nlink--;
  }

  void OpLink() {
    Ino target = Chance(10) ? RandDir() : RandFile(false);
    if (target == 0) return;
    auto [p, name] = RandEntry();
    Note("link ino " + std::to_string(target) + " as " + std::to_string(p) + "/" + name);
    std::set<int> errs;
    if (nodes_[target].is_dir) errs.insert(EPERM);
    if (nodes_[p].children.count(name)) errs.insert(EEXIST);
    auto r = store_->Link(target, p, name);
    ASSERT_NO_FATAL_FAILURE(Expect(r.status(), errs));
    if (!r.ok()) return;
    nodes_[p].children[name] = target;
    nodes_[target].nlink++;
    ASSERT_NO_FATAL_FAILURE(CheckAttr(target, *r));
  }

  void OpOpen() {
    Ino f = RandFile(false);
    if (f == 0) return;
    Note("open ino " + std::to_string(f));
    ASSERT_NO_FATAL_FAILURE(Expect(store_->OpenFile(f), {}));
    nodes_[f].open++;
    handles_.push_back(f);
  }

  void OpRelease() {
    if (handles_.empty()) return;
    size_t i = Rand(handles_.size());
    Ino f = handles_[i];
    handles_.erase(handles_.begin() + static_cast<long>(i));
    Note("release ino " + std::to_string(f) + (nodes_[f].nlink == 0 ? " (unlinked)" : ""));
    ASSERT_NO_FATAL_FAILURE(Expect(store_->Release(f), {}));
    Node& n = nodes_[f];
    if (--n.open == 0 && n.nlink == 0) {
      nodes_.erase(f);
      Status st = store_->GetAttr(f).status();
      ASSERT_TRUE(st.code() == ENOENT || st.code() == ESTALE)
          << history_.back() << ": released orphan still there: " << st.ToString();
    }
  }

  void OpReadDir() {
    Ino d = RandDir();
    std::string after = Chance(30) ? RandName() : "";
    Note("readdir " + std::to_string(d) + " after '" + after + "'");
    ASSERT_NO_FATAL_FAILURE(CompareDir(d, after));
  }

  void OpGetAttr() {
    std::vector<Ino> all;
    for (const auto& [ino, n] : nodes_) all.push_back(ino);
    Ino ino = all[Rand(all.size())];
    Note("getattr ino " + std::to_string(ino));
    auto r = store_->GetAttr(ino);
    ASSERT_NO_FATAL_FAILURE(Expect(r.status(), {}));
    ASSERT_NO_FATAL_FAILURE(CheckAttr(ino, *r));
  }

  void OpLookup() {
    auto [p, name] = RandEntry();
    Note("lookup " + std::to_string(p) + "/" + name);
    auto& c = nodes_[p].children;
    std::set<int> errs;
    if (!c.count(name)) errs.insert(ENOENT);
    auto r = store_->Lookup(p, name);
    ASSERT_NO_FATAL_FAILURE(Expect(r.status(), errs));
    if (r.ok()) {
      ASSERT_NO_FATAL_FAILURE(CheckAttr(c[name], *r));
    }
  }

  void OpFsync() {
    Ino f = RandFile(true);
    if (f == 0) return;
    Note("fsync ino " + std::to_string(f));
    ASSERT_NO_FATAL_FAILURE(Expect(store_->Fsync(f, Chance(50)), {}));
  }

  void Step() {
    int k = static_cast<int>(Rand(100));
    if (k < 10) OpCreate(false);
    else if (k < 15) OpCreate(true);
    else if (k < 35) OpWrite();
    else if (k < 48) OpRead();
    else if (k < 53) OpTruncate();
    else if (k < 63) OpRename();
    else if (k < 70) OpUnlink();
    else if (k < 74) OpRmdir();
    else if (k < 78) OpLink();
    else if (k < 82) OpOpen();
    else if (k < 86) OpRelease();
    else if (k < 90) OpReadDir();
    else if (k < 94) OpGetAttr();
    else if (k < 99) OpLookup();
    else OpFsync();
  }

  TempDir dir_;
  StoreOptions options_;
  std::unique_ptr<Store> store_;
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  int num_ops_ = 0;
  int op_index_ = 0;
  uint64_t base_inodes_ = 0;
  std::map<Ino, Node> nodes_;
  std::vector<Ino> handles_;
  std::vector<Ino> orphans_gone_;
  std::deque<std::string> history_;
  std::map<std::string, std::pair<int, int>> counts_;  // op -> (ok, failed)
};

TEST_F(ModelTest, RandomOperationsMatchTheModel) {
  SCOPED_TRACE("CKPTFS_SEED=" + std::to_string(seed_));
  RecordProperty("seed", std::to_string(seed_));
  int reopens = 0;
  int next_reopen = 500 + static_cast<int>(Rand(1000));
  for (op_index_ = 0; op_index_ < num_ops_; ++op_index_) {
    Step();
    if (HasFailure()) return;
    if (op_index_ == next_reopen) {
      Reopen();
      if (HasFailure()) return;
      ++reopens;
      next_reopen += 500 + static_cast<int>(Rand(1000));
    }
  }
  Note("final comparison");
  ASSERT_NO_FATAL_FAILURE(CompareEverything());
  Reopen();
  ASSERT_GE(reopens, num_ops_ / 1500);
  std::string summary = "reopens=" + std::to_string(reopens) +
                        " inodes=" + std::to_string(nodes_.size());
  for (const auto& [op, c] : counts_) {
    summary += " " + op + "=" + std::to_string(c.first) + "/" + std::to_string(c.second);
  }
  std::printf("seed %llu: %s (op=ok/failed)\n", static_cast<unsigned long long>(seed_),
              summary.c_str());
  // The run reached the interesting sizes: several segments, records split.
  ASSERT_OK_AND_ASSIGN(std::vector<SegmentInfo> segments, store_->ListSegments());
  EXPECT_GE(segments.size(), 2u) << "no segment rollover in this run";
}

}  // namespace
}  // namespace ckptfs::engine::test
