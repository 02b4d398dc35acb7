#include "framework/io/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>

#include "framework/io/checkpoint_error.h"

namespace qat::io {
namespace detail {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& path, const std::string& what, int err) {
  throw CheckpointError(path, "cannot save: " + what + ": " + std::strerror(err));
}

// A name no other writer (thread or process) picks: pid, a process-wide counter, the clock.
std::string temp_name(const fs::path& target) {
  static std::atomic<std::uint64_t> counter{0};
  const auto ticks = std::chrono::steady_clock::now().time_since_epoch().count();
  std::string name = ".";  // hidden, and never a valid checkpoint name the user picked
  name += target.filename().string();
  name += ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
          std::to_string(ticks % 1000000007);
  return name;
}

// When process `pid` started (its /proc entry's time), or nullopt if there is no such process.
std::optional<fs::file_time_type> process_start(long pid) {
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return std::nullopt;
  std::error_code ec;
  const auto t = fs::last_write_time("/proc/" + std::to_string(pid), ec);
  if (ec) return fs::file_time_type::min();  // alive but unreadable: treat as started long ago
  return t;
}

// Removes `.NAME.tmp-<pid>-...` files of `target` whose writer is gone: no process `pid`, or a
// process that started after the file was last written (the pid was reused). Best effort: a
// file that cannot be read or removed is left.
void remove_stale_temps(const fs::path& target, const fs::path& dir) {
  const std::string prefix = "." + target.filename().string() + ".tmp-";
  const long self = static_cast<long>(::getpid());
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string rest = name.substr(prefix.size());
    const std::size_t dash = rest.find('-');
    if (dash == 0 || dash == std::string::npos || dash > 9 ||
        rest.find_first_not_of("0123456789") != dash)
      continue;
    const long pid = std::stol(rest.substr(0, dash));
    if (pid == self) continue;
    std::error_code tec;
    const auto written = fs::last_write_time(it->path(), tec);
    if (tec) continue;
    const auto started = process_start(pid);
    if (!started || *started > written) fs::remove(it->path(), tec);
  }
}

/// Owns the temporary file until it is renamed: closes it, and unlinks it unless `keep`.
struct TempFile {
  std::string path;
  int fd = -1;
  bool keep = false;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!keep && !path.empty()) ::unlink(path.c_str());
  }
};

void write_all(TempFile& tmp, const std::string& target, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(tmp.fd, p, n);
    const int err = errno;
    if (w < 0 && err == EINTR) continue;
    if (w < 0) fail(target, "write to '" + tmp.path + "' failed", err);
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

void fsync_directory(const std::string& target, const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    fail(target, "cannot open directory '" + dir.string() + "'", err);
  }
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some filesystems cannot sync a directory (EINVAL); the rename itself has happened.
  if (rc != 0 && err != EINVAL) fail(target, "fsync of directory '" + dir.string() + "' failed", err);
}

}  // namespace

void write_file_atomic(const std::string& path, std::string_view bytes, const WriteFault* fault) {
  const fs::path target(path);
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  remove_stale_temps(target, dir);

  TempFile tmp;
  for (int attempt = 0; tmp.fd < 0; ++attempt) {
    tmp.path = (dir / temp_name(target)).string();
    tmp.fd = ::open(tmp.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (tmp.fd < 0 && (errno != EEXIST || attempt == 100)) {
      const int err = errno;
      tmp.path.clear();  // nothing to unlink
      fail(path, "cannot create a temporary file in '" + dir.string() + "'", err);
    }
  }

  if (fault != nullptr) {
    write_all(tmp, path, bytes.data(), std::min(fault->crash_after_bytes, bytes.size()));
    tmp.keep = fault->leave_temp_file;
    throw SimulatedCrash("simulated crash while writing '" + tmp.path + "'");
  }
  write_all(tmp, path, bytes.data(), bytes.size());
  int rc = ::fsync(tmp.fd);
  int err = errno;
  if (rc != 0) fail(path, "fsync of '" + tmp.path + "' failed", err);
  rc = ::close(tmp.fd);
  err = errno;
  tmp.fd = -1;
  if (rc != 0) fail(path, "close of '" + tmp.path + "' failed", err);
  rc = ::rename(tmp.path.c_str(), path.c_str());
  err = errno;
  if (rc != 0) fail(path, "rename of '" + tmp.path + "' failed", err);
  tmp.path.clear();  // renamed: nothing left to clean up
  fsync_directory(path, dir);
}

}  // namespace detail

void write_file_atomic(const std::string& path, std::string_view bytes) {
  detail::write_file_atomic(path, bytes, nullptr);
}

void check_writable(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  if (path.empty()) throw CheckpointError(path, "cannot save: the path is empty");
  std::error_code ec;
  if (fs::is_directory(target, ec)) throw CheckpointError(path, "cannot save: it is a directory");
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  if (!fs::is_directory(dir, ec))
    throw CheckpointError(path, "cannot save: directory '" + dir.string() + "' does not exist");
  const std::string probe =
      (dir / ("." + target.filename().string() + ".probe-" + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int err = errno;
    if (err != EEXIST)
      throw CheckpointError(
          path, "cannot save: cannot create a file in '" + dir.string() + "': " + std::strerror(err));
    return;  // a probe of ours already there: the directory takes files
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace qat::io
