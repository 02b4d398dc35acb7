#include "modules/quant/control.h"

#include <sstream>
#include <unordered_set>
#include <utility>

#include "framework/autograd/grad_mode.h"
#include "framework/nn/batchnorm.h"
#include "modules/quant/detail/glob.h"
#include "modules/quant/qat_layers.h"
#include "modules/quant/quantizer.h"

namespace qat::quant {
namespace {

// Whether `name` or one of its ancestors ("" the root, "a", "a.b", ...) matches `glob`.
bool selected(const std::string& glob, const std::string& name) {
  if (detail::glob_match(glob, "")) return true;
  for (std::size_t at = 0;; ++at) {
    at = name.find('.', at);
    if (detail::glob_match(glob, name.substr(0, at))) return true;
    if (at == std::string::npos) return false;
  }
}

// Applies `fn` to every quantizer below a module matching `glob`; throws if there is none.
std::int64_t for_quantizers(nn::Module& model, const std::string& glob, const char* fn,
                            const std::function<void(Quantizer&)>& apply) {
  QAT_REQUIRE(!glob.empty(), fn, "empty glob");
  std::int64_t n = 0;
  for (auto& [name, m] : model.named_modules())
    if (auto* q = dynamic_cast<Quantizer*>(m); q && selected(glob, name)) {
      apply(*q);
      ++n;
    }
  QAT_REQUIRE(n > 0, fn, "glob '", glob,
              "' matches no quantizer in the model (was it prepared with prepare_qat?)");
  return n;
}

// Training, fake-quant and observer flags of a whole model, restored on destruction.
class SavedFlags {
 public:
  explicit SavedFlags(nn::Module& model) {
    for (auto& [name, m] : model.named_modules()) {
      training_.emplace_back(m, m->is_training());
      if (auto* q = dynamic_cast<Quantizer*>(m))
        quantizers_.push_back({q, q->fake_quant_enabled(), q->observer_enabled()});
    }
  }
  ~SavedFlags() {
    for (auto& [m, on] : training_) m->train(on);  // parents first: children keep their own
    for (const auto& s : quantizers_) {
      s.q->enable_fake_quant(s.fake_quant);
      s.q->enable_observer(s.observer);
    }
  }
  SavedFlags(const SavedFlags&) = delete;
  SavedFlags& operator=(const SavedFlags&) = delete;

 private:
  struct State {
    Quantizer* q;
    bool fake_quant, observer;
  };
  std::vector<std::pair<nn::Module*, bool>> training_;
  std::vector<State> quantizers_;
};

}  // namespace

std::int64_t enable_observers(nn::Module& model, bool on, const std::string& glob) {
  return for_quantizers(model, glob, "enable_observers", [on](Quantizer& q) { q.enable_observer(on); });
}

std::int64_t disable_observers(nn::Module& model, const std::string& glob) {
  return for_quantizers(model, glob, "disable_observers", [](Quantizer& q) { q.disable_observer(); });
}

std::int64_t enable_fake_quant(nn::Module& model, bool on, const std::string& glob) {
  return for_quantizers(model, glob, "enable_fake_quant",
                        [on](Quantizer& q) { q.enable_fake_quant(on); });
}

std::int64_t disable_fake_quant(nn::Module& model, const std::string& glob) {
  return for_quantizers(model, glob, "disable_fake_quant", [](Quantizer& q) { q.disable_fake_quant(); });
}

std::int64_t freeze_qparams(nn::Module& model, bool on, const std::string& glob) {
  return for_quantizers(model, glob, "freeze_qparams", [on](Quantizer& q) { q.freeze_qparams(on); });
}

std::int64_t unfreeze_qparams(nn::Module& model, const std::string& glob) {
  return freeze_qparams(model, false, glob);
}

std::int64_t freeze_bn_stats(nn::Module& model, bool on, const std::string& glob) {
  constexpr const char* fn = "freeze_bn_stats";
  QAT_REQUIRE(!glob.empty(), fn, "empty glob");
  std::unordered_set<const nn::Module*> fused_bn;  // a fused layer's "bn": frozen through it
  std::int64_t n = 0;
  for (auto& [name, m] : model.named_modules()) {
    if (auto* layer = dynamic_cast<BnFoldedLayer*>(m)) {
      fused_bn.insert(layer->bn().get());
      if (!selected(glob, name)) continue;
      on ? layer->freeze_bn_stats() : layer->update_bn_stats();
      ++n;
    } else if (auto* bn = dynamic_cast<nn::BatchNorm*>(m);
               bn && !fused_bn.count(bn) && selected(glob, name)) {
      bn->freeze_stats(on);
      ++n;
    }
  }
  QAT_REQUIRE(n > 0, fn, "glob '", glob, "' matches no batch norm, ConvBn2d or LinearBn1d in the model");
  return n;
}

std::int64_t unfreeze_bn_stats(nn::Module& model, const std::string& glob) {
  return freeze_bn_stats(model, false, glob);
}

// ---- calibration ----------------------------------------------------------------------------

std::string CalibrationReport::str() const {
  std::ostringstream s;
  s << "calibrated on " << batches << " batches: " << observed.size() << " quantizers observed, "
    << unobserved.size() << " unobserved";
  for (const std::string& name : unobserved) s << "\n  unobserved: " << (name.empty() ? "(root)" : name);
  return s.str();
}

CalibrationReport calibrate(nn::Module& model, const BatchSource& next) {
  QAT_REQUIRE(next != nullptr, "calibrate", "empty batch source");
  CalibrationReport report;
  std::vector<std::pair<std::string, Quantizer*>> quantizers;
  for (auto& [name, m] : model.named_modules())
    if (auto* q = dynamic_cast<Quantizer*>(m)) quantizers.emplace_back(name, q);
  QAT_REQUIRE(!quantizers.empty(), "calibrate",
              "the model has no quantizers: call prepare_qat before calibrating");
  {
    SavedFlags restore(model);  // declared first: restores after the guards below end
    model.eval();
    for (auto& [name, q] : quantizers) {
      q->disable_fake_quant();
      q->enable_observer();
    }
    NoGradGuard no_grad;
    CalibrationGuard guard;
    for (Tensor batch; next(batch); ++report.batches) {
      QAT_REQUIRE(batch.defined(), "calibrate", "batch ", report.batches, " is undefined");
      model(batch);
    }
    for (auto& [name, q] : quantizers)
      (guard.observed(q) > 0 ? report.observed : report.unobserved).push_back(name);
  }
  return report;
}

CalibrationReport calibrate(nn::Module& model, const std::vector<Tensor>& batches) {
  std::size_t at = 0;
  return calibrate(model, [&](Tensor& batch) {
    if (at == batches.size()) return false;
    batch = batches[at++];
    return true;
  });
}

}  // namespace qat::quant
