#include "options/option_table.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "options/mount_options.h"

namespace ckptfs::options {
namespace {

constexpr std::string_view kDocBegin =
    "<!-- BEGIN option table: generated from options/option_table.cc; "
    "CKPTFS_UPDATE_DOCS=1 option_table_test rewrites it -->\n";
constexpr std::string_view kDocEnd = "<!-- END option table -->\n";

TEST(OptionTableTest, OptionsDocShowsTheGeneratedTable) {
  const std::string path = std::string(CKPTFS_SOURCE_DIR) + "/docs/OPTIONS.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot read " << path;
  std::stringstream buf;
  buf << in.rdbuf();
  std::string doc = buf.str();
  const size_t begin = doc.find(kDocBegin);
  ASSERT_NE(begin, std::string::npos) << "docs/OPTIONS.md lacks the line " << kDocBegin;
  const size_t body = begin + kDocBegin.size();
  const size_t end = doc.find(kDocEnd, body);
  ASSERT_NE(end, std::string::npos) << "docs/OPTIONS.md lacks the line " << kDocEnd;
  const std::string want = OptionsMarkdown();
  if (doc.compare(body, end - body, want) == 0) return;
  if (const char* update = std::getenv("CKPTFS_UPDATE_DOCS"); update && *update == '1') {
    doc.replace(body, end - body, want);
    std::ofstream(path) << doc;
    std::printf("rewrote the option table in %s\n", path.c_str());
    return;
  }
  ADD_FAILURE() << "docs/OPTIONS.md's option table differs from options/option_table.cc; run "
                   "CKPTFS_UPDATE_DOCS=1 option_table_test to rewrite it. It should be:\n"
                << want;
}

TEST(OptionTableTest, NamesAreUniqueAndRunTimeOnesAreEngineSettings) {
  std::set<std::string_view> seen;
  for (const OptionSpec& spec : OptionTable()) {
    EXPECT_TRUE(seen.insert(spec.name).second) << spec.name;
    for (std::string_view alias : spec.aliases) {
      if (!alias.empty()) {
        EXPECT_TRUE(seen.insert(alias).second) << alias;
      }
    }
    if (!spec.off_name.empty()) {
      EXPECT_TRUE(seen.insert(spec.off_name).second) << spec.off_name;
      EXPECT_EQ(spec.type, OptionType::kFlag) << spec.name;
    }
    EXPECT_EQ(FindOption(spec.name), &spec);
    EXPECT_FALSE(spec.help.empty()) << spec.name;
    EXPECT_NE(spec.field.get, nullptr) << spec.name;
    EXPECT_NE(spec.field.set, nullptr) << spec.name;
    if (spec.runtime) {
      EXPECT_NE(spec.field.store_set, nullptr) << spec.name << " is run-time but not in the engine";
    }
  }
  EXPECT_EQ(FindOption("no_such_option"), nullptr);
  EXPECT_EQ(FindOption(""), nullptr);
}

TEST(OptionTableTest, CanonicalNamesForEveryEngineSetting) {
  MountOptions o;
  ASSERT_TRUE(ParseMountOptions("cache_size=1G,compression=3,segment_size=64M,inline_max=8K,"
                                "min_free=1G,compact_dead=2G,compact_rate=8M,free_empty=0",
                                &o)
                  .ok());
  EXPECT_EQ(o.store.cache_size, 1ull << 30);
  EXPECT_EQ(o.store.compression, 3);
  EXPECT_EQ(o.store.segment_size, 64u << 20);
  EXPECT_EQ(o.store.inline_max, 8u << 10);
  EXPECT_EQ(o.store.min_free, 1ull << 30);
  EXPECT_EQ(o.store.compact_dead, 2ull << 30);
  EXPECT_EQ(o.store.compact_rate, 8u << 20);
  EXPECT_FALSE(o.store.free_empty);
}

// The bounds the table checks as it parses are the engine's own: a value at
// a bound passes ValidateStoreOptions, one past it fails there too.
TEST(OptionTableTest, BoundsAreTheEnginesBounds) {
  int bounded = 0;
  for (const OptionSpec& spec : OptionTable()) {
    if (spec.field.store_set == nullptr || spec.type == OptionType::kFlag) continue;
    for (const auto& [at, past] : {std::pair{spec.min, spec.min - 1}, {spec.max, spec.max + 1}}) {
      const bool is_min = at == spec.min;
      if (is_min ? at == 0 : at == UINT64_MAX) continue;
      if (spec.name == "compact_rate" && is_min) continue;  // 0 is the engine's "unlimited"
      SCOPED_TRACE(std::string(spec.name) + (is_min ? " min" : " max"));
      ++bounded;
      engine::StoreOptions o;
      spec.field.store_set(&o, at);
      EXPECT_TRUE(engine::ValidateStoreOptions(o).ok());
      spec.field.store_set(&o, past);
      const Status bad = engine::ValidateStoreOptions(o);
      EXPECT_EQ(bad.code(), EINVAL);
      EXPECT_NE(bad.message().find(std::string(spec.name)), std::string::npos) << bad.message();
    }
  }
  EXPECT_EQ(bounded, 3) << "segment_size, inline_max, compression";
}

TEST(OptionTableTest, OlderNamesAreAliases) {
  const std::pair<const char*, const char*> pairs[] = {
      {"cache_bytes=3M", "cache_size=3M"},
      {"compression_level=7", "compression=7"},
      {"segment_target_bytes=32M", "segment_size=32M"},
      {"inline_max_bytes=1K", "inline_max=1K"},
      {"min_free_bytes=5M", "min_free=5M"},
      {"background_compact_dead_bytes=9M", "compact_dead=9M"},
      {"background_compact_bytes_per_sec=1M", "compact_rate=1M"},
      {"free_empty_segments=0", "free_empty=0"},
      {"read_only", "ro"},
  };
  for (const auto& [alias, canonical] : pairs) {
    MountOptions a, c;
    ASSERT_TRUE(ParseMountOption(alias, &a).ok()) << alias;
    ASSERT_TRUE(ParseMountOption(canonical, &c).ok()) << canonical;
    EXPECT_EQ(OptionLines(a), OptionLines(c)) << alias;
    EXPECT_NE(OptionLines(a), OptionLines(MountOptions())) << alias << " changed nothing";
  }
  // Every alias in the table is one of these.
  size_t aliases = 0;
  for (const OptionSpec& spec : OptionTable()) {
    for (std::string_view alias : spec.aliases) aliases += alias.empty() ? 0 : 1;
  }
  EXPECT_EQ(aliases, std::size(pairs));
}

TEST(OptionTableTest, BadValuesGiveOneLineErrorsNamingTheOption) {
  const std::pair<const char*, const char*> cases[] = {
      {"cache_size=lots", "a size such as 256K, 64M or 1G"},
      {"cache_bytes=-1", "a size such as 256K, 64M or 1G"},
      {"cache_size", "needs a value"},
      {"coalesce_gap=1.5M", "a size"},
      {"compression=23", "a whole number from 0 to 22"},
      {"compression_level=x", "a whole number from 0 to 22"},
      {"threads=0", "a whole number from 1 to 1024"},
      {"threads=1025", "from 1 to 1024"},
      {"segment_size=4K", "a size of at least 1M"},
      {"inline_max=128K", "a size of at most 64K"},
      {"compact_rate=0", "a size above 0"},
      {"attr_timeout=-1", "seconds such as 1 or 0.5"},
      {"entry_timeout=soon", "seconds"},
      {"ro=maybe", "no value, or 1/0"},
      {"rw=1", "expected no value"},
  };
  for (const auto& [option, expected] : cases) {
    MountOptions o;
    const std::string before = OptionLines(o);
    engine::Status st = ParseMountOption(option, &o);
    EXPECT_EQ(st.code(), EINVAL) << option;
    const std::string key = std::string(option).substr(0, std::string(option).find('='));
    EXPECT_NE(st.message().find("'" + key + "'"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(expected), std::string::npos) << st.message();
    EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
    EXPECT_EQ(OptionLines(o), before) << option << " changed something";
  }
  MountOptions o;
  engine::Status st = ParseMountOptions("ro,bogus=1", &o);
  EXPECT_EQ(st.code(), EINVAL);
  EXPECT_EQ(st.message(), "unknown mount option 'bogus'");
  EXPECT_EQ(ParseMountOption("=1", &o).code(), EINVAL);
}

TEST(OptionTableTest, ConfigLinesReadBackAsTheSameSettings) {
  MountOptions o;
  ASSERT_TRUE(ParseMountOptions("coalesce_gap=0,cache_size=3M,attr_timeout=0.25,allow_other,"
                                "threads=3,ro",
                                &o)
                  .ok());
  const std::string lines = OptionLines(o);
  EXPECT_NE(lines.find("\ncache_size=3145728\n"), std::string::npos) << lines;
  EXPECT_NE(lines.find("\nattr_timeout=0.25\n"), std::string::npos) << lines;
  EXPECT_NE(lines.find("\nro=1\n"), std::string::npos) << lines;
  EXPECT_EQ(lines.find("cache_bytes"), std::string::npos) << "older names are not shown";
  // Each line is a valid mount option that sets the same value.
  MountOptions back;
  std::istringstream in(lines);
  size_t n = 0;
  for (std::string line; std::getline(in, line); ++n) {
    ASSERT_TRUE(ParseMountOption(line, &back).ok()) << line;
  }
  EXPECT_EQ(n, OptionTable().size());
  EXPECT_EQ(OptionLines(back), lines);
}

TEST(OptionTableTest, TheMetaUrlIsTextAndShownWithoutItsPassword) {
  MountOptions o;
  ASSERT_TRUE(ParseMountOptions("meta=postgresql://trainer:s3cret@db:5433/ckpt?sslmode=require,"
                                "threads=3",
                                &o)
                  .ok());
  EXPECT_EQ(o.store.meta, "postgresql://trainer:s3cret@db:5433/ckpt?sslmode=require");
  EXPECT_EQ(o.threads, 3u);
  const std::string lines = OptionLines(o);
  EXPECT_NE(lines.find("meta=postgresql://trainer:***@db:5433/ckpt?sslmode=require\n"),
            std::string::npos)
      << lines;
  EXPECT_EQ(lines.find("s3cret"), std::string::npos) << lines;
  ASSERT_TRUE(ParseMountOptions("meta=postgresql:///ckpt?host=/run/pg&password=pw", &o).ok());
  EXPECT_EQ(OptionLines(o).find("=pw"), std::string::npos) << OptionLines(o);
  EXPECT_EQ(ParseMountOptions("meta", &o).code(), EINVAL);
}

TEST(OptionTableTest, TheDataUrlAndItsTimeoutReachTheStore) {
  MountOptions o;
  ASSERT_TRUE(ParseMountOptions("data=rados://checkpoints/team-a,data_timeout=5", &o).ok());
  EXPECT_EQ(o.store.data, "rados://checkpoints/team-a");
  EXPECT_EQ(o.store.data_timeout, 5.0);
  const std::string lines = OptionLines(o);
  EXPECT_NE(lines.find("data=rados://checkpoints/team-a\n"), std::string::npos) << lines;
  EXPECT_NE(lines.find("data_timeout=5"), std::string::npos) << lines;
  EXPECT_EQ(ParseMountOptions("data", &o).code(), EINVAL);
  EXPECT_EQ(ParseMountOptions("data_timeout=soon", &o).code(), EINVAL);
}

TEST(OptionTableTest, DefaultsAreTheMountsDefaults) {
  const MountOptions d;
  auto human = [&](std::string_view name) {
    const OptionSpec* spec = FindOption(name);
    return OptionValueHuman(*spec, spec->field.get(d));
  };
  EXPECT_EQ(human("coalesce_gap"), "256K");
  EXPECT_EQ(human("cache_size"), "128M");
  EXPECT_EQ(human("segment_size"), "1G");
  EXPECT_EQ(human("compact_dead"), "1G");  // background compaction on for mounts
  EXPECT_EQ(human("free_empty"), "on");
  EXPECT_EQ(human("ro"), "off");
  EXPECT_EQ(human("threads"), "16");
  EXPECT_EQ(human("attr_timeout"), "3600");
  EXPECT_EQ(human("negative_timeout"), "3600");
  EXPECT_EQ(human("readahead"), "1M (16M with data in an object store)");
  EXPECT_EQ(MountOptions::ReadaheadFor(false), 1u << 20);
  EXPECT_EQ(MountOptions::ReadaheadFor(true), 16u << 20);
}

TEST(OptionTableTest, AccessTimeOptionsFollowTheKernelsOrder) {
  struct Case {
    const char* options;
    AtimeMode want;
  };
  for (const Case& c : {Case{"", AtimeMode::kRelative}, Case{"relatime", AtimeMode::kRelative},
                        Case{"noatime", AtimeMode::kNever},
                        Case{"strictatime", AtimeMode::kStrict},
                        Case{"noatime,atime", AtimeMode::kRelative},
                        Case{"strictatime,atime", AtimeMode::kStrict},
                        Case{"strictatime,nostrictatime", AtimeMode::kRelative},
                        Case{"noatime,strictatime", AtimeMode::kStrict},
                        Case{"strictatime,relatime", AtimeMode::kRelative},
                        Case{"relatime=0", AtimeMode::kStrict}}) {
    MountOptions o;
    ASSERT_TRUE(ParseMountOptions(c.options, &o).ok()) << c.options;
    EXPECT_EQ(o.atime, c.want) << c.options;
    // The config lines read back as the same rule.
    MountOptions back;
    std::istringstream in(OptionLines(o));
    for (std::string line; std::getline(in, line);) ASSERT_TRUE(ParseMountOption(line, &back).ok());
    EXPECT_EQ(back.atime, c.want) << c.options;
  }
  EXPECT_EQ(AtimeRuleOf(AtimeMode::kRelative), engine::AtimeRule::kRelative);
  EXPECT_EQ(AtimeRuleOf(AtimeMode::kStrict), engine::AtimeRule::kAlways);
  EXPECT_EQ(AtimeRuleOf(AtimeMode::kNever), std::nullopt);
  MountOptions o;
  ASSERT_TRUE(ParseMountOptions("nodiratime", &o).ok());
  EXPECT_TRUE(o.nodiratime);
  ASSERT_TRUE(ParseMountOptions("diratime", &o).ok());
  EXPECT_FALSE(o.nodiratime);
}

TEST(OptionTableTest, FstabOptionsAreAcceptedAndIgnored) {
  MountOptions o;
  ASSERT_TRUE(ParseMountOptions("defaults,auto,noauto,_netdev,nofail,user,users,nouser,owner,"
                                "group,user=alice,comment=systemd.automount,x-systemd.device-"
                                "timeout=10s,x-gvfs-show",
                                &o)
                  .ok());
  EXPECT_EQ(OptionLines(o), OptionLines(MountOptions()));
  for (const char* bad : {"defaults=1", "nofail=yes", "comment", "_netdev=0", "xfoo", "x"}) {
    engine::Status st = ParseMountOption(bad, &o);
    EXPECT_EQ(st.code(), EINVAL) << bad;
    EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
  }
  EXPECT_NE(OptionsMarkdown().find("`_netdev`"), std::string::npos);
  EXPECT_NE(MountOptionsHelp().find("x-*"), std::string::npos);
}

TEST(OptionTableTest, HelpNamesEveryOption) {
  const std::string help = MountOptionsHelp();
  for (const OptionSpec& spec : OptionTable()) {
    EXPECT_NE(help.find("  " + std::string(spec.name)), std::string::npos) << spec.name;
  }
  EXPECT_NE(help.find("cache_bytes for cache_size"), std::string::npos) << help;
  EXPECT_EQ(help.find('`'), std::string::npos) << "Markdown in the terminal help";
  std::istringstream in(help);
  for (std::string line; std::getline(in, line);) EXPECT_LE(line.size(), 80u) << line;
  EXPECT_TRUE(IsSizeOption("cache_size"));
  EXPECT_TRUE(IsSizeOption("cache_bytes"));
  EXPECT_FALSE(IsSizeOption("threads"));
  EXPECT_FALSE(IsSizeOption("nothing"));
}

TEST(CompactRequestTest, ParsesRatioAndDryRun) {
  auto r = ParseCompactRequest("0.3");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r->dead_ratio, 0.3);
  EXPECT_FALSE(r->dry_run);
  r = ParseCompactRequest("1 dry_run");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r->dead_ratio, 1.0);
  EXPECT_TRUE(r->dry_run);
  r = ParseCompactRequest("0  dry_run=0");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->dry_run);
  for (const char* bad : {"", "lots", "1.5", "-0.1", "0.3 fast", "0.3x", "nan"}) {
    EXPECT_EQ(ParseCompactRequest(bad).status().code(), EINVAL) << bad;
  }
}

// Run-time changes through the option table reach an open store.
class RuntimeOptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ckptfs-option-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    engine::StoreOptions o;
    o.min_free = 0;
    o.holder = "option table test";
    auto store = engine::Store::Open(dir_ + "/store", o);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
  }
  void TearDown() override {
    if (store_) {
      EXPECT_TRUE(store_->Close().ok());
    }
    store_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string dir_;
  std::unique_ptr<engine::Store> store_;
};

TEST_F(RuntimeOptionTest, NamesAliasesAndFixedSettings) {
  ASSERT_TRUE(ApplyRuntimeOption(*store_, "coalesce_gap", "0").ok());
  EXPECT_EQ(store_->GetOptions().coalesce_gap, 0u);
  ASSERT_TRUE(ApplyRuntimeOption(*store_, "cache_size", "2M").ok());
  EXPECT_EQ(store_->GetOptions().cache_size, 2u << 20);
  ASSERT_TRUE(ApplyRuntimeOption(*store_, "cache_bytes", "1048576").ok());
  EXPECT_EQ(store_->GetOptions().cache_size, 1u << 20);
  ASSERT_TRUE(ApplyRuntimeOption(*store_, "compression_level", "4").ok());
  EXPECT_EQ(store_->GetOptions().compression, 4);
  ASSERT_TRUE(ApplyRuntimeOption(*store_, "compression", "0").ok());
  EXPECT_EQ(store_->GetOptions().compression, 0);

  const engine::StoreOptions before = store_->GetOptions();
  for (const auto& [key, value] : std::vector<std::pair<const char*, const char*>>{
           {"segment_size", "4M"},
           {"segment_target_bytes", "4M"},
           {"threads", "4"},
           {"ro", "1"},
           {"rw", "1"},
           {"no_such_key", "1"},
           {"", "1"},
           {"compression", "23"},
           {"coalesce_max", "abc"},
           {"coalesce_max", ""},
       }) {
    EXPECT_EQ(ApplyRuntimeOption(*store_, key, value).code(), EINVAL) << key << "=" << value;
  }
  EXPECT_TRUE(store_->GetOptions() == before) << "a refused change changed something";
}

}  // namespace
}  // namespace ckptfs::options
