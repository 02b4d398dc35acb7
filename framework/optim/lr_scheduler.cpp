#include "framework/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace qat::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer), base_lr_(optimizer.lr()) {}

void LRScheduler::step() { set_epoch(epoch_ + 1); }

void LRScheduler::set_epoch(std::int64_t epoch) {
  QAT_REQUIRE(epoch >= 0, "LRScheduler::set_epoch", "epoch must be >= 0, got ", epoch);
  epoch_ = epoch;
  apply();
}

void LRScheduler::apply() { optimizer_.set_lr(lr_at(epoch_)); }

StepLR::StepLR(Optimizer& optimizer, std::int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  QAT_REQUIRE(step_size >= 1, "StepLR", "step_size must be >= 1, got ", step_size);
  QAT_REQUIRE(gamma >= 0, "StepLR", "gamma must be >= 0, got ", gamma);
  apply();
}

double StepLR::lr_at(std::int64_t epoch) const {
  return base_lr() * std::pow(gamma_, static_cast<double>(epoch / step_size_));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, std::int64_t T_max, double eta_min)
    : LRScheduler(optimizer), t_max_(T_max), eta_min_(eta_min) {
  QAT_REQUIRE(T_max >= 1, "CosineAnnealingLR", "T_max must be >= 1, got ", T_max);
  QAT_REQUIRE(eta_min >= 0, "CosineAnnealingLR", "eta_min must be >= 0, got ", eta_min);
  apply();
}

double CosineAnnealingLR::lr_at(std::int64_t epoch) const {
  const double angle = std::numbers::pi * static_cast<double>(epoch) / static_cast<double>(t_max_);
  // (1 + cos) / 2 first: the same value (halving is exact), without overflow for a huge base lr
  return eta_min_ + (base_lr() - eta_min_) * ((1 + std::cos(angle)) / 2);
}

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor,
                   std::int64_t total_iters)
    : LRScheduler(optimizer),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_iters_(total_iters) {
  QAT_REQUIRE(start_factor >= 0 && start_factor <= 1, "LinearLR", "start_factor must be in [0, 1], got ",
              start_factor);
  QAT_REQUIRE(end_factor >= 0 && end_factor <= 1, "LinearLR", "end_factor must be in [0, 1], got ",
              end_factor);
  QAT_REQUIRE(total_iters >= 1, "LinearLR", "total_iters must be >= 1, got ", total_iters);
  apply();
}

double LinearLR::lr_at(std::int64_t epoch) const {
  const double t = static_cast<double>(std::min(epoch, total_iters_));
  return base_lr() *
         (start_factor_ + (end_factor_ - start_factor_) * t / static_cast<double>(total_iters_));
}

}  // namespace qat::optim
