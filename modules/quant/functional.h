#pragma once
// Quantizable multi-input ops as modules (PyTorch's FloatFunctional / QFunctional): a custom
// model's skip connection `x + f(x)` goes through an Add module, so its output gets an
// activation quantizer in QAT (child "activation_post_process", given by prepare_qat from the
// registry rule for its type) and an int8 version after convert. Hold them as
// nn::Child<quant::Functional> to call them with two inputs:
//
//   nn::Child<quant::Functional> skip_ = register_child<quant::Functional>(
//       "skip", std::make_shared<quant::Add>());
//   Tensor forward(const Tensor& x) override { return skip_(x, body_(x)); }
#include <memory>
#include <string>
#include <vector>

#include "framework/nn/module.h"
#include "modules/quant/quantized_layers.h"
#include "modules/quant/quantizer.h"

namespace qat::quant {

/// Base of the float/QAT functional ops and of their int8 versions.
class Functional : public nn::Module {
 public:
  using nn::Module::operator();
  /// Two-input call (add, mul, add_relu, a two-tensor cat), seen by hooks and graph capture.
  Tensor operator()(const Tensor& a, const Tensor& b);
  /// Any number of inputs (cat).
  Tensor operator()(const std::vector<Tensor>& inputs);
  /// One input is an error naming the module type ("Add takes 2 inputs, call it as op(a, b)").
  Tensor forward(const Tensor& x) override;
  bool is_atomic() const override { return true; }
  /// How many inputs the op takes; -1: any number >= 1 (cat).
  virtual int arity() const { return 2; }

 protected:
  explicit Functional(std::string type_name) : nn::Module(std::move(type_name)) {}
  /// The computation over the (already arity-checked) inputs.
  virtual Tensor apply(const std::vector<Tensor>& inputs) = 0;
};

/// Float / QAT functional op: computes in float, then the output quantizer (if prepared).
class FloatFunctional : public Functional {
 public:
  /// The output quantizer (null until prepare_qat gives it one).
  const std::shared_ptr<Quantizer>& quantizer() const { return quantizer_; }
  /// Registers `q` as child "activation_post_process" (prepare_qat); once.
  void set_quantizer(std::shared_ptr<Quantizer> q);
  /// The int8 module that replaces this one after convert, with output quantization `output`
  /// (inputs are requantized from whatever quantization they carry).
  virtual nn::ModulePtr quantized(const ActivationQuant& output) const = 0;

 protected:
  using Functional::Functional;
  Tensor apply(const std::vector<Tensor>& inputs) final;
  /// The float math.
  virtual Tensor compute(const std::vector<Tensor>& inputs) const = 0;

 private:
  std::shared_ptr<Quantizer> quantizer_;
};

/// y = a + b (broadcasting as qat::add). Type "Add".
class Add : public FloatFunctional {
 public:
  Add() : FloatFunctional("Add") {}
  nn::ModulePtr quantized(const ActivationQuant& output) const override;

 protected:
  Tensor compute(const std::vector<Tensor>& in) const override;
};

/// y = relu(a + b). Type "AddReLU".
class AddReLU : public FloatFunctional {
 public:
  AddReLU() : FloatFunctional("AddReLU") {}
  nn::ModulePtr quantized(const ActivationQuant& output) const override;

 protected:
  Tensor compute(const std::vector<Tensor>& in) const override;
};

/// y = a * b. Type "Mul".
class Mul : public FloatFunctional {
 public:
  Mul() : FloatFunctional("Mul") {}
  nn::ModulePtr quantized(const ActivationQuant& output) const override;

 protected:
  Tensor compute(const std::vector<Tensor>& in) const override;
};

/// Concatenation along `dim`. Type "Cat".
class Cat : public FloatFunctional {
 public:
  explicit Cat(int dim = 1) : FloatFunctional("Cat"), dim_(dim) {}
  int arity() const override { return -1; }
  int dim() const { return dim_; }
  nn::ModulePtr quantized(const ActivationQuant& output) const override;
  std::string extra_repr() const override;

 protected:
  Tensor compute(const std::vector<Tensor>& in) const override;

 private:
  int dim_;
};

// ---- int8 versions (what convert puts in place of the float ones) ---------------------------

/// Base of the int8 functional ops: uint8 inputs carrying any quantization (Tensor::quant_info),
/// a uint8 output with the module's quantization, clamped to its range (buffers scale float32
/// [1], zero_point int32 [1], output_range int32 [2], as quant::Quantize). Each computes in
/// float32 exactly what the fake-quantized model computes from the same input codes:
/// x = (q - zero_point) scale per input, the float op, then the output fake quantizer
/// q = clamp(round_half_even(v (1 / scale)) + zero_point, lo, hi), so the output codes equal the
/// QAT model's bit for bit (kernels/cpu/int8_ops.h).
class QuantizedFunctional : public Functional {
 public:
  QuantInfo output_quant() const;
  /// The output quantization with its clamp range.
  ActivationQuant output() const;
  std::string extra_repr() const override;
  /// scale in [kMinScale, kMaxScale], 0 <= lo <= zero_point <= hi <= 255.
  void check_state(const StateView& state, std::vector<std::string>& problems) const override;

 protected:
  QuantizedFunctional(std::string type_name, const ActivationQuant& output);
  /// Checks every input is a quantized uint8 tensor (errors name the type and the input index).
  void check_inputs(const std::vector<Tensor>& inputs) const;

  Tensor scale_, zero_point_, output_range_;
};

/// Elementwise int8 add / add + relu / mul with NumPy broadcasting (qat::add's).
class QuantizedBinary : public QuantizedFunctional {
 protected:
  enum class Op { Add, AddReLU, Mul };
  QuantizedBinary(std::string type_name, const ActivationQuant& output, Op op)
      : QuantizedFunctional(std::move(type_name), output), op_(op) {}
  Tensor apply(const std::vector<Tensor>& inputs) override;

 private:
  Op op_;
};

/// int8 Add. Type "QuantizedAdd".
class QuantizedAdd : public QuantizedBinary {
 public:
  explicit QuantizedAdd(const ActivationQuant& output)
      : QuantizedBinary("QuantizedAdd", output, Op::Add) {}
};

/// int8 AddReLU. Type "QuantizedAddReLU".
class QuantizedAddReLU : public QuantizedBinary {
 public:
  explicit QuantizedAddReLU(const ActivationQuant& output)
      : QuantizedBinary("QuantizedAddReLU", output, Op::AddReLU) {}
};

/// int8 Mul. Type "QuantizedMul".
class QuantizedMul : public QuantizedBinary {
 public:
  explicit QuantizedMul(const ActivationQuant& output)
      : QuantizedBinary("QuantizedMul", output, Op::Mul) {}
};

/// int8 concatenation along `dim`: each input requantized to the output quantization (a copy when
/// it already has it and the range is the full [0, 255]). Type "QuantizedCat".
class QuantizedCat : public QuantizedFunctional {
 public:
  QuantizedCat(const ActivationQuant& output, int dim)
      : QuantizedFunctional("QuantizedCat", output), dim_(dim) {}
  int arity() const override { return -1; }
  int dim() const { return dim_; }
  std::string extra_repr() const override;

 protected:
  Tensor apply(const std::vector<Tensor>& inputs) override;

 private:
  int dim_;
};

}  // namespace qat::quant
