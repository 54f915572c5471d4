#include "engine/store_mode.h"

#include <limits>

#include "format/format.h"

namespace ckptfs::engine {
namespace {

class EmbeddedMode final : public StoreMode {
 public:
  bool MountsHoldHosts() const override { return false; }
  bool OthersWrite() const override { return false; }
  bool RemoteIndex() const override { return false; }
  Result<std::unique_ptr<meta::Txn>> BeginChange(meta::Kv*) const override {
    return std::unique_ptr<meta::Txn>();
  }
  bool ChangesExclusive() const override { return true; }
  bool InoBlocksAlone() const override { return false; }
  std::string OrphanValue() const override { return ""; }
  double CacheSeconds() const override { return std::numeric_limits<double>::infinity(); }
  bool NeedsUpkeep() const override { return false; }
};

class SharedMode final : public StoreMode {
 public:
  explicit SharedMode(const HostSession* host) : host_(host) {}

  bool MountsHoldHosts() const override { return true; }
  bool OthersWrite() const override { return true; }
  bool RemoteIndex() const override { return true; }
  Result<std::unique_ptr<meta::Txn>> BeginChange(meta::Kv* kv) const override {
    return kv->Begin();
  }
  bool ChangesExclusive() const override { return false; }
  bool InoBlocksAlone() const override { return true; }
  std::string OrphanValue() const override {
    std::string v;
    if (host_->id() != 0) format::PutLE32(&v, host_->id());
    return v;
  }
  double CacheSeconds() const override { return host_->SoloSecondsLeft(); }
  bool NeedsUpkeep() const override { return true; }

 private:
  const HostSession* const host_;
};

}  // namespace

std::unique_ptr<StoreMode> StoreMode::Embedded() { return std::make_unique<EmbeddedMode>(); }

std::unique_ptr<StoreMode> StoreMode::Shared(const HostSession* host) {
  return std::make_unique<SharedMode>(host);
}

}  // namespace ckptfs::engine
