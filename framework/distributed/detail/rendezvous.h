#pragma once
// The rendezvous of a Gloo group: a key-value store that rank 0 serves on MASTER_PORT and every
// rank (rank 0 too) reaches over TCP, as torchrun's TCPStore. It carries only the join: each
// rank's world size and Gloo's listening addresses; the collectives themselves go through Gloo's
// own transport. Gloo 0.5 (Debian 12) ships file and Redis stores but no TCP one.
#include <gloo/rendezvous/store.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace qat::distributed::detail {

/// Serves get / set / set-if-absent to the ranks until destroyed.
class RendezvousServer {
 public:
  /// Listens on `port` (all interfaces); throws qat::Error naming the port and errno's text.
  explicit RendezvousServer(int port);
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

 private:
  void serve();
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // a pipe that ends serve()
  std::thread thread_;
};

/// One rank's connection to the server; every wait is bounded by `timeout`.
class RendezvousClient : public gloo::rendezvous::Store {
 public:
  /// Connects, retrying until `timeout` (rank 0 may start later); throws qat::Error naming the
  /// address when nobody answers.
  RendezvousClient(const std::string& host, int port, std::chrono::milliseconds timeout);
  ~RendezvousClient() override;

  void set(const std::string& key, const std::vector<char>& data) override;
  /// Blocks until `key` is set; throws qat::Error after the timeout.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;
  /// Sets `key` unless it exists; returns whether this call set it.
  bool set_if_absent(const std::string& key, const std::vector<char>& data);

 private:
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout);
  int fd_ = -1;
  std::string where_;  // "host:port"
  std::chrono::milliseconds timeout_;
};

/// Rank 0's `make()` on every rank: rank 0 calls it and sets `key`, the others get the key
/// (waiting up to the store's timeout). How the NCCL unique id reaches every rank.
std::vector<char> share_from_rank0(gloo::rendezvous::Store& store, int rank, const std::string& key,
                                   const std::function<std::vector<char>()>& make);

}  // namespace qat::distributed::detail
