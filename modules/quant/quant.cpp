// Placeholder translation unit until the quantization modules land (issue 4).
namespace qat::quant {}
