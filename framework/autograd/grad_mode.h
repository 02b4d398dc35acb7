#pragma once

namespace qat {

/// Thread-local switch for graph recording.
class GradMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

/// RAII: disables graph recording on this thread for its lifetime (like torch::NoGradGuard).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace qat
