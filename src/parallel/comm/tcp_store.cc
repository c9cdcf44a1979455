#include "parallel/comm/tcp_store.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gpt {
namespace {

using Clock = std::chrono::steady_clock;

// c10d TCPStore's query and answer bytes (torch/csrc/distributed/c10d/TCPStore.cpp, 1.13).
enum Query : uint8_t { kSet = 0, kGet = 2, kAdd = 3, kCheck = 4 };
constexpr uint8_t kReady = 0, kNotReady = 1;

void put_u64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof(v)); }
void put_string(std::string& out, const std::string& s) {
  put_u64(out, s.size());
  out += s;
}

void pause_for(std::chrono::microseconds& pause) {
  std::this_thread::sleep_for(pause);
  pause = std::min(std::chrono::microseconds(50000), pause * 2);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpStoreClient>> TcpStoreClient::connect(const std::string& host, int port,
                                                                         double timeout_seconds) {
  const std::string address = absl::StrCat(host, ":", port);
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds));
  std::string last_error = "no attempt";
  auto pause = std::chrono::microseconds(2000);
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int resolved = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
    if (resolved != 0) {
      return absl::InvalidArgumentError(absl::StrCat("MASTER_ADDR ", host, " does not resolve: ",
                                                     gai_strerror(resolved)));
    }
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        freeaddrinfo(found);
        const int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        // A store that stops answering mid-query must not hang the rank: each answer is bounded.
        timeval bound{.tv_sec = static_cast<time_t>(std::max(5.0, timeout_seconds)), .tv_usec = 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof(bound));
        return std::unique_ptr<TcpStoreClient>(new TcpStoreClient(fd, address));
      }
      last_error = std::strerror(errno);
      close(fd);
    }
    freeaddrinfo(found);
    if (Clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the key-value store at MASTER_ADDR:MASTER_PORT ", address, " did not accept a connection within ",
          timeout_seconds, " s (--distributed-timeout-minutes; last error: ", last_error,
          "): is rank 0 up, and is MASTER_PORT the port torchrun gave it?"));
    }
    pause_for(pause);
  }
}

TcpStoreClient::~TcpStoreClient() { close(fd_); }

absl::Status TcpStoreClient::broken(const char* what) const {
  return absl::UnavailableError(absl::StrCat("the key-value store at ", address_, " stopped answering (", what,
                                             "): rank 0, which hosts it, has probably ended"));
}

absl::Status TcpStoreClient::send_all(const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return broken(n < 0 ? std::strerror(errno) : "closed");
    }
    sent += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status TcpStoreClient::receive_all(void* data, size_t bytes) {
  size_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::recv(fd_, static_cast<char*>(data) + got, bytes - got, 0);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return broken(n < 0 ? std::strerror(errno) : "closed");
    }
    got += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status TcpStoreClient::set(const std::string& key, const std::string& value) {
  std::string query(1, static_cast<char>(kSet));
  put_string(query, key);
  put_string(query, value);
  return send_all(query);
}

absl::Status TcpStoreClient::add(const std::string& key, int64_t delta, int64_t* result) {
  std::string query(1, static_cast<char>(kAdd));
  put_string(query, key);
  put_u64(query, static_cast<uint64_t>(delta));
  GPT_RETURN_IF_ERROR(send_all(query));
  return receive_all(result, sizeof(*result));
}

absl::StatusOr<bool> TcpStoreClient::check(const std::vector<std::string>& keys) {
  std::string query(1, static_cast<char>(kCheck));
  put_u64(query, keys.size());
  for (const std::string& key : keys) put_string(query, key);
  GPT_RETURN_IF_ERROR(send_all(query));
  uint8_t answer = kNotReady;
  GPT_RETURN_IF_ERROR(receive_all(&answer, 1));
  return answer == kReady;
}

absl::Status TcpStoreClient::wait(const std::vector<std::string>& keys, Clock::time_point deadline) {
  auto pause = std::chrono::microseconds(100);
  while (true) {
    GPT_ASSIGN_OR_RETURN(const bool ready, check(keys));
    if (ready) return absl::OkStatus();
    if (Clock::now() > deadline) {
      // Which one, for the message: the first key still missing.
      for (const std::string& key : keys) {
        GPT_ASSIGN_OR_RETURN(const bool there, check({key}));
        if (!there) return absl::DeadlineExceededError(absl::StrCat("key '", key, "' never appeared"));
      }
      return absl::DeadlineExceededError("keys never appeared");
    }
    pause_for(pause);
  }
}

absl::StatusOr<std::string> TcpStoreClient::get(const std::string& key, Clock::time_point deadline) {
  GPT_RETURN_IF_ERROR(wait({key}, deadline));
  std::string query(1, static_cast<char>(kGet));
  put_string(query, key);
  GPT_RETURN_IF_ERROR(send_all(query));
  uint64_t length = 0;
  GPT_RETURN_IF_ERROR(receive_all(&length, sizeof(length)));
  std::string value(length, '\0');
  GPT_RETURN_IF_ERROR(receive_all(value.data(), length));
  return value;
}

// ---- server ----

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::start(int port) {
  const int fd = socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  const int one = 1, zero = 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));  // IPv4 clients too
  sockaddr_in6 address{};
  address.sin6_family = AF_INET6;
  address.sin6_addr = in6addr_any;
  address.sin6_port = htons(static_cast<uint16_t>(port));
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 || listen(fd, 1024) != 0) {
    const std::string error = std::strerror(errno);
    close(fd);
    return absl::UnavailableError(absl::StrCat("rank 0 cannot host the key-value store on MASTER_PORT ", port, ": ",
                                               error));
  }
  int wake[2];
  if (pipe(wake) != 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  return std::unique_ptr<TcpStoreServer>(new TcpStoreServer(fd, wake));
}

TcpStoreServer::TcpStoreServer(int listen_fd, int wake_fd[2])
    : listen_fd_(listen_fd), wake_read_(wake_fd[0]), wake_write_(wake_fd[1]) {
  thread_ = std::thread([this] { serve(); });
}

TcpStoreServer::~TcpStoreServer() {
  const char stop = 1;
  [[maybe_unused]] const ssize_t n = write(wake_write_, &stop, 1);
  thread_.join();
  close(listen_fd_);
  close(wake_read_);
  close(wake_write_);
}

namespace {

// Reads a 64-bit length-prefixed string at `at`; false when the bytes are not all there yet.
bool take_string(const std::string& in, size_t& at, std::string& out) {
  if (in.size() < at + 8) return false;
  uint64_t length = 0;
  std::memcpy(&length, in.data() + at, 8);
  if (in.size() < at + 8 + length) return false;
  out.assign(in, at + 8, length);
  at += 8 + length;
  return true;
}

bool take_u64(const std::string& in, size_t& at, uint64_t& out) {
  if (in.size() < at + 8) return false;
  std::memcpy(&out, in.data() + at, 8);
  at += 8;
  return true;
}

void send_bytes(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0 && errno != EINTR) return;  // the client is gone; poll() will see it hang up
    if (n > 0) sent += static_cast<size_t>(n);
  }
}

}  // namespace

bool TcpStoreServer::answer(int fd, std::string& pending) {
  while (!pending.empty()) {
    size_t at = 1;
    std::string key, value, reply;
    uint64_t word = 0;
    switch (static_cast<uint8_t>(pending[0])) {
      case kSet:
        if (!take_string(pending, at, key) || !take_string(pending, at, value)) return true;
        // A client names itself with ".../client/<rank>"; when its connection closes (the process
        // ended), ".../closed/<rank>" appears, so the others stop waiting for it at once.
        if (const size_t at = key.rfind("/client/"); at != std::string::npos) {
          closed_keys_[fd] = key.substr(0, at) + "/closed/" + key.substr(at + 8);
        }
        values_[key] = std::move(value);
        break;
      case kGet: {
        if (!take_string(pending, at, key)) return true;
        auto found = values_.find(key);
        put_string(reply, found == values_.end() ? std::string() : found->second);
        break;
      }
      case kAdd: {
        if (!take_string(pending, at, key) || !take_u64(pending, at, word)) return true;
        auto found = values_.find(key);
        int64_t total = 0;
        if (found != values_.end() && !absl::SimpleAtoi(found->second, &total)) return false;  // not a counter
        total += static_cast<int64_t>(word);
        values_[key] = std::to_string(total);  // as c10d keeps counters: GET returns the decimal text
        put_u64(reply, static_cast<uint64_t>(total));
        break;
      }
      case kCheck: {
        if (!take_u64(pending, at, word)) return true;
        bool ready = true;
        for (uint64_t i = 0; i < word; ++i) {
          if (!take_string(pending, at, key)) return true;
          ready = ready && values_.count(key) > 0;
        }
        reply.assign(1, static_cast<char>(ready ? kReady : kNotReady));
        break;
      }
      default: return false;
    }
    pending.erase(0, at);
    if (!reply.empty()) send_bytes(fd, reply);
  }
  return true;
}

void TcpStoreServer::serve() {
  std::vector<pollfd> fds = {{wake_read_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
  std::map<int, std::string> pending;  // bytes received and not yet a whole query, by connection
  while (true) {
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[0].revents != 0) break;
    if (fds[1].revents & POLLIN) {
      const int client = accept(listen_fd_, nullptr, nullptr);
      if (client >= 0) {
        const int one = 1;
        setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        fds.push_back({client, POLLIN, 0});
      }
    }
    for (size_t i = 2; i < fds.size();) {
      bool keep = true;
      if (fds[i].revents != 0) {
        char buffer[65536];
        const ssize_t n = recv(fds[i].fd, buffer, sizeof(buffer), 0);
        if (n > 0) {
          std::string& bytes = pending[fds[i].fd];
          bytes.append(buffer, static_cast<size_t>(n));
          keep = answer(fds[i].fd, bytes);
        } else {
          keep = n < 0 && errno == EINTR;
        }
      }
      if (keep) {
        ++i;
      } else {
        pending.erase(fds[i].fd);
        if (auto named = closed_keys_.find(fds[i].fd); named != closed_keys_.end()) {
          values_[named->second] = "";
          closed_keys_.erase(named);
        }
        close(fds[i].fd);
        fds.erase(fds.begin() + static_cast<long>(i));
      }
    }
  }
  for (size_t i = 2; i < fds.size(); ++i) close(fds[i].fd);
}

}  // namespace gpt
