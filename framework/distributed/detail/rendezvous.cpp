#include "framework/distributed/detail/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <utility>

#include "framework/tensor/error.h"

namespace qat::distributed::detail {

namespace {

using Clock = std::chrono::steady_clock;

// Wire format, both ways: [op u8][key length u32][key][value length u32][value].
enum Op : std::uint8_t { kSet = 1, kGet = 2, kSetIfAbsent = 3 };

std::string errno_text() { return std::strerror(errno); }

void append_u32(std::vector<char>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint32_t read_u32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<std::uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

std::vector<char> message(Op op, const std::string& key, const std::vector<char>& value) {
  std::vector<char> m{static_cast<char>(op)};
  append_u32(m, static_cast<std::uint32_t>(key.size()));
  m.insert(m.end(), key.begin(), key.end());
  append_u32(m, static_cast<std::uint32_t>(value.size()));
  m.insert(m.end(), value.begin(), value.end());
  return m;
}

// Sends all of `data`; false when the peer is gone.
bool send_all(int fd, const char* data, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::send(fd, data, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    data += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

int milliseconds_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::max<std::int64_t>(left.count(), 0));
}

}  // namespace

// ---- server ---------------------------------------------------------------------------------

RendezvousServer::RendezvousServer(int port) {
  constexpr const char* fn = "init_process_group";
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  QAT_REQUIRE(listen_fd_ >= 0, fn, "rank 0 cannot open a socket: ", errno_text());
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_, 128) != 0) {
    const std::string why = errno_text();
    ::close(listen_fd_);
    throw Error(qat::detail::concat(fn, ": rank 0 cannot serve the rendezvous on MASTER_PORT ", port,
                                    ": ", why, " (another job on this port? pick another MASTER_PORT)"));
  }
  QAT_REQUIRE(::pipe(wake_) == 0, fn, "cannot create a pipe: ", errno_text());
  thread_ = std::thread([this] { serve(); });
}

RendezvousServer::~RendezvousServer() {
  const char stop = 0;
  (void)!::write(wake_[1], &stop, 1);
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void RendezvousServer::serve() {
  struct Client {
    int fd;
    std::vector<char> in;
  };
  std::vector<Client> clients;
  std::map<std::string, std::vector<char>> values;
  std::multimap<std::string, int> waiting;  // key -> fd of a get that waits for it
  auto reply = [](int fd, const std::vector<char>& value) {
    std::vector<char> m;
    append_u32(m, static_cast<std::uint32_t>(value.size()));
    m.insert(m.end(), value.begin(), value.end());
    send_all(fd, m.data(), m.size());
  };
  for (;;) {
    std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    for (const Client& c : clients) fds.push_back({c.fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[0].revents) break;
    if (fds[1].revents & POLLIN) {
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd >= 0) clients.push_back({fd, {}});
    }
    for (std::size_t i = 2; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      Client& c = clients[i - 2];
      char buf[4096];
      const ssize_t k = ::recv(c.fd, buf, sizeof buf, 0);
      if (k <= 0) {  // the rank left: forget its pending gets
        for (auto it = waiting.begin(); it != waiting.end();)
          it = it->second == c.fd ? waiting.erase(it) : ++it;
        ::close(c.fd);
        c.fd = -1;
        continue;
      }
      c.in.insert(c.in.end(), buf, buf + k);
      // every complete message in the buffer
      for (;;) {
        if (c.in.size() < 5) break;
        const std::uint32_t klen = read_u32(c.in.data() + 1);
        if (c.in.size() < 9 + klen) break;
        const std::uint32_t vlen = read_u32(c.in.data() + 5 + klen);
        if (c.in.size() < 9 + klen + vlen) break;
        const auto op = static_cast<Op>(c.in[0]);
        std::string key(c.in.data() + 5, klen);
        std::vector<char> value(c.in.begin() + 9 + klen, c.in.begin() + 9 + klen + vlen);
        c.in.erase(c.in.begin(), c.in.begin() + 9 + klen + vlen);
        if (op == kGet) {
          const auto it = values.find(key);
          if (it != values.end())
            reply(c.fd, it->second);
          else
            waiting.emplace(key, c.fd);
          continue;
        }
        const bool absent = values.find(key) == values.end();
        if (op == kSetIfAbsent) reply(c.fd, {absent ? '1' : '0'});
        if (op == kSet || absent) {
          values[key] = value;
          auto [b, e] = waiting.equal_range(key);
          for (auto it = b; it != e; ++it) reply(it->second, value);
          waiting.erase(b, e);
        }
      }
    }
    std::erase_if(clients, [](const Client& c) { return c.fd < 0; });
  }
  for (const Client& c : clients) ::close(c.fd);
}

// ---- client ---------------------------------------------------------------------------------

RendezvousClient::RendezvousClient(const std::string& host, int port, std::chrono::milliseconds timeout)
    : where_(host + ":" + std::to_string(port)), timeout_(timeout) {
  constexpr const char* fn = "init_process_group";
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  QAT_REQUIRE(rc == 0 && res != nullptr, fn, "MASTER_ADDR '", qat::detail::printable(host),
              "' does not resolve: ", ::gai_strerror(rc));
  const auto deadline = Clock::now() + timeout;
  std::string last = "no answer";
  while (fd_ < 0) {
    const int fd = ::socket(res->ai_family, res->ai_socktype, res->ai_protocol);
    if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
      fd_ = fd;
      break;
    }
    last = errno_text();
    if (fd >= 0) ::close(fd);
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::freeaddrinfo(res);
  QAT_REQUIRE(fd_ >= 0, fn, "cannot reach the rendezvous at MASTER_ADDR:MASTER_PORT = ", where_,
              " within ", timeout.count() / 1000.0, " s (", last,
              "); rank 0 serves it: is it running, and do MASTER_ADDR / MASTER_PORT name it?");
  const int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

RendezvousClient::~RendezvousClient() {
  if (fd_ >= 0) ::close(fd_);
}

void RendezvousClient::set(const std::string& key, const std::vector<char>& data) {
  const std::vector<char> m = message(kSet, key, data);
  QAT_REQUIRE(send_all(fd_, m.data(), m.size()), "init_process_group", "the rendezvous at ", where_,
              " closed the connection (rank 0 exited?)");
}

bool RendezvousClient::set_if_absent(const std::string& key, const std::vector<char>& data) {
  const std::vector<char> m = message(kSetIfAbsent, key, data);
  QAT_REQUIRE(send_all(fd_, m.data(), m.size()), "init_process_group", "the rendezvous at ", where_,
              " closed the connection (rank 0 exited?)");
  return get("", timeout_) == std::vector<char>{'1'};  // the reply to this request
}

std::vector<char> RendezvousClient::get(const std::string& key) { return get(key, timeout_); }

// An empty key only reads the next reply (set_if_absent's answer).
std::vector<char> RendezvousClient::get(const std::string& key, std::chrono::milliseconds timeout) {
  constexpr const char* fn = "init_process_group";
  if (!key.empty()) {
    const std::vector<char> m = message(kGet, key, {});
    QAT_REQUIRE(send_all(fd_, m.data(), m.size()), fn, "the rendezvous at ", where_,
                " closed the connection (rank 0 exited?)");
  }
  const auto deadline = Clock::now() + timeout;
  auto read_exact = [&](char* p, std::size_t n) {
    while (n > 0) {
      pollfd pfd{fd_, POLLIN, 0};
      const int r = ::poll(&pfd, 1, milliseconds_until(deadline));
      if (r < 0 && errno == EINTR) continue;
      QAT_REQUIRE(r > 0, fn, "timed out after ", timeout.count() / 1000.0, " s waiting for '",
                  qat::detail::printable(key), "' at the rendezvous ", where_,
                  " (a rank that never started or stopped before joining)");
      const ssize_t k = ::recv(fd_, p, n, 0);
      QAT_REQUIRE(k > 0, fn, "the rendezvous at ", where_,
                  " closed the connection (rank 0 exited?) while waiting for '",
                  qat::detail::printable(key), "'");
      p += k;
      n -= static_cast<std::size_t>(k);
    }
  };
  char len[4];
  read_exact(len, 4);
  std::vector<char> value(read_u32(len));
  read_exact(value.data(), value.size());
  return value;
}

void RendezvousClient::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void RendezvousClient::wait(const std::vector<std::string>& keys,
                            const std::chrono::milliseconds& timeout) {
  for (const std::string& key : keys) get(key, timeout);
}

std::vector<char> share_from_rank0(gloo::rendezvous::Store& store, int rank, const std::string& key,
                                   const std::function<std::vector<char>()>& make) {
  if (rank != 0) return store.get(key);
  std::vector<char> value = make();
  store.set(key, value);
  return value;
}

}  // namespace qat::distributed::detail
