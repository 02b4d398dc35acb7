#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace qat::io {

/// Replaces the file at `path` with `bytes` atomically: writes a uniquely named temporary file
/// in the same directory, fsyncs it, renames it over `path`, then fsyncs the directory. A crash
/// at any point leaves the old file or the new one, never a mix; on an error the temporary file
/// is removed and `path` is untouched. Throws CheckpointError naming `path`.
/// Temporary files of the same target left by a writer that died (kill -9, SIGXFSZ, power loss:
/// `.NAME.tmp-<pid>-...` whose process is gone, or whose pid now belongs to a process started
/// after the file was written) are removed first.
void write_file_atomic(const std::string& path, std::string_view bytes);

/// Checks, before any long work, that write_file_atomic(path, ...) can succeed: `path` is not a
/// directory and a temporary file can be created (and is removed) in its directory. Throws
/// CheckpointError naming `path` and the reason.
void check_writable(const std::string& path);

namespace detail {

/// Test hook: simulates a crash part-way through write_file_atomic.
struct WriteFault {
  std::size_t crash_after_bytes = 0;  ///< bytes of the temporary file written before the crash
  bool leave_temp_file = true;        ///< as a real crash would; false runs the error cleanup
};

/// What a simulated crash throws.
struct SimulatedCrash : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// write_file_atomic with an optional fault (null: none).
void write_file_atomic(const std::string& path, std::string_view bytes, const WriteFault* fault);

}  // namespace detail
}  // namespace qat::io
