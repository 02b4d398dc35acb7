#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace qat::examples {

/// Training progress on stderr: a live bar (batches, loss, throughput) when stderr is a
/// terminal, otherwise one line per epoch.
class Progress {
 public:
  Progress(std::int64_t batches_per_epoch, int epochs);
  void start_epoch(int epoch);
  void update(std::int64_t batch, double loss, std::int64_t samples);
  /// Ends the epoch's line; `extra` is appended (e.g. "test_acc 0.8612").
  void end_epoch(double seconds, const std::string& extra);

 private:
  std::int64_t batches_;
  int epochs_, epoch_ = 0;
  bool tty_;
  double loss_sum_ = 0;
  std::int64_t loss_count_ = 0, samples_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace qat::examples
