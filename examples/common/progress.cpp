#include "examples/common/progress.h"

#include <unistd.h>

#include <cstdio>

namespace qat::examples {

Progress::Progress(std::int64_t batches_per_epoch, int epochs)
    : batches_(batches_per_epoch), epochs_(epochs), tty_(isatty(STDERR_FILENO) != 0) {}

void Progress::start_epoch(int epoch) {
  epoch_ = epoch;
  loss_sum_ = 0;
  loss_count_ = samples_ = 0;
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

void Progress::update(std::int64_t batch, double loss, std::int64_t samples) {
  loss_sum_ += loss;
  ++loss_count_;
  samples_ += samples;
  if (!tty_) return;
  const auto now = std::chrono::steady_clock::now();
  if (batch + 1 < batches_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const double secs = std::chrono::duration<double>(now - start_).count();
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * (batch + 1) / batches_);
  std::fprintf(stderr, "\repoch %d/%d [%-*s] %lld/%lld loss %.4f %.0f img/s   ", epoch_, epochs_, kWidth,
               std::string(filled, '#').c_str(), static_cast<long long>(batch + 1),
               static_cast<long long>(batches_), loss_sum_ / loss_count_,
               secs > 0 ? samples_ / secs : 0.0);
  std::fflush(stderr);
}

void Progress::end_epoch(double seconds, const std::string& extra) {
  std::fprintf(stderr, "%sepoch %d/%d train_s %.2f loss %.4f %.0f img/s %s\n", tty_ ? "\r" : "", epoch_,
               epochs_, seconds, loss_count_ ? loss_sum_ / loss_count_ : 0.0,
               seconds > 0 ? samples_ / seconds : 0.0, extra.c_str());
}

}  // namespace qat::examples
