#include "modules/quant/stubs.h"

namespace qat::quant {

QuantStub::QuantStub(std::shared_ptr<Quantizer> quantizer) : QuantStub() {
  if (quantizer) quantizer_ = register_module("activation_post_process", std::move(quantizer));
}

}  // namespace qat::quant
