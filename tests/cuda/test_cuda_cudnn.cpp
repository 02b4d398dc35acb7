// conv2d through cuDNN (framework/kernels/cuda/cudnn_conv.cpp) against the CPU op and against
// the im2col + cuBLAS path, forward and the gradients of x, weight and bias, float32 and
// float64, on odd sizes: kernels 1 / 3 / 5, stride 2, padding, dilation 2, groups 1 / 3 / 5
// (depthwise). The same input twice gives the same bits. The choice of path (QAT_CUDNN,
// cuda::set_conv_path) and of TF32 (QAT_CUDA_TF32, cuda::set_allow_tf32) is tested without a
// device; what TF32 does to matmul and conv2d, with one.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "cuda_test_util.h"
#include "framework/autograd/ops.h"
#include "framework/tensor/cuda.h"
#include "framework/tensor/error.h"

using namespace qat;
using cuda::ConvPath;
using qat::test::has_cuda_device;

namespace {

boost::test_tools::assertion_result has_cudnn_built(boost::unit_test::test_unit_id) {
  boost::test_tools::assertion_result r(cuda::has_cudnn());
  if (!r) r.message() << "skipped: this build has no cuDNN (CMake QAT_CUDNN)";
  return r;
}

struct Case {
  Shape x, w;
  bool bias;
  Conv2dParams p;
};

const std::vector<Case> kCases = {
    {Shape{3, 5, 11, 11}, Shape{7, 5, 3, 3}, true, {{1, 1}, {1, 1}, {1, 1}, 1}},
    {Shape{3, 5, 13, 13}, Shape{6, 5, 5, 5}, true, {{2, 2}, {2, 2}, {1, 1}, 1}},   // 5x5, stride 2
    {Shape{3, 5, 13, 11}, Shape{4, 5, 3, 3}, false, {{1, 1}, {2, 2}, {2, 2}, 1}},  // dilation 2
    {Shape{3, 5, 11, 13}, Shape{9, 5, 1, 1}, true, {{2, 2}, {0, 0}, {1, 1}, 1}},   // 1x1, stride 2
    {Shape{3, 5, 13, 13}, Shape{5, 1, 3, 3}, true, {{1, 1}, {1, 1}, {1, 1}, 5}},   // depthwise
    {Shape{3, 5, 11, 11}, Shape{10, 1, 5, 5}, true, {{2, 2}, {2, 2}, {2, 1}, 5}},  // depthwise x2
    {Shape{3, 6, 11, 13}, Shape{9, 2, 3, 3}, true, {{2, 1}, {1, 2}, {1, 2}, 3}},   // groups 3
};

std::vector<double> values(const Tensor& t) {
  if (t.dtype() == DType::Float64) return t.to_vector<double>();
  const std::vector<float> f = t.to_vector<float>();
  return {f.begin(), f.end()};
}

// y, dx, dW[, db] of conv2d on `dev` in `dt`, the backward seeded with a random gradient: the
// same inputs for every device, dtype and path.
std::vector<std::vector<double>> run(const Case& c, DType dt, Device dev) {
  Generator gen(7);
  Tensor x = Tensor::uniform(c.x, -2, 2, gen, dt).to(dev);
  Tensor w = Tensor::uniform(c.w, -0.5, 0.5, gen, dt).to(dev);
  Tensor b = c.bias ? Tensor::uniform(Shape{c.w[0]}, -1, 1, gen, dt).to(dev) : Tensor();
  x.requires_grad_();
  w.requires_grad_();
  if (c.bias) b.requires_grad_();
  const Tensor y = conv2d(x, w, b, c.p);
  BOOST_REQUIRE((y.device() == dev));
  y.backward(Tensor::uniform(y.shape(), -1, 1, gen, dt).to(dev));
  std::vector<std::vector<double>> out = {values(y), values(x.grad()), values(w.grad())};
  if (c.bias) out.push_back(values(b.grad()));
  return out;
}

const char* const kWhat[] = {"y", "dx", "dW", "db"};

// |a - b| <= tol max(1, |a|) elementwise (tol 0: the same bits)
void require_close(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b,
                   double tol) {
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  for (std::size_t k = 0; k < a.size(); ++k) {
    BOOST_REQUIRE_EQUAL(a[k].size(), b[k].size());
    for (std::size_t i = 0; i < a[k].size(); ++i) {
      const bool ok = tol == 0 ? std::memcmp(&a[k][i], &b[k][i], sizeof(double)) == 0
                               : std::abs(a[k][i] - b[k][i]) <= tol * std::max(1.0, std::abs(a[k][i]));
      if (!ok) BOOST_FAIL(kWhat[k] << "[" << i << "]: " << a[k][i] << " vs " << b[k][i]);
    }
  }
}

double tolerance(DType dt) { return dt == DType::Float64 ? 1e-11 : 2e-4; }

}  // namespace

BOOST_AUTO_TEST_SUITE(conv_path)

BOOST_AUTO_TEST_CASE(qat_cudnn_environment_values) {
  std::string warning;
  for (bool built : {true, false}) {
    const ConvPath best = built ? ConvPath::Cudnn : ConvPath::Im2colGemm;
    BOOST_TEST_CONTEXT("cuDNN built: " << built) {
      BOOST_TEST((cuda::detail::conv_path_from_env(nullptr, built, &warning) == best));
      BOOST_TEST(warning.empty());
      BOOST_TEST((cuda::detail::conv_path_from_env("", built, &warning) == best));
      BOOST_TEST(warning.empty());
      BOOST_TEST((cuda::detail::conv_path_from_env("0", built, &warning) == ConvPath::Im2colGemm));
      BOOST_TEST(warning.empty());
      BOOST_TEST((cuda::detail::conv_path_from_env("1", built, &warning) == best));
      BOOST_TEST(warning.empty() == built);  // "1" without cuDNN is worth a line
      BOOST_TEST((cuda::detail::conv_path_from_env("off", built, &warning) == best));
      BOOST_TEST(warning.find("ignoring QAT_CUDNN=off (expected 0 or 1)") != std::string::npos);
      BOOST_TEST(warning.find(cuda::conv_path_name(best)) != std::string::npos);
    }
  }
}

BOOST_AUTO_TEST_CASE(path_follows_environment_and_switch) {
  std::string warning;
  const ConvPath from_env =
      cuda::detail::conv_path_from_env(std::getenv("QAT_CUDNN"), cuda::has_cudnn(), &warning);
  BOOST_TEST((cuda::conv_path() == from_env));  // nothing has forced a path for long
  {
    const cuda::ConvPathGuard guard(ConvPath::Im2colGemm);
    BOOST_TEST((cuda::conv_path() == ConvPath::Im2colGemm));
  }
  BOOST_TEST((cuda::conv_path() == from_env));
  if (cuda::has_cudnn()) {
    const cuda::ConvPathGuard guard(ConvPath::Cudnn);
    BOOST_TEST((cuda::conv_path() == ConvPath::Cudnn));
  } else {
    BOOST_CHECK_EXCEPTION(cuda::set_conv_path(ConvPath::Cudnn), Error, [](const Error& e) {
      return std::string(e.what()).find(
                 "cuda::set_conv_path: path cudnn, but this build has no cuDNN") == 0;
    });
    BOOST_TEST((cuda::conv_path() == ConvPath::Im2colGemm));
  }
  BOOST_TEST(std::string(cuda::conv_path_name(ConvPath::Cudnn)) == "cudnn");
  BOOST_TEST(std::string(cuda::conv_path_name(ConvPath::Im2colGemm)) == "im2col_gemm");
}

BOOST_AUTO_TEST_CASE(qat_cuda_tf32_environment_values_and_switch) {
  std::string warning;
  for (const char* v : {static_cast<const char*>(nullptr), "", "0"}) {
    BOOST_TEST(!cuda::detail::tf32_from_env(v, &warning));
    BOOST_TEST(warning.empty());
  }
  BOOST_TEST(cuda::detail::tf32_from_env("1", &warning));
  BOOST_TEST(warning.empty());
  BOOST_TEST(!cuda::detail::tf32_from_env("yes", &warning));
  BOOST_TEST(warning.find("ignoring QAT_CUDA_TF32=yes (expected 0 or 1)") != std::string::npos, warning);
  const bool from_env = cuda::detail::tf32_from_env(std::getenv("QAT_CUDA_TF32"), &warning);
  BOOST_TEST(cuda::allow_tf32() == from_env);
  {
    const cuda::Tf32Guard guard(!from_env);
    BOOST_TEST(cuda::allow_tf32() == !from_env);
  }
  BOOST_TEST(cuda::allow_tf32() == from_env);
}

BOOST_AUTO_TEST_SUITE_END()

namespace {
// ||a - b|| / ||a|| in double
double relative_error(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  double d = 0, r = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    d += (double(x[i]) - y[i]) * (double(x[i]) - y[i]), r += double(x[i]) * x[i];
  return std::sqrt(d / r);
}
}  // namespace

BOOST_AUTO_TEST_SUITE(tf32, *boost::unit_test::precondition(has_cuda_device))

// TF32 is opt-in: off, float32 matmul and conv2d stay within float32 rounding of the CPU; on, they
// move by TF32's rounding of the operands (10-bit mantissas: ~1e-3 relative, under 1e-2 here) on
// every path that honours it (cuBLAS: matmul and im2col conv2d; cuDNN where it ranks a tensor-op
// algorithm first); off again, the float32 bits come back (the plans and the handle's math mode
// follow the switch).
BOOST_AUTO_TEST_CASE(tf32_is_opt_in) {
  const cuda::Tf32Guard off(false);
  Generator gen(31);
  const Tensor a = Tensor::uniform(Shape{96, 1024}, -1, 1, gen),
               b = Tensor::uniform(Shape{1024, 80}, -1, 1, gen);
  const Tensor x = Tensor::uniform(Shape{4, 64, 12, 12}, -1, 1, gen),
               w = Tensor::uniform(Shape{48, 64, 3, 3}, -0.2, 0.2, gen);
  const Conv2dParams p{{1, 1}, {1, 1}, {1, 1}, 1};
  struct Op {
    const char* name;
    std::function<Tensor(bool cuda)> run;
    bool must_move;  // TF32 is sure to change the result
  };
  std::vector<Op> ops = {
      {"matmul (cuBLAS)",
       [&](bool d) {
         return d ? matmul(a.to(Device::CUDA), b.to(Device::CUDA)).to(Device::CPU) : matmul(a, b);
       },
       true},
      {"conv2d, im2col + cuBLAS",
       [&](bool d) {
         if (!d) return conv2d(x, w, Tensor(), p);
         const cuda::ConvPathGuard path(ConvPath::Im2colGemm);
         return conv2d(x.to(Device::CUDA), w.to(Device::CUDA), Tensor(), p).to(Device::CPU);
       },
       true}};
  if (cuda::has_cudnn())
    ops.push_back({"conv2d, cuDNN",
                   [&](bool d) {
                     if (!d) return conv2d(x, w, Tensor(), p);
                     const cuda::ConvPathGuard path(ConvPath::Cudnn);
                     return conv2d(x.to(Device::CUDA), w.to(Device::CUDA), Tensor(), p).to(Device::CPU);
                   },
                   false});
  for (const Op& op : ops) BOOST_TEST_CONTEXT(op.name) {
      const Tensor ref = op.run(false), f32 = op.run(true);
      Tensor t32;
      {
        const cuda::Tf32Guard on(true);
        t32 = op.run(true);
      }
      const Tensor again = op.run(true);
      // float32 sums of 576-1024 terms in another order: ~1e-6; TF32: ~5e-4
      BOOST_TEST(relative_error(ref, f32) < 2e-5);
      BOOST_TEST(relative_error(ref, t32) < 1e-2);
      if (op.must_move) BOOST_TEST(relative_error(ref, t32) > 1e-4);  // TF32 ran
      test::require_bits_equal(f32, again);
      BOOST_TEST_MESSAGE(op.name << ": float32 " << relative_error(ref, f32) << ", TF32 allowed "
                                 << relative_error(ref, t32));
    }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(cudnn_conv, *boost::unit_test::precondition(has_cuda_device) *
                                      boost::unit_test::precondition(has_cudnn_built))

BOOST_AUTO_TEST_CASE(cudnn_against_cpu_and_im2col) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (const Case& c : kCases) {
      BOOST_TEST_CONTEXT(dtype_name(dt) << " x " << c.x << " w " << c.w << " groups " << c.p.groups) {
        const auto cpu = run(c, dt, Device::CPU);
        std::vector<std::vector<double>> dnn, im2col;
        {
          const cuda::ConvPathGuard guard(ConvPath::Cudnn);
          dnn = run(c, dt, Device::CUDA);
        }
        {
          const cuda::ConvPathGuard guard(ConvPath::Im2colGemm);
          im2col = run(c, dt, Device::CUDA);
        }
        require_close(cpu, dnn, tolerance(dt));
        require_close(im2col, dnn, tolerance(dt));
      }
    }
  }
}

// The same inputs twice: the same bits (deterministic algorithms, fixed by the heuristics).
BOOST_AUTO_TEST_CASE(cudnn_deterministic) {
  const cuda::ConvPathGuard guard(ConvPath::Cudnn);
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (const Case& c : {kCases[1], kCases[5]}) {
      BOOST_TEST_CONTEXT(dtype_name(dt) << " x " << c.x << " w " << c.w) {
        require_close(run(c, dt, Device::CUDA), run(c, dt, Device::CUDA), 0);
      }
    }
    // a larger layer, where cuDNN might otherwise split the filter gradient's sum
    const Case big{Shape{32, 32, 28, 28}, Shape{64, 32, 3, 3}, true, {{1, 1}, {1, 1}, {1, 1}, 1}};
    BOOST_TEST_CONTEXT(dtype_name(dt) << " 32x32x28x28") {
      require_close(run(big, dt, Device::CUDA), run(big, dt, Device::CUDA), 0);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
