// Small random overwrites of one file (the pattern of xfstests' fsx) through
// ckptfs::engine::Store, against an in-memory model: unaligned writes and
// reads, truncates down and up, the inline-to-record switch of small files,
// compaction between and during the writes, reopen, unlink of a file that
// is still open. Every read is compared byte for byte, and the extents the
// store answers from memory are compared with those its index holds after
// a reopen.
#include <sys/stat.h>

#include <atomic>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/engine/test_util.h"

namespace ckptfs::engine::test {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

StoreOptions OverwriteOptions() {
  StoreOptions o = TestOptions();
  o.segment_size = 1 * kMiB;  // many sealed segments for compaction
  o.max_record_bytes = 16 * kKiB;     // long writes become several records
  o.cache_size = 256 * kKiB;         // reads must reach the segment files
  o.data_file_min = 256 * kKiB;     // bigger files move to data files
  return o;
}

// One file and the bytes it must hold.
class ModelFile {
 public:
  ModelFile(Store* s, Ino ino, uint64_t seed) : s_(s), ino_(ino), rng_(seed) {}

  // One random operation: mostly unaligned writes and reads, sometimes a
  // truncate. `max_size` bounds the file. Returns a description of the first
  // difference from the model, or "".
  std::string Step(uint64_t max_size) {
    const uint64_t kind = rng_() % 16;
    if (kind == 0) return Truncate(rng_() % (max_size + 1));
    const uint64_t off = rng_() % max_size;
    const uint64_t len = 1 + rng_() % std::min<uint64_t>(64 * kKiB, max_size - off);
    if (kind < 9) return Write(off, len);
    return Read(off, len);
  }

  std::string Write(uint64_t off, uint64_t len) {
    std::string data(len, '\0');
    for (char& c : data) c = static_cast<char>(rng_());
    auto n = s_->Write(ino_, off, data);
    if (!n.ok()) return "write: " + n.status().ToString();
    if (*n != len) return "short write";
    if (model_.size() < off + len) model_.resize(off + len, '\0');
    model_.replace(off, len, data);
    return "";
  }

  std::string Truncate(uint64_t size) {
    SetAttrRequest req;
    req.size = size;
    auto a = s_->SetAttr(ino_, req);
    if (!a.ok()) return "truncate: " + a.status().ToString();
    model_.resize(size, '\0');
    return "";
  }

  std::string Read(uint64_t off, uint64_t len) {
    std::string buf(len, '\x5a');
    auto n = s_->Read(ino_, off, len, buf.data());
    if (!n.ok()) return "read: " + n.status().ToString();
    const uint64_t want = off >= model_.size() ? 0 : std::min(len, model_.size() - off);
    if (*n != want) {
      return "read at " + std::to_string(off) + " returned " + std::to_string(*n) +
             " bytes, want " + std::to_string(want);
    }
    for (uint64_t i = 0; i < want; ++i) {
      if (buf[i] != model_[off + i]) return "read differs at offset " + std::to_string(off + i);
    }
    return "";
  }

  std::string ReadWhole() {
    auto a = s_->GetAttr(ino_);
    if (!a.ok()) return "getattr: " + a.status().ToString();
    if (a->size != model_.size()) {
      return "size " + std::to_string(a->size) + ", want " + std::to_string(model_.size());
    }
    return model_.empty() ? "" : Read(0, model_.size());
  }

  void set_store(Store* s) { s_ = s; }
  const std::string& model() const { return model_; }

 private:
  Store* s_;
  Ino ino_;
  std::mt19937_64 rng_;
  std::string model_;
};

std::string Describe(const std::vector<ExtentInfo>& ex) {
  std::string out;
  for (const ExtentInfo& e : ex) {
    out += std::to_string(e.file_offset) + "+" + std::to_string(e.value.length) +
           (e.value.is_inline ? "i " : " ");
  }
  return out;
}

class OverwriteTest : public StoreFixture {
 protected:
  void SetUp() override {
    options_ = OverwriteOptions();
    StoreFixture::SetUp();
  }
  Ino File(const std::string& name) {
    auto a = s()->Create(kRootIno, name, S_IFREG | 0644, 0, 0);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    return a.ok() ? a->ino : 0;
  }
  // The extents the open store answers must be those of its index, which a
  // reopen reads afresh.
  void ExpectExtentsSurviveReopen(Ino ino) {
    ASSERT_OK_AND_ASSIGN(std::vector<ExtentInfo> before, s()->GetExtents(ino));
    ASSERT_NO_FATAL_FAILURE(Reopen());
    ASSERT_OK_AND_ASSIGN(std::vector<ExtentInfo> after, s()->GetExtents(ino));
    ASSERT_EQ(before.size(), after.size()) << Describe(before) << "\nvs\n" << Describe(after);
    for (size_t i = 0; i < before.size(); ++i) {
      EXPECT_EQ(before[i].file_offset, after[i].file_offset);
      EXPECT_TRUE(before[i].value == after[i].value) << "extent at " << before[i].file_offset;
    }
  }
};

TEST_F(OverwriteTest, RandomUnalignedOverwritesMatchTheModel) {
  Ino f = File("f");
  ASSERT_OK(s()->OpenFile(f));
  ModelFile m(s(), f, 1);
  for (int i = 0; i < 4000; ++i) {
    const std::string err = m.Step(256 * kKiB);
    ASSERT_EQ(err, "") << "op " << i;
    if (i % 500 == 499) {
      ASSERT_EQ(m.ReadWhole(), "") << "op " << i;
    }
  }
  ASSERT_EQ(m.ReadWhole(), "");
  ASSERT_OK(s()->Release(f));
  ASSERT_NO_FATAL_FAILURE(ExpectExtentsSurviveReopen(f));
  m.set_store(s());
  ASSERT_EQ(m.ReadWhole(), "");
}

TEST_F(OverwriteTest, SmallFilesSwitchBetweenInlineAndRecords) {
  // Around inline_max: writes fold the inline head into records and
  // truncates bring the file back under it.
  Ino f = File("small");
  ModelFile m(s(), f, 2);
  for (int i = 0; i < 3000; ++i) {
    const std::string err = m.Step(3 * options_.inline_max);
    ASSERT_EQ(err, "") << "op " << i;
  }
  ASSERT_EQ(m.ReadWhole(), "");
  ASSERT_NO_FATAL_FAILURE(ExpectExtentsSurviveReopen(f));
  m.set_store(s());
  ASSERT_EQ(m.ReadWhole(), "");
}

TEST_F(OverwriteTest, CompactionBetweenOverwritesMovesTheExtents) {
  Ino f = File("f");
  Ino g = File("g");
  ModelFile mf(s(), f, 3);
  ModelFile mg(s(), g, 4);
  uint64_t rewritten = 0;
  for (int round = 0; round < 6; ++round) {
    for (int i = 0; i < 200; ++i) {
      ASSERT_EQ(mf.Step(512 * kKiB), "") << "round " << round << " op " << i;
      ASSERT_EQ(mg.Step(128 * kKiB), "") << "round " << round << " op " << i;
    }
    CompactOptions co;
    co.dead_ratio = 0.0;
    ASSERT_OK_AND_ASSIGN(CompactReport rep, s()->Compact(co));
    EXPECT_TRUE(rep.errors.empty());
    rewritten += rep.segments_rewritten;
    // Reads right after compaction go to the records it wrote.
    s()->DropCache();
    ASSERT_EQ(mf.ReadWhole(), "") << "round " << round;
    ASSERT_EQ(mg.ReadWhole(), "") << "round " << round;
  }
  EXPECT_GT(rewritten, 0u);
  ASSERT_NO_FATAL_FAILURE(ExpectExtentsSurviveReopen(f));
  ASSERT_NO_FATAL_FAILURE(ExpectExtentsSurviveReopen(g));
  mf.set_store(s());
  mg.set_store(s());
  ASSERT_EQ(mf.ReadWhole(), "");
  ASSERT_EQ(mg.ReadWhole(), "");
}

TEST_F(OverwriteTest, UnlinkedOpenFileKeepsItsDataUntilReleased) {
  Ino f = File("f");
  ASSERT_OK(s()->OpenFile(f));
  ModelFile m(s(), f, 5);
  for (int i = 0; i < 500; ++i) ASSERT_EQ(m.Step(128 * kKiB), "") << "op " << i;
  ASSERT_OK(s()->Unlink(kRootIno, "f"));
  for (int i = 0; i < 500; ++i) ASSERT_EQ(m.Step(128 * kKiB), "") << "op " << i;
  ASSERT_EQ(m.ReadWhole(), "");
  ASSERT_OK(s()->Release(f));  // the purge
  EXPECT_FALSE(s()->GetAttr(f).ok());
  ASSERT_OK_AND_ASSIGN(SpaceTotals t, SumSegments(s()));
  EXPECT_EQ(t.live, 0);
  // A new file starts empty, whatever the purged one held.
  Ino g = File("g");
  ModelFile mg(s(), g, 6);
  for (int i = 0; i < 200; ++i) ASSERT_EQ(mg.Step(128 * kKiB), "") << "op " << i;
  ASSERT_EQ(mg.ReadWhole(), "");
}

// One writer per file, each checking its own reads against its model, while
// other threads read a file that does not change and compaction moves the
// extents of all of them.
TEST(OverwriteConcurrencyTest, OverwritesAndTruncatesDuringOnlineCompaction) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir.store(), OverwriteOptions()));
  Store* s = store.get();
  auto fixed = s->Create(kRootIno, "fixed", S_IFREG | 0644, 0, 0);
  ASSERT_TRUE(fixed.ok());
  const std::string fixed_data = PatternData(9, 0, 300 * kKiB + 7);
  // Written in unaligned pieces, then partly rewritten with the same bytes,
  // so that it has many extents in several segments.
  for (uint64_t off = 0; off < fixed_data.size(); off += 3001) {
    ASSERT_OK(WriteAll(s, fixed->ino, off, std::string_view(fixed_data).substr(off, 3001)));
  }
  for (uint64_t off = 1000; off < fixed_data.size(); off += 7919) {
    ASSERT_OK(WriteAll(s, fixed->ino, off, std::string_view(fixed_data).substr(off, 2000)));
  }

  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::atomic<uint64_t> reads{0};
  std::mutex fail_mu;
  std::string first_failure;
  auto fail = [&](const std::string& what) {
    std::lock_guard<std::mutex> l(fail_mu);
    if (failures++ == 0) first_failure = what;
  };
  std::vector<std::thread> threads;
  std::vector<std::unique_ptr<ModelFile>> models;
  for (int w = 0; w < 2; ++w) {
    auto a = s->Create(kRootIno, "w" + std::to_string(w), S_IFREG | 0644, 0, 0);
    ASSERT_TRUE(a.ok());
    models.push_back(std::make_unique<ModelFile>(s, a->ino, 100 + w));
  }
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      for (int i = 0; i < 1000 && failures.load() == 0; ++i) {
        const std::string err = models[w]->Step(192 * kKiB);
        if (!err.empty()) fail("writer " + std::to_string(w) + " op " + std::to_string(i) + ": " + err);
      }
      const std::string err = models[w]->ReadWhole();
      if (!err.empty()) fail("writer " + std::to_string(w) + " at the end: " + err);
    });
  }
  threads.emplace_back([&] {
    std::mt19937_64 rng(7);
    std::string buf;
    while (!stop) {
      const uint64_t off = rng() % fixed_data.size();
      const uint64_t len = 1 + rng() % std::min<uint64_t>(64 * kKiB, fixed_data.size() - off);
      buf.assign(len, '\0');
      auto n = s->Read(fixed->ino, off, len, buf.data());
      if (!n.ok()) {
        fail("read fixed: " + n.status().ToString());
      } else if (*n != len || std::string_view(buf) != std::string_view(fixed_data).substr(off, len)) {
        fail("read fixed at " + std::to_string(off) + " returned wrong bytes");
      }
      reads++;
    }
  });
  std::thread compactor([&] {
    while (!stop) {
      CompactOptions co;
      co.dead_ratio = 0.0;
      auto r = s->Compact(co);
      if (!r.ok()) fail("compact: " + r.status().ToString());
    }
  });
  for (int w = 0; w < 2; ++w) threads[w].join();
  while (reads.load() < 100 && failures.load() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stop = true;
  for (size_t t = 2; t < threads.size(); ++t) threads[t].join();
  compactor.join();
  EXPECT_EQ(failures.load(), 0) << first_failure;
  for (auto& m : models) EXPECT_EQ(m->ReadWhole(), "");
  ASSERT_OK(store->Close());
  auto r = engine::Fsck(dir.store(), FsckOptions{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->clean());
}

}  // namespace
}  // namespace ckptfs::engine::test
