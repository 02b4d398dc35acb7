#pragma once
#include <cstdint>

#include "framework/optim/optimizer.h"

namespace qat::optim {

/// Sets an optimizer's learning rate per epoch, as torch.optim.lr_scheduler: construct it
/// after the optimizer (the optimizer's lr becomes base_lr and epoch 0's lr is applied), then
/// call `step()` once at the end of every epoch. Rates come from the closed form lr_at(epoch).
///
/// To resume, construct it on an optimizer with the original lr and call set_epoch(saved).
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  /// Advances one epoch and sets the optimizer's lr.
  void step();
  /// Jumps to `epoch` (>= 0) and sets the optimizer's lr.
  void set_epoch(std::int64_t epoch);
  std::int64_t epoch() const { return epoch_; }
  double base_lr() const { return base_lr_; }
  /// The learning rate for `epoch` (>= 0).
  virtual double lr_at(std::int64_t epoch) const = 0;

 protected:
  explicit LRScheduler(Optimizer& optimizer);
  /// Sets the optimizer's lr to lr_at(epoch()); derived constructors call it last.
  void apply();

 private:
  Optimizer& optimizer_;
  double base_lr_;
  std::int64_t epoch_ = 0;
};

/// lr = base_lr * gamma^floor(epoch / step_size)   (torch.optim.lr_scheduler.StepLR)
class StepLR : public LRScheduler {
 public:
  /// Throws if step_size < 1 or gamma < 0.
  StepLR(Optimizer& optimizer, std::int64_t step_size, double gamma = 0.1);
  double lr_at(std::int64_t epoch) const override;

 private:
  std::int64_t step_size_;
  double gamma_;
};

/// lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2
/// (SGDR without restarts, Loshchilov & Hutter 2017; torch.optim.lr_scheduler.CosineAnnealingLR)
class CosineAnnealingLR : public LRScheduler {
 public:
  /// Throws if T_max < 1 or eta_min < 0.
  CosineAnnealingLR(Optimizer& optimizer, std::int64_t T_max, double eta_min = 0.0);
  double lr_at(std::int64_t epoch) const override;

 private:
  std::int64_t t_max_;
  double eta_min_;
};

/// Linear warmup: lr = base_lr * (start + (end - start) * min(epoch, total_iters) / total_iters)
/// (torch.optim.lr_scheduler.LinearLR)
class LinearLR : public LRScheduler {
 public:
  /// Throws if a factor is outside [0, 1] or total_iters < 1.
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0,
           std::int64_t total_iters = 5);
  double lr_at(std::int64_t epoch) const override;

 private:
  double start_factor_, end_factor_;
  std::int64_t total_iters_;
};

}  // namespace qat::optim
