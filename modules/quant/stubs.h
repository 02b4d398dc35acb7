#pragma once
#include <memory>

#include "framework/nn/module.h"
#include "modules/quant/quantizer.h"

namespace qat::quant {

/// Marks where a model's quantized region starts (PyTorch's QuantStub). Identity until
/// prepare_qat gives it an activation quantizer (child "activation_post_process"), which then
/// quantizes the model input; convert() turns it into the float -> int8 conversion.
class QuantStub : public nn::Module {
 public:
  QuantStub() : nn::Module("QuantStub") {}
  explicit QuantStub(std::shared_ptr<Quantizer> quantizer);
  Tensor forward(const Tensor& x) override { return quantizer_ ? quantizer_->forward(x) : x; }
  const std::shared_ptr<Quantizer>& quantizer() const { return quantizer_; }
  bool is_atomic() const override { return true; }

 private:
  std::shared_ptr<Quantizer> quantizer_;
};

/// Marks where the quantized region ends (PyTorch's DeQuantStub): identity in QAT; after
/// convert() it turns int8 tensors back into float.
class DeQuantStub : public nn::Module {
 public:
  DeQuantStub() : nn::Module("DeQuantStub") {}
  Tensor forward(const Tensor& x) override { return x; }
};

}  // namespace qat::quant
