// A key-value store over TCP for the ranks of a torchrun job to meet at MASTER_ADDR:MASTER_PORT.
//
// The wire format is PyTorch's c10d TCPStore (torch 1.13, Debian's python3-torch): one query byte,
// then strings and byte vectors as a little-endian 64-bit length and the bytes. Only the queries
// used here: SET (0: key, value), GET (2: key -> value), ADD (3: key, int64 -> int64) and CHECK
// (4: key count, keys -> 0 ready / 1 not ready). Speaking it lets the ranks use the store torchrun's
// agent already hosts at MASTER_PORT under the static rendezvous (TORCHELASTIC_USE_AGENT_STORE=True);
// under the c10d rendezvous nothing listens there and rank 0 hosts a TcpStoreServer of its own.
// (Debian's Gloo, a 2022 snapshot, has file, hash and Redis stores but no TCP store.)
//
// Waits poll CHECK with back-off until a deadline (a timed-out c10d WAIT would leave its answer on
// the connection), so every wait is bounded and a timeout says which keys were missing.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"

namespace gpt {

class TcpStoreClient {
 public:
  // Connects to host:port, retrying until `timeout_seconds` pass (rank 0 may start later).
  static absl::StatusOr<std::unique_ptr<TcpStoreClient>> connect(const std::string& host, int port,
                                                                 double timeout_seconds);
  ~TcpStoreClient();
  TcpStoreClient(const TcpStoreClient&) = delete;
  TcpStoreClient& operator=(const TcpStoreClient&) = delete;

  // Every call fails (a status naming the store) when the connection breaks.
  absl::Status set(const std::string& key, const std::string& value);
  absl::Status add(const std::string& key, int64_t delta, int64_t* result);
  // Whether every key exists.
  absl::StatusOr<bool> check(const std::vector<std::string>& keys);
  // Waits until every key exists; DeadlineExceeded at `deadline` (the message names the first
  // missing key).
  absl::Status wait(const std::vector<std::string>& keys, std::chrono::steady_clock::time_point deadline);
  // wait() on one key, then its value.
  absl::StatusOr<std::string> get(const std::string& key, std::chrono::steady_clock::time_point deadline);

  const std::string& address() const { return address_; }

 private:
  TcpStoreClient(int fd, std::string address) : fd_(fd), address_(std::move(address)) {}
  absl::Status send_all(const std::string& bytes);
  absl::Status receive_all(void* data, size_t bytes);
  absl::Status broken(const char* what) const;

  int fd_;
  std::string address_;
};

// The store's server side, for rank 0 when no store listens at MASTER_PORT: a thread that accepts
// connections and answers the queries above until destroyed. A client that sets a key ending in
// "/client/<rank>" names its connection; when that connection closes (its process ended, killed
// or not) the server sets the same key with "/closed/<rank>", which lets waiting ranks tell a rank
// that is gone from a slow one without waiting for the timeout.
class TcpStoreServer {
 public:
  // Binds MASTER_PORT on every interface and starts serving.
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> start(int port);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

 private:
  TcpStoreServer(int listen_fd, int wake_fd[2]);
  void serve();
  // Handles the complete queries buffered for one connection; false when it sent garbage.
  bool answer(int fd, std::string& pending);

  int listen_fd_;
  int wake_read_, wake_write_;  // a pipe that ends serve()
  std::map<std::string, std::string> values_;
  std::map<int, std::string> closed_keys_;  // by connection: the key set when it closes
  std::thread thread_;
};

}  // namespace gpt
