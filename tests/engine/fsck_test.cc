// Store::Fsck: damage planted on disk and in the index, what fsck names
// (finding kind, file path, byte range), what --repair fixes, and that every
// healthy file reads back byte for byte afterwards.
//
// The index is manipulated with RocksDB directly (engine/index/index_db.h), the
// segment files with plain file I/O.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "engine/index/index_db.h"
#include "format/format.h"
#include "tests/engine/test_util.h"

namespace ckptfs::engine::test {
namespace {

constexpr uint64_t kKiB = 1024;

// fsck(8) exit status the ckptfs tool derives from a report.
int ExitCode(const FsckReport& r) {
  if (r.errors() == 0) return 0;
  return r.errors_left() == 0 ? 1 : 4;
}

std::string Dump(const FsckReport& r) {
  std::string s;
  for (const FsckFinding& f : r.findings) {
    s += "  " + std::string(f.informational ? "info " : "error ") + f.kind + " path=" + f.path +
         " ino=" + std::to_string(f.ino) + " seg=" + std::to_string(f.segment_id) + " range=[" +
         std::to_string(f.offset) + ",+" + std::to_string(f.length) + ") " + f.detail +
         (f.repaired ? " [repaired]" : "") + "\n";
  }
  return s;
}

struct FileInfo {
  Ino ino = 0;
  std::string content;
};

class FsckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_ = SmallOptions();  // 2 MiB segments, 64 KiB records
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir_.store(), options_));
    Store* s = store.get();
    ASSERT_OK_AND_ASSIGN(Attr a, s->Mkdir(kRootIno, "a", 0755, 0, 0));
    ASSERT_OK_AND_ASSIGN(Attr b, s->Mkdir(kRootIno, "b", 0755, 0, 0));
    ASSERT_OK_AND_ASSIGN(Attr c, s->Mkdir(b.ino, "c", 0755, 0, 0));
    auto file = [&](Ino parent, const std::string& name, uint64_t seed, size_t size) {
      auto f = s->Create(parent, name, S_IFREG | 0644, 0, 0);
      ASSERT_TRUE(f.ok()) << f.status().ToString();
      ASSERT_OK(WriteAll(s, f->ino, 0, PatternData(seed, 0, size)));
    };
    ASSERT_NO_FATAL_FAILURE(file(a.ino, "model.bin", 1, 1536 * kKiB));
    ASSERT_NO_FATAL_FAILURE(file(a.ino, "opt.bin", 2, 700 * kKiB));
    ASSERT_NO_FATAL_FAILURE(file(c.ino, "tensor", 3, 900 * kKiB));
    ASSERT_NO_FATAL_FAILURE(file(kRootIno, "small.json", 4, 100));
    ASSERT_NO_FATAL_FAILURE(file(b.ino, "empty", 5, 0));
    ASSERT_OK_AND_ASSIGN(Attr model, s->Lookup(a.ino, "model.bin"));
    ASSERT_OK(s->Link(model.ino, b.ino, "model.link").status());
    ASSERT_OK(s->Symlink(kRootIno, "latest", "a/model.bin", 0, 0).status());
    ASSERT_OK(s->SetXattr(model.ino, "user.step", "7", 0));
    ASSERT_OK_AND_ASSIGN(std::vector<SegmentInfo> segments, s->ListSegments());
    ASSERT_GE(segments.size(), 2u) << "the data should span a sealed segment";
    ASSERT_OK(s->Close());
    before_ = Snapshot();
    ASSERT_FALSE(before_.empty());
  }

  // Every regular file by path, read through the engine.
  std::map<std::string, FileInfo> Snapshot() {
    std::map<std::string, FileInfo> out;
    auto store = Store::Open(dir_.store(), options_);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    if (!store.ok()) return out;
    std::function<void(Ino, const std::string&)> walk = [&](Ino dir, const std::string& path) {
      auto entries = ListDir(store->get(), dir);
      ASSERT_TRUE(entries.ok()) << entries.status().ToString();
      for (const DirEntry& e : *entries) {
        const std::string p = path + "/" + e.name;
        if (e.type == S_IFDIR) {
          walk(e.ino, p);
        } else if (e.type == S_IFREG) {
          auto content = ReadAll(store->get(), e.ino);
          ASSERT_TRUE(content.ok()) << p << ": " << content.status().ToString();
          out[p] = {e.ino, *content};
        }
      }
    };
    walk(kRootIno, "");
    EXPECT_OK((*store)->Close());
    return out;
  }

  std::vector<ExtentInfo> ExtentsOf(const std::string& path) {
    auto store = Store::Open(dir_.store(), options_);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    if (!store.ok()) return {};
    auto ex = (*store)->GetExtents(before_.at(path).ino);
    EXPECT_TRUE(ex.ok()) << ex.status().ToString();
    EXPECT_OK((*store)->Close());
    return ex.ok() ? *ex : std::vector<ExtentInfo>{};
  }

  std::string SegmentFile(uint64_t id) { return dir_.store() + "/" + format::SegmentFileName(id); }

  void FlipByte(const std::string& path, uint64_t offset) {
    int fd = ::open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0) << path;
    char c;
    ASSERT_EQ(::pread(fd, &c, 1, static_cast<off_t>(offset)), 1);
    c ^= 0x5a;
    ASSERT_EQ(::pwrite(fd, &c, 1, static_cast<off_t>(offset)), 1);
    ::close(fd);
  }

  void WithIndex(const std::function<void(IndexDb&)>& fn) {
    IndexDb db;
    ASSERT_OK(OpenIndexDb(dir_.store() + "/index", false, false, io::Env::Posix().get(), &db));
    fn(db);
    ASSERT_OK(db.Close());
  }

  FsckReport Fsck(bool repair, bool quick = false) {
    FsckOptions o;
    o.repair = repair;
    o.quick = quick;
    auto r = engine::Fsck(dir_.store(), o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok() && std::getenv("CKPTFS_FSCK_TEST_VERBOSE") != nullptr) {
      std::fprintf(stderr, "fsck%s%s:\n%s", repair ? " --repair" : "", quick ? " --quick" : "",
                   Dump(*r).c_str());
    }
    return r.ok() ? *r : FsckReport{};
  }

  // The finding of `kind` about `path`, or nullptr.
  static const FsckFinding* Find(const FsckReport& r, const std::string& kind,
                                 const std::string& path = "") {
    for (const FsckFinding& f : r.findings) {
      if (f.kind == kind && (path.empty() || f.path == path)) return &f;
    }
    return nullptr;
  }

  // Repairs, expects a clean store afterwards, and compares every file not in
  // `lost` with its content before the damage.
  void RepairAndVerify(const std::set<std::string>& lost) {
    FsckReport r = Fsck(/*repair=*/true);
    EXPECT_EQ(ExitCode(r), 1) << Dump(r);
    EXPECT_EQ(r.errors_left(), 0u) << Dump(r);
    EXPECT_EQ(std::set<std::string>(r.lost_files.begin(), r.lost_files.end()), lost) << Dump(r);
    FsckReport again = Fsck(/*repair=*/false);
    EXPECT_TRUE(again.clean()) << "after repair:\n" << Dump(again);
    EXPECT_EQ(ExitCode(again), 0);
    after_ = Snapshot();
    std::set<Ino> lost_inos;
    for (const std::string& p : lost) lost_inos.insert(before_.at(p).ino);
    for (const auto& [path, info] : before_) {
      if (lost_inos.count(info.ino)) continue;  // every name of a damaged inode
      auto it = after_.find(path);
      ASSERT_NE(it, after_.end()) << path << " is gone after repair";
      EXPECT_TRUE(it->second.content == info.content) << path << " changed after repair";
    }
  }

  TempDir dir_;
  StoreOptions options_;
  std::map<std::string, FileInfo> before_, after_;
};

TEST_F(FsckTest, HealthyStoreIsClean) {
  FsckReport r = Fsck(false);
  EXPECT_TRUE(r.clean()) << Dump(r);
  EXPECT_EQ(ExitCode(r), 0);
  EXPECT_EQ(r.files_checked, 6u);  // 5 files (one with two names) + 1 symlink
  EXPECT_EQ(r.dirs_checked, 4u);
  EXPECT_GT(r.records_checked, 40u);
  EXPECT_GT(r.bytes_checked, 3000 * kKiB);
  EXPECT_TRUE(r.lost_files.empty());
  FsckReport q = Fsck(false, /*quick=*/true);
  EXPECT_TRUE(q.clean()) << Dump(q);
  EXPECT_EQ(q.records_checked, r.records_checked);
  // Nothing to repair: repair changes nothing.
  FsckReport rr = Fsck(true);
  EXPECT_EQ(ExitCode(rr), 0) << Dump(rr);
  EXPECT_EQ(Snapshot().size(), before_.size());
}

TEST_F(FsckTest, FlippedPayloadByte) {
  std::vector<ExtentInfo> ex = ExtentsOf("/a/model.bin");
  ASSERT_GT(ex.size(), 3u);
  const ExtentInfo& e = ex[2];
  ASSERT_FALSE(e.value.is_inline);
  FlipByte(SegmentFile(e.value.segment_id),
           e.value.record_offset + format::kRecordHeaderSize + 1000);

  FsckReport r = Fsck(false);
  EXPECT_EQ(ExitCode(r), 4) << Dump(r);
  const FsckFinding* f = Find(r, "bad_payload_checksum", "/a/model.bin");
  ASSERT_NE(f, nullptr) << Dump(r);
  EXPECT_EQ(f->offset, e.file_offset);
  EXPECT_EQ(f->length, e.value.length);
  EXPECT_EQ(f->segment_id, e.value.segment_id);
  EXPECT_FALSE(f->repaired);
  EXPECT_EQ(r.lost_files, std::vector<std::string>{"/a/model.bin"});
  // A quick check reads no payloads and cannot see this.
  EXPECT_EQ(Find(Fsck(false, true), "bad_payload_checksum"), nullptr);

  ASSERT_NO_FATAL_FAILURE(RepairAndVerify({"/a/model.bin"}));
  // The damaged file keeps its size; the lost range reads as zeros and the
  // rest is intact (the hard link shows the same inode).
  const std::string& old = before_.at("/a/model.bin").content;
  for (const char* p : {"/a/model.bin", "/b/model.link"}) {
    const std::string& now = after_.at(p).content;
    ASSERT_EQ(now.size(), old.size()) << p;
    EXPECT_EQ(now.substr(e.file_offset, e.value.length), std::string(e.value.length, '\0')) << p;
    EXPECT_TRUE(now.substr(0, e.file_offset) == old.substr(0, e.file_offset)) << p;
    EXPECT_TRUE(now.substr(e.file_offset + e.value.length) ==
                old.substr(e.file_offset + e.value.length))
        << p;
  }
}

TEST_F(FsckTest, FlippedHeaderByte) {
  std::vector<ExtentInfo> ex = ExtentsOf("/a/opt.bin");
  ASSERT_GT(ex.size(), 2u);
  const ExtentInfo& e = ex[1];
  FlipByte(SegmentFile(e.value.segment_id), e.value.record_offset + 20);  // file offset field

  FsckReport r = Fsck(false);
  EXPECT_EQ(ExitCode(r), 4) << Dump(r);
  const FsckFinding* f = Find(r, "bad_record_header", "/a/opt.bin");
  ASSERT_NE(f, nullptr) << Dump(r);
  EXPECT_EQ(f->offset, e.file_offset);
  EXPECT_EQ(f->length, e.value.length);
  EXPECT_NE(f->detail.find("header checksum"), std::string::npos) << f->detail;
  // The walk skipped the damaged record and found the ones after it.
  const FsckFinding* gap = Find(r, "unparsable_bytes");
  ASSERT_NE(gap, nullptr) << Dump(r);
  EXPECT_TRUE(gap->informational);
  // Quick checks read headers, so they see this one.
  EXPECT_NE(Find(Fsck(false, true), "bad_record_header", "/a/opt.bin"), nullptr);

  ASSERT_NO_FATAL_FAILURE(RepairAndVerify({"/a/opt.bin"}));
  EXPECT_EQ(after_.at("/a/opt.bin").content.size(), 700 * kKiB);
}

TEST_F(FsckTest, TruncatedSegment) {
  // Cut the segment that holds the end of /b/c/tensor in the middle of the
  // tensor's last record.
  std::vector<ExtentInfo> ex = ExtentsOf("/b/c/tensor");
  const ExtentInfo& last = ex.back();
  const uint64_t cut = last.value.record_offset + 100;
  ASSERT_EQ(::truncate(SegmentFile(last.value.segment_id).c_str(), static_cast<off_t>(cut)), 0);
  std::set<std::string> lost;
  for (const auto& [path, info] : before_) {
    for (const ExtentInfo& x : ExtentsOf(path)) {
      if (!x.value.is_inline && x.value.segment_id == last.value.segment_id &&
          x.value.record_offset + format::kRecordHeaderSize + x.value.stored_len > cut) {
        lost.insert(path == "/b/model.link" ? "/a/model.bin" : path);
      }
    }
  }
  ASSERT_TRUE(lost.count("/b/c/tensor"));

  FsckReport r = Fsck(false);
  EXPECT_EQ(ExitCode(r), 4) << Dump(r);
  const FsckFinding* f = Find(r, "record_outside_segment", "/b/c/tensor");
  ASSERT_NE(f, nullptr) << Dump(r);
  EXPECT_EQ(f->offset + f->length, 900 * kKiB) << "the range runs to the end of the file";
  EXPECT_LE(f->offset, last.file_offset);
  const FsckFinding* seg = Find(r, "truncated_segment");
  ASSERT_NE(seg, nullptr) << Dump(r);
  EXPECT_EQ(seg->segment_id, last.value.segment_id);
  EXPECT_EQ(std::set<std::string>(r.lost_files.begin(), r.lost_files.end()), lost);

  ASSERT_NO_FATAL_FAILURE(RepairAndVerify(lost));
  EXPECT_EQ(after_.at("/b/c/tensor").content.size(), 900 * kKiB);
}

TEST_F(FsckTest, DeletedSegmentFile) {
  const uint64_t victim = ExtentsOf("/a/model.bin").front().value.segment_id;
  std::set<std::string> lost;
  for (const auto& [path, info] : before_) {
    for (const ExtentInfo& x : ExtentsOf(path)) {
      if (!x.value.is_inline && x.value.segment_id == victim) {
        lost.insert(path == "/b/model.link" ? "/a/model.bin" : path);
      }
    }
  }
  ASSERT_TRUE(lost.count("/a/model.bin"));
  EXPECT_FALSE(lost.count("/b/c/tensor"));
  ASSERT_EQ(::unlink(SegmentFile(victim).c_str()), 0);

  FsckReport r = Fsck(false);
  EXPECT_EQ(ExitCode(r), 4) << Dump(r);
  const FsckFinding* f = Find(r, "missing_segment", "/a/model.bin");
  ASSERT_NE(f, nullptr) << Dump(r);
  EXPECT_EQ(f->segment_id, victim);
  EXPECT_EQ(f->offset, 0u);
  const FsckFinding* file = Find(r, "missing_segment_file");
  ASSERT_NE(file, nullptr) << Dump(r);
  EXPECT_EQ(file->segment_id, victim);
  EXPECT_EQ(std::set<std::string>(r.lost_files.begin(), r.lost_files.end()), lost);

  ASSERT_NO_FATAL_FAILURE(RepairAndVerify(lost));
  // The repaired store takes new data.
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir_.store(), options_));
  ASSERT_OK_AND_ASSIGN(Attr n, store->Create(kRootIno, "new", S_IFREG | 0644, 0, 0));
  ASSERT_OK(WriteAll(store.get(), n.ino, 0, PatternData(9, 0, 3000 * kKiB)));
  ASSERT_OK(store->Close());
  EXPECT_TRUE(Fsck(false).clean());
}

TEST_F(FsckTest, DeletedInodeKeyLeavesDanglingEntry) {
  const Ino ino = before_.at("/a/opt.bin").ino;
  WithIndex([&](IndexDb& db) {
    ASSERT_TRUE(db.db->Delete(rocksdb::WriteOptions(), db.inodes(), format::InodeKey(ino)).ok());
  });

  FsckReport r = Fsck(false);
  EXPECT_EQ(ExitCode(r), 4) << Dump(r);
  const FsckFinding* f = Find(r, "dangling_entry", "/a/opt.bin");
  ASSERT_NE(f, nullptr) << Dump(r);
  EXPECT_EQ(f->ino, ino);
  const FsckFinding* ext = Find(r, "extent_without_inode", "/a/opt.bin");
  ASSERT_NE(ext, nullptr) << Dump(r);
  EXPECT_EQ(ext->length, 700 * kKiB);
  EXPECT_NE(Find(r, "bad_inode_count"), nullptr) << Dump(r);

  ASSERT_NO_FATAL_FAILURE(RepairAndVerify({"/a/opt.bin"}));
  EXPECT_EQ(after_.count("/a/opt.bin"), 0u);
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir_.store(), options_));
  ASSERT_OK_AND_ASSIGN(Attr a, store->Lookup(kRootIno, "a"));
  EXPECT_ERRNO(ENOENT, store->Lookup(a.ino, "opt.bin"));
  ASSERT_OK_AND_ASSIGN(FsStats st, store->StatFs());
  EXPECT_EQ(st.inodes, 9u);  // root, a, b, c, 4 files, a symlink; no lost+found
  ASSERT_OK(store->Close());
}

TEST_F(FsckTest, PlantedOrphanFileMovesToLostFound) {
  const Ino ino = before_.at("/b/c/tensor").ino;
  WithIndex([&](IndexDb& db) {
    // Find /b/c's inode through the index, then drop the entry "tensor".
    std::string v;
    format::DentryValue b, cdir;
    ASSERT_TRUE(db.db->Get(rocksdb::ReadOptions(), db.dentries(), format::DentryKey(kRootIno, "b"), &v).ok());
    ASSERT_OK(format::DecodeDentry(v, &b));
    ASSERT_TRUE(db.db->Get(rocksdb::ReadOptions(), db.dentries(), format::DentryKey(b.ino, "c"), &v).ok());
    ASSERT_OK(format::DecodeDentry(v, &cdir));
    ASSERT_TRUE(
        db.db->Delete(rocksdb::WriteOptions(), db.dentries(), format::DentryKey(cdir.ino, "tensor")).ok());
  });
  const std::string where = "/lost+found/" + std::to_string(ino);

  FsckReport r = Fsck(false);
  EXPECT_EQ(ExitCode(r), 4) << Dump(r);
  const FsckFinding* f = Find(r, "orphaned_inode", where);
  ASSERT_NE(f, nullptr) << Dump(r);
  EXPECT_EQ(f->ino, ino);
  EXPECT_FALSE(f->repaired);

  FsckReport rep = Fsck(true);
  EXPECT_EQ(ExitCode(rep), 1) << Dump(rep);
  f = Find(rep, "orphaned_inode", where);
  ASSERT_NE(f, nullptr) << Dump(rep);
  EXPECT_TRUE(f->repaired);
  EXPECT_TRUE(rep.lost_files.empty()) << "no data was lost";
  FsckReport again = Fsck(false);
  EXPECT_TRUE(again.clean()) << Dump(again);
  after_ = Snapshot();
  ASSERT_EQ(after_.count(where), 1u);
  EXPECT_TRUE(after_.at(where).content == before_.at("/b/c/tensor").content);
  for (const auto& [path, info] : before_) {
    if (path == "/b/c/tensor") continue;
    ASSERT_EQ(after_.count(path), 1u) << path;
    EXPECT_TRUE(after_.at(path).content == info.content) << path;
  }
  // lost+found is an ordinary directory now: a second orphan reuses it.
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir_.store(), options_));
  ASSERT_OK_AND_ASSIGN(Attr lf, store->Lookup(kRootIno, "lost+found"));
  EXPECT_TRUE(S_ISDIR(lf.mode));
  EXPECT_EQ(lf.nlink, 2u);
  ASSERT_OK_AND_ASSIGN(Attr root, store->GetAttr(kRootIno));
  EXPECT_EQ(root.nlink, 5u);  // a, b, lost+found
  ASSERT_OK_AND_ASSIGN(Attr made, store->Mkdir(kRootIno, "after", 0755, 0, 0));
  EXPECT_GT(made.ino, lf.ino) << "inode numbers are never reused";
  ASSERT_OK(store->Close());
}

TEST_F(FsckTest, PlantedOrphanDirectoryKeepsItsTree) {
  Ino c = 0, b = 0;
  WithIndex([&](IndexDb& db) {
    std::string v;
    format::DentryValue d;
    ASSERT_TRUE(db.db->Get(rocksdb::ReadOptions(), db.dentries(), format::DentryKey(kRootIno, "b"), &v).ok());
    ASSERT_OK(format::DecodeDentry(v, &d));
    b = d.ino;
    ASSERT_TRUE(db.db->Get(rocksdb::ReadOptions(), db.dentries(), format::DentryKey(b, "c"), &v).ok());
    ASSERT_OK(format::DecodeDentry(v, &d));
    c = d.ino;
    ASSERT_TRUE(db.db->Delete(rocksdb::WriteOptions(), db.dentries(), format::DentryKey(b, "c")).ok());
  });
  const std::string where = "/lost+found/" + std::to_string(c);
  FsckReport r = Fsck(false);
  ASSERT_NE(Find(r, "orphaned_inode", where), nullptr) << Dump(r);
  // /b lost a subdirectory: its link count is off.
  EXPECT_NE(Find(r, "bad_link_count", "/b"), nullptr) << Dump(r);
  FsckReport rep = Fsck(true);
  EXPECT_EQ(ExitCode(rep), 1) << Dump(rep);
  EXPECT_TRUE(Fsck(false).clean());
  after_ = Snapshot();
  ASSERT_EQ(after_.count(where + "/tensor"), 1u);
  EXPECT_TRUE(after_.at(where + "/tensor").content == before_.at("/b/c/tensor").content);
}

TEST_F(FsckTest, WrongLinkCountAndSegmentCounter) {
  const Ino ino = before_.at("/a/model.bin").ino;  // two names
  uint64_t seg = ExtentsOf("/a/model.bin").front().value.segment_id;
  WithIndex([&](IndexDb& db) {
    std::string v;
    ASSERT_TRUE(db.db->Get(rocksdb::ReadOptions(), db.inodes(), format::InodeKey(ino), &v).ok());
    format::InodeValue iv;
    ASSERT_OK(format::DecodeInode(v, &iv));
    iv.nlink = 5;
    ASSERT_TRUE(db.db->Put(rocksdb::WriteOptions(), db.inodes(), format::InodeKey(ino), format::EncodeInode(iv)).ok());
    format::SegmentStat delta;
    delta.live = 12345;
    ASSERT_TRUE(db.db->Merge(rocksdb::WriteOptions(), db.segments(), format::SegmentKey(seg),
                             format::EncodeSegmentStat(delta)).ok());
  });
  FsckReport r = Fsck(false);
  const FsckFinding* f = Find(r, "bad_link_count", "/a/model.bin");
  ASSERT_NE(f, nullptr) << Dump(r);
  EXPECT_NE(f->detail.find("expected 2"), std::string::npos) << f->detail;
  const FsckFinding* live = Find(r, "segment_live_mismatch");
  ASSERT_NE(live, nullptr) << Dump(r);
  EXPECT_EQ(live->segment_id, seg);
  ASSERT_NO_FATAL_FAILURE(RepairAndVerify({}));
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir_.store(), options_));
  ASSERT_OK_AND_ASSIGN(Attr a, store->GetAttr(ino));
  EXPECT_EQ(a.nlink, 2u);
  ASSERT_OK(store->Close());
}

// A seal is one commit: an unsealed inode below a sealed directory, or a
// seal record of an inode that is not sealed, is damage; repair seals the
// one and drops the other.
TEST_F(FsckTest, HalfSealedTreeAndStraySealRecord) {
  Ino root = 0;
  {
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir_.store(), options_));
    ASSERT_OK_AND_ASSIGN(Attr b, store->Lookup(kRootIno, "b"));
    root = b.ino;
    ASSERT_OK_AND_ASSIGN(uint64_t n, store->Seal(b.ino));
    EXPECT_EQ(n, 5u);  // b, c, tensor, empty, model.link's inode
    ASSERT_OK(store->Close());
  }
  EXPECT_TRUE(Fsck(false).clean());
  const Ino tensor = before_.at("/b/c/tensor").ino;
  const Ino small = before_.at("/small.json").ino;
  WithIndex([&](IndexDb& db) {
    std::string v;
    ASSERT_TRUE(db.db->Get(rocksdb::ReadOptions(), db.inodes(), format::InodeKey(tensor), &v).ok());
    format::InodeValue iv;
    ASSERT_OK(format::DecodeInode(v, &iv));
    ASSERT_TRUE(iv.flags & format::kInodeSealed);
    iv.flags = 0;
    ASSERT_TRUE(db.db->Put(rocksdb::WriteOptions(), db.inodes(), format::InodeKey(tensor),
                           format::EncodeInode(iv)).ok());
    format::SealValue seal{1, 1, 100};
    ASSERT_TRUE(db.db->Put(rocksdb::WriteOptions(), db.db->DefaultColumnFamily(),
                           format::SealKey(small), format::EncodeSeal(seal)).ok());
  });
  FsckReport r = Fsck(false);
  EXPECT_EQ(ExitCode(r), 4) << Dump(r);
  const FsckFinding* half = Find(r, "half_sealed", "/b/c/tensor");
  ASSERT_NE(half, nullptr) << Dump(r);
  EXPECT_NE(half->detail.find("/b/c"), std::string::npos) << half->detail;
  const FsckFinding* stray = Find(r, "bad_seal_record", "/small.json");
  ASSERT_NE(stray, nullptr) << Dump(r);
  EXPECT_NE(stray->detail.find("not sealed"), std::string::npos) << stray->detail;

  ASSERT_NO_FATAL_FAILURE(RepairAndVerify({}));
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir_.store(), options_));
  ASSERT_OK_AND_ASSIGN(Attr t, store->GetAttr(tensor));
  EXPECT_TRUE(t.sealed);
  EXPECT_EQ(store->Write(tensor, 0, "x").status().code(), EROFS);
  ASSERT_OK_AND_ASSIGN(std::vector<SealedTree> trees, store->SealedTrees());
  ASSERT_EQ(trees.size(), 1u);
  EXPECT_EQ(trees[0].ino, root);
  ASSERT_OK(store->Close());
}

// A seal record's snapshot that does not open (a changed byte) is damage:
// repair drops it from the record, whose tree stays sealed. A snapshot no
// record names is informational, and repair deletes it.
TEST_F(FsckTest, DamagedAndUnusedSnapshots) {
  std::string name;
  {
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir_.store(), options_));
    ASSERT_OK_AND_ASSIGN(Attr b, store->Lookup(kRootIno, "b"));
    ASSERT_OK(store->Seal(b.ino).status());
    ASSERT_OK_AND_ASSIGN(std::vector<SealedTree> trees, store->SealedTrees());
    ASSERT_EQ(trees.size(), 1u);
    name = trees[0].seal.snapshot;
    ASSERT_OK(store->Close());
  }
  ASSERT_FALSE(name.empty());
  EXPECT_TRUE(Fsck(false).clean());
  const std::string snapshots = dir_.store() + "/snapshots/";
  ASSERT_NO_FATAL_FAILURE(FlipByte(snapshots + name, 30));
  std::ofstream(snapshots + "7-1.sst") << "left by a seal that did not commit";
  FsckReport r = Fsck(false);
  EXPECT_EQ(ExitCode(r), 4) << Dump(r);
  const FsckFinding* bad = Find(r, "bad_snapshot", "/b");
  ASSERT_NE(bad, nullptr) << Dump(r);
  EXPECT_NE(bad->detail.find(name), std::string::npos) << bad->detail;
  const FsckFinding* unused = Find(r, "unused_snapshot");
  ASSERT_NE(unused, nullptr) << Dump(r);
  EXPECT_TRUE(unused->informational);

  ASSERT_NO_FATAL_FAILURE(RepairAndVerify({}));
  EXPECT_FALSE(std::filesystem::exists(snapshots + "7-1.sst"));
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir_.store(), options_));
  ASSERT_OK_AND_ASSIGN(std::vector<SealedTree> trees, store->SealedTrees());
  ASSERT_EQ(trees.size(), 1u);
  EXPECT_TRUE(trees[0].seal.snapshot.empty());
  ASSERT_OK_AND_ASSIGN(Attr b, store->Lookup(kRootIno, "b"));
  EXPECT_TRUE(b.sealed);
  ASSERT_OK(store->Close());
}

TEST_F(FsckTest, ZeroFilledGapFromACrashIsInformational) {
  // A reservation that was never written: zeros at the end of the active
  // segment, then more records after it.
  ASSERT_OK_AND_ASSIGN(auto store0, Store::Open(dir_.store(), options_));
  ASSERT_OK_AND_ASSIGN(std::vector<SegmentInfo> segs, store0->ListSegments());
  ASSERT_OK(store0->Close());
  const std::string active = segs.back().path;
  {
    int fd = ::open(active.c_str(), O_WRONLY | O_APPEND);
    ASSERT_GE(fd, 0);
    std::string zeros(70000, '\0');
    ASSERT_EQ(::write(fd, zeros.data(), zeros.size()), static_cast<ssize_t>(zeros.size()));
    ::close(fd);
  }
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir_.store(), options_));
  ASSERT_OK_AND_ASSIGN(Attr n, store->Create(kRootIno, "after_gap", S_IFREG | 0644, 0, 0));
  ASSERT_OK(WriteAll(store.get(), n.ino, 0, PatternData(11, 0, 100 * kKiB)));
  ASSERT_OK(store->Close());
  FsckReport r = Fsck(false);
  EXPECT_TRUE(r.clean()) << Dump(r);
  const FsckFinding* gap = Find(r, "unparsable_bytes");
  ASSERT_NE(gap, nullptr) << Dump(r);
  EXPECT_TRUE(gap->informational);
  EXPECT_EQ(gap->length, 70000u);
  EXPECT_NE(gap->detail.find("zero-filled"), std::string::npos);
  EXPECT_TRUE(Fsck(false, true).clean());
}

TEST_F(FsckTest, DamagedSegmentHeaderIsRewritten) {
  const uint64_t seg = ExtentsOf("/a/model.bin").front().value.segment_id;
  FlipByte(SegmentFile(seg), 3);  // the magic
  // The store refuses to open (and does not crash) until fsck repairs it.
  auto open = Store::Open(dir_.store(), options_);
  ASSERT_ERRNO(EIO, open);
  EXPECT_NE(open.status().message().find("magic"), std::string::npos) << open.status().ToString();
  FsckReport r = Fsck(false);
  const FsckFinding* f = Find(r, "bad_segment_header");
  ASSERT_NE(f, nullptr) << Dump(r);
  EXPECT_EQ(f->segment_id, seg);
  EXPECT_EQ(ExitCode(r), 4);
  // The records behind the header are intact: nothing is lost.
  EXPECT_EQ(Find(r, "bad_payload_checksum"), nullptr) << Dump(r);
  ASSERT_NO_FATAL_FAILURE(RepairAndVerify({}));
}

TEST_F(FsckTest, RefusesAStoreInUse) {
  StoreOptions o = options_;
  // A holder before it, with a longer name: its line is written over.
  o.holder = "ckptfs mount /mnt/a-much-longer-name-of-an-earlier-holder";
  {
    ASSERT_OK_AND_ASSIGN(auto earlier, Store::Open(dir_.store(), o));
    ASSERT_OK(earlier->Close());
  }
  o.holder = "ckptfs mount /mnt/test-holder";
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir_.store(), o));
  auto r = engine::Fsck(dir_.store(), FsckOptions{});
  ASSERT_ERRNO(EBUSY, r);
  EXPECT_NE(r.status().message().find("in use by ckptfs mount /mnt/test-holder"), std::string::npos)
      << r.status().ToString();
  const StoreHolder* holder = r.status().payload<StoreHolder>();
  ASSERT_NE(holder, nullptr);
  EXPECT_EQ(holder->holder, "ckptfs mount /mnt/test-holder");
  EXPECT_EQ(holder->pid, ::getpid());
  ASSERT_OK(store->Close());
}

// What a killed writer leaves behind (torn records, zero-filled gaps, records
// whose index batch never committed, files unlinked while open) is normal:
// fsck reports it as information only, and the store stays clean.
TEST(FsckCrash, CleanAfterWritersAreKilled) {
  TempDir dir;
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Child c = StartChild({"writer", dir.store(), std::to_string(round), std::to_string(round + 40), "{FD}"});
    ASSERT_GT(c.pid, 0);
    std::string line;
    ASSERT_TRUE(ReadLine(c.fd, &line)) << "the writer did not start";
    for (int files = 0; files < 3 + round * 2 && ReadLine(c.fd, &line); ++files) {
    }
    ::kill(c.pid, SIGKILL);
    WaitChild(c.pid);
    ::close(c.fd);
    auto r = engine::Fsck(dir.store(), FsckOptions{});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->clean()) << Dump(*r);
    EXPECT_GT(r->files_checked, 0u);
  }
  // The orphan child leaves an inode unlinked while open: pending, not an error.
  Child o = StartChild({"orphan", dir.store()});
  std::string ino;
  ASSERT_TRUE(ReadLine(o.fd, &ino));
  WaitChild(o.pid);
  ::close(o.fd);
  auto r = engine::Fsck(dir.store(), FsckOptions{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->clean()) << Dump(*r);
  bool pending = false;
  for (const FsckFinding& f : r->findings) {
    pending |= f.kind == "pending_orphan" && std::to_string(f.ino) == ino && f.informational;
  }
  EXPECT_TRUE(pending) << Dump(*r);
}

// The index's families get ids 1 to 5 in format.h's order (SeedIndexFamilies
// counts on it), and a repair after a lost MANIFEST replays what only the log
// held into every family.
TEST(IndexRepair, ReplaysTheLogIntoEveryFamily) {
  TempDir dir;
  const std::string path = dir.path() + "/index";
  {
    IndexDb db;
    ASSERT_OK(OpenIndexDb(path, /*create=*/true, /*read_only=*/false, io::Env::Posix().get(), &db));
    ASSERT_EQ(db.handles.size(), 6u);
    for (uint32_t i = 0; i < db.handles.size(); ++i) {
      EXPECT_EQ(db.handles[i]->GetID(), i) << db.handles[i]->GetName();
      if (i == 0) continue;
      // Put, not merge: the families with merge operators take either.
      ASSERT_TRUE(db.db->Put(rocksdb::WriteOptions(), db.handles[i], "key", "value" + std::to_string(i)).ok());
    }
    ASSERT_OK(db.Close());  // the log keeps the writes: a close does not flush them
  }
  bool table = false;
  for (const auto& e : std::filesystem::directory_iterator(path)) {
    table |= e.path().extension() == ".sst";
    if (e.path().filename().string().starts_with("MANIFEST-")) std::filesystem::remove(e.path());
  }
  ASSERT_FALSE(table);
  std::vector<std::string> seeds;
  ASSERT_OK(RepairIndexDb(path, io::Env::Posix().get(), &seeds));
  EXPECT_EQ(seeds.size(), 5u);
  IndexDb db;
  ASSERT_OK(OpenIndexDb(path, /*create=*/false, /*read_only=*/true, io::Env::Posix().get(), &db));
  for (uint32_t i = 1; i < db.handles.size(); ++i) {
    std::string v;
    ASSERT_TRUE(db.db->Get(rocksdb::ReadOptions(), db.handles[i], "key", &v).ok()) << i;
    EXPECT_EQ(v, "value" + std::to_string(i));
    // The seed's tombstone of the empty key reads as nothing.
    EXPECT_TRUE(db.db->Get(rocksdb::ReadOptions(), db.handles[i], "", &v).IsNotFound());
  }
  ASSERT_OK(db.Close());
}

TEST(FsckErrors, NotAStore) {
  TempDir dir;
  EXPECT_ERRNO(ENOENT, engine::Fsck(dir.path() + "/absent", FsckOptions{}));
  ASSERT_EQ(::mkdir((dir.path() + "/x").c_str(), 0755), 0);
  EXPECT_ERRNO(EINVAL, engine::Fsck(dir.path() + "/x", FsckOptions{}));
}

}  // namespace
}  // namespace ckptfs::engine::test
