#include "peer/server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "peer/wire.h"

namespace ckptfs::peer {
namespace {

// Open files a connection keeps between its requests; one goes (the first
// by name) when a new one would pass it.
constexpr size_t kOpenFilesPerConnection = 16;

}  // namespace

Result<std::unique_ptr<Server>> Server::Start(ServerOptions options) {
  if (options.secret.size() < kMinSecretBytes) {
    return Status(EINVAL, "peer server: the secret has " + std::to_string(options.secret.size()) +
                              " bytes, at least " + std::to_string(kMinSecretBytes));
  }
  if (options.store_dir.empty()) return Status(EINVAL, "peer server: no store directory");
  if (!options.env) options.env = io::Env::Posix();
  if (options.max_connections < 1) options.max_connections = 1;
  std::unique_ptr<Server> s(new Server(std::move(options)));
  CKPTFS_ASSIGN_OR_RETURN(s->listen_fd_, Listen(s->options_.listen, &s->address_));
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) return Status(errno, "peer server: pipe");
  s->wake_read_ = Fd(p[0]);
  s->wake_write_ = Fd(p[1]);
  s->acceptor_ = std::thread([srv = s.get()] { srv->AcceptLoop(); });
  return s;
}

Server::Server(ServerOptions options) : options_(std::move(options)) {}

Server::~Server() { Stop(); }

ServerStats Server::stats() const {
  ServerStats s;
  s.connections = connections_.load();
  s.refused = refused_.load();
  s.requests = requests_.load();
  s.bad_requests = bad_requests_.load();
  s.bytes_served = bytes_served_.load();
  return s;
}

void Server::Stop() {
  if (stopped_.exchange(true)) return;
  char b = 1;
  (void)!::write(wake_write_.get(), &b, 1);
  if (acceptor_.joinable()) acceptor_.join();
  std::map<uint64_t, Connection> live;
  {
    MutexLock l(&mu_);
    for (auto& [id, c] : live_) ::shutdown(c.fd, SHUT_RDWR);
    live.swap(live_);
    finished_.clear();
  }
  for (auto& [id, c] : live) c.thread.join();
  listen_fd_.Reset();
}

void Server::ReapFinished() {
  std::vector<std::thread> done;
  {
    MutexLock l(&mu_);
    for (uint64_t id : finished_) {
      auto it = live_.find(id);
      if (it == live_.end()) continue;
      done.push_back(std::move(it->second.thread));
      live_.erase(it);
    }
    finished_.clear();
  }
  for (std::thread& t : done) t.join();
}

void Server::AcceptLoop() {
  for (;;) {
    pollfd p[2] = {{listen_fd_.get(), POLLIN, 0}, {wake_read_.get(), POLLIN, 0}};
    int r = ::poll(p, 2, 1000);
    if (r < 0 && errno != EINTR) return;
    if (p[1].revents & POLLIN) return;
    ReapFinished();
    if (r <= 0 || !(p[0].revents & POLLIN)) continue;
    int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    MutexLock l(&mu_);
    if (live_.size() >= static_cast<size_t>(options_.max_connections)) {
      refused_++;  // counted before the client can see the close
      ::close(fd);
      continue;
    }
    const uint64_t id = next_id_++;
    Connection& c = live_[id];
    c.fd = fd;
    c.thread = std::thread([this, id, fd] { Serve(id, fd); });
  }
}

void Server::Serve(uint64_t id, int fd) {
  if (Admit(fd)) {
    connections_++;
    std::map<std::string, std::unique_ptr<io::File>> open;
    while (!stopped_.load() && Answer(fd, &open)) {
    }
  }
  // The descriptor is closed here; the acceptor (or Stop) joins the thread.
  MutexLock l(&mu_);
  auto it = live_.find(id);
  if (it != live_.end()) {
    it->second.fd = -1;
    finished_.push_back(id);
  }
  ::close(fd);
}

bool Server::Admit(int fd) {
  Hello hello;
  if (!RandomBytes(hello.server_nonce.data(), hello.server_nonce.size()).ok() ||
      !WriteFull(fd, EncodeHello(hello), options_.io_timeout_ms).ok()) {
    refused_++;
    return false;
  }
  std::string b(kProofBytes, '\0');
  Proof proof;
  if (!ReadFull(fd, b.data(), b.size(), options_.io_timeout_ms, wake_read_.get()).ok() ||
      !DecodeProof(b, &proof).ok()) {
    refused_++;
    return false;
  }
  Verdict v;
  const Mac want = ClientMac(options_.secret, hello.server_nonce, proof.client_nonce);
  if (!SameMac(proof.client_mac, want)) {
    v.status = EACCES;  // and no proof of ours
    refused_++;         // counted before the client can see the verdict
    (void)WriteFull(fd, EncodeVerdict(v), options_.io_timeout_ms);
    return false;
  }
  v.server_mac = ServerMac(options_.secret, proof.client_nonce, hello.server_nonce);
  return WriteFull(fd, EncodeVerdict(v), options_.io_timeout_ms).ok();
}

bool Server::Answer(int fd, std::map<std::string, std::unique_ptr<io::File>>* open) {
  // Between requests a connection waits as long as the client likes.
  char len2[2];
  if (!ReadFull(fd, len2, 2, -1, wake_read_.get()).ok()) return false;
  std::string b(RequestNameBytes(std::string_view(len2, 2)) + kRequestTailBytes, '\0');
  if (!ReadFull(fd, b.data(), b.size(), options_.io_timeout_ms, wake_read_.get()).ok()) {
    return false;
  }
  requests_++;
  // A reply with no bytes: the errno `status`.
  auto fail = [&](int status) {
    return WriteFull(fd, EncodeReplyHeader({static_cast<uint32_t>(status), 0}),
                     options_.io_timeout_ms)
        .ok();
  };
  Request req;
  int bad = 0;
  if (!DecodeRequest(b, &req).ok()) {
    bad = EPROTO;
  } else if (!IsServedName(req.name)) {
    bad = EACCES;
  } else if (req.length > std::min(options_.max_read, kMaxReadBytes)) {
    bad = EINVAL;
  }
  if (bad != 0) {
    bad_requests_++;
    return fail(bad);
  }
  // The reply in one buffer: its header, then the bytes read in place.
  std::string out(kReplyHeaderBytes + req.length, '\0');
  Result<size_t> got = size_t{0};
  if (options_.read) {
    got = options_.read(req.name, req.offset, req.length, out.data() + kReplyHeaderBytes);
  } else {
    auto it = open->find(req.name);
    if (it == open->end()) {
      Result<std::unique_ptr<io::File>> f =
          options_.env->Open(options_.store_dir + "/" + req.name, io::OpenMode::kRead);
      if (!f.ok()) return fail(f.status().code());
      if (open->size() >= kOpenFilesPerConnection) open->erase(open->begin());
      it = open->emplace(req.name, std::move(f).value()).first;
    }
    got = it->second->ReadAt(req.offset, req.length, out.data() + kReplyHeaderBytes);
    if (!got.ok()) open->erase(it);
  }
  if (!got.ok()) return fail(got.status().code());
  out.resize(kReplyHeaderBytes + *got);
  const std::string header = EncodeReplyHeader({0, static_cast<uint32_t>(*got)});
  out.replace(0, header.size(), header);
  bytes_served_ += *got;  // counted before the client can see them
  return WriteFull(fd, out, options_.io_timeout_ms).ok();
}

}  // namespace ckptfs::peer
