// The quantizers on CUDA against the CPU reference. Without a device: the per-range code the
// kernels run (observer_math.h: qparams, the statistics update, one element's fake quant) on the
// host against calculate_qparams and a CPU FakeQuantize over several batches, with the kernels'
// element -> parameter maps (param_index.h). With a device: the observers and FakeQuantize (per
// tensor / per channel / per block, first batch and moving average, ties,
// an all-equal channel, empty input, switches off) bit-exact with the CPU, NaN batches counted
// and skipped, Module::to, QAT layers after prepare_qat, and QAT models trained side by side.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "cuda_test_util.h"
#include "train_alike.h"
#include "framework/autograd/ops.h"
#include "framework/nn/nn.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/error.h"
#include "modules/quant/fake_quant.h"
#include "modules/quant/kernels/cuda/observer_math.h"
#include "modules/quant/kernels/cuda/param_index.h"
#include "modules/quant/observer.h"
#include "modules/quant/prepare.h"
#include "modules/quant/qconfig.h"
#include "modules/quant/qparams.h"
#include "modules/quant/quantizer.h"
#include "modules/quant/stubs.h"

using namespace qat;
using qat::test::has_cuda_device;
using qat::test::leaf;
using qat::test::require_bits_equal;
using qat::test::require_close;
using qat::test::rnd;

namespace {

namespace obs = quant::kernels::cuda::obs;
constexpr float kInf = std::numeric_limits<float>::infinity();

obs::QRange range_of(const quant::QuantSpec& s) {
  return {s.quant_min(), s.quant_max(), s.symmetric,
          static_cast<std::int32_t>(s.symmetric ? s.symmetric_zero_point() : 0)};
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// Equal as values (-0 == +0: the CPU keeps the first zero it meets across a channel's runs, the
// GPU orders -0 below +0; the qparams are the same either way), NaN never equal.
void require_same_values(const Tensor& a, const Tensor& b) {
  BOOST_REQUIRE(a.shape() == b.shape());
  const std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i])) BOOST_FAIL("element " << i << ": cpu " << x[i] << ", cuda " << y[i]);
}

void require_same_ints(const Tensor& a, const Tensor& b) {
  BOOST_REQUIRE(a.shape() == b.shape());
  BOOST_TEST(a.to_vector<std::int32_t>() == b.to_vector<std::int32_t>(),
             boost::test_tools::per_element());
}

// Uniform values snapped to multiples of 1/64 (ties for the rounding and for min / max), some
// -0 and +0, and along `axis` (when >= 0) index 1 all equal to 0.75 (a one-value channel).
Tensor batch(const Shape& s, int axis, std::uint64_t seed, float lo, float hi) {
  std::vector<float> v = rnd(s, seed, lo, hi).to_vector<float>();
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = std::round(v[i] * 64) / 64;
    if (i % 13 == 5) v[i] = (i % 2) ? -0.0f : 0.0f;
  }
  if (axis >= 0 && s[axis] > 1) {
    std::int64_t inner = 1;
    for (int d = axis + 1; d < s.rank(); ++d) inner *= s[d];
    for (std::size_t i = 0; i < v.size(); ++i)
      if ((static_cast<std::int64_t>(i) / inner) % s[axis] == 1) v[i] = 0.75f;
  }
  return Tensor::from_vector(v, s);
}

struct Config {
  const char* name;
  quant::QuantSpec spec;
  quant::ObserverKind kind;
  Shape shape;
};

std::vector<Config> configs() {
  using quant::ObserverKind;
  using quant::QuantSpec;
  return {
      {"uint8 affine per tensor, moving average", QuantSpec::activation_affine(8),
       ObserverKind::MovingAverage, Shape{3, 5, 7, 11}},
      {"int8 symmetric per tensor, min-max", QuantSpec::parse("int8 symmetric per-tensor"),
       ObserverKind::MinMax, Shape{2, 301}},
      {"uint8 symmetric per tensor, moving average", QuantSpec::parse("uint8 symmetric per-tensor"),
       ObserverKind::MovingAverage, Shape{1000}},
      {"int8 symmetric per channel axis 0, moving average", QuantSpec::weight_per_channel(8, 0),
       ObserverKind::MovingAverage, Shape{7, 5, 3, 3}},
      {"int4 symmetric per channel axis 0, min-max", QuantSpec::weight_per_channel(4, 0),
       ObserverKind::MinMax, Shape{33, 17}},
      {"int8 symmetric per channel axis 1, moving average", QuantSpec::weight_per_channel(8, 1),
       ObserverKind::MovingAverage, Shape{4, 6, 5, 3}},
      {"int4 symmetric per block of 8 along the last axis, min-max", QuantSpec::weight_per_block(4, 8),
       ObserverKind::MinMax, Shape{5, 24}},
      {"int8 symmetric per block of 4 along axis 1, moving average",
       QuantSpec::weight_per_block(8, 4, 1), ObserverKind::MovingAverage, Shape{6, 8, 3, 3}},
      {"int4 symmetric per block of 16, 4-bit block scales, min-max",
       QuantSpec::weight_per_block(4, 16, -1, 4), ObserverKind::MinMax, Shape{3, 48}},
      // 20 rows of 48: the fused update's 4-wide steps (contiguous ranges, 16 or more of them)
      {"int8 symmetric per channel axis 0, rows of 48, moving average",
       QuantSpec::weight_per_channel(8, 0), ObserverKind::MovingAverage, Shape{20, 3, 4, 4}},
  };
}

int axis_of(const Config& c) {
  return c.spec.granularity == quant::Granularity::PerChannel ? c.spec.axis : -1;
}

Shape params_of(const Config& c) { return quant::param_shape(c.spec, c.shape); }

std::shared_ptr<quant::FakeQuantize> make_fq(const Config& c) {
  return std::make_shared<quant::FakeQuantize>(
      c.spec, quant::make_observer(c.kind, c.spec, params_of(c)), params_of(c));
}

}  // namespace

// ---- no device: the kernels' per-range code on the host ----------------------------------------

// obs::qparams_one, which the fused and per-channel kernels run, gives calculate_qparams' bits on
// edge ranges (never observed, zero, one value, one sign, tiny, huge) and random ones.
BOOST_AUTO_TEST_CASE(qparams_one_matches_calculate_qparams) {
  std::vector<std::pair<float, float>> ranges{
      {kInf, -kInf},  {0, 0},          {-0.0f, 0},      {-0.0f, -0.0f},    {3, 3},          {-5, -5},
      {-2, -1},       {1, 2},          {-1e-9f, 1e-9f}, {0, 1e-30f},       {-1e30f, 1e30f}, {-1e30f, 0},
      {-0.1f, 25.4f}, {-12.7f, 0.05f}, {-1, 1},         {-128.0f / 127, 1}};
  Generator gen(5);
  for (int i = 0; i < 4000; ++i) {
    const float a = static_cast<float>(gen.uniform() * 8 - 6),
                b = static_cast<float>(gen.uniform() * 8 - 2);
    const float scale = std::pow(10.0f, static_cast<float>(gen.uniform() * 8 - 4));
    ranges.emplace_back(std::min(a, b) * scale, std::max(a, b) * scale);
  }
  for (const quant::QuantSpec& spec :
       {quant::QuantSpec::activation_affine(8), quant::QuantSpec::activation_affine(4),
        quant::QuantSpec::weight_per_channel(8), quant::QuantSpec::weight_per_channel(4),
        quant::QuantSpec::parse("uint8 symmetric per-tensor"),
        quant::QuantSpec::parse("int8 affine per-tensor")}) {
    BOOST_TEST_CONTEXT(spec.str()) {
      for (const auto& [mn, mx] : ranges) {
        float s_cpu = 0, s_dev = 0;
        std::int32_t z_cpu = 0, z_dev = 0;
        quant::calculate_qparams(&mn, &mx, 1, spec, &s_cpu, &z_cpu);
        obs::qparams_one(mn, mx, range_of(spec), &s_dev, &z_dev);
        BOOST_TEST_CONTEXT("range [" << mn << ", " << mx << "]") {
          BOOST_TEST(same_bits(s_cpu, s_dev));
          BOOST_TEST(z_cpu == z_dev);
        }
      }
    }
  }
  // min_z / max_z order the zeros whatever the order of the fold
  BOOST_TEST(std::signbit(obs::min_z(0.0f, -0.0f)));
  BOOST_TEST(std::signbit(obs::min_z(-0.0f, 0.0f)));
  BOOST_TEST(!std::signbit(obs::max_z(0.0f, -0.0f)));
  BOOST_TEST(!std::signbit(obs::max_z(-0.0f, 0.0f)));
  BOOST_TEST(obs::min_z(std::nanf(""), 1.0f) == 1.0f);
  BOOST_TEST(obs::max_z(std::nanf(""), -1.0f) == -1.0f);
}

// What the CUDA observer does, step by step on the host (per-range min / max folded backwards
// over the kernels' element map, obs::update_range, obs::qparams_one, obs::fake_quant_one per
// element with its parameter from param_of), against a CPU FakeQuantize over several batches:
// statistics, qparams and output bit-exact (zeros by value). (Integer block scales are quantized
// on the host in both paths: not simulated.)
BOOST_AUTO_TEST_CASE(observer_steps_on_host_match_cpu_fake_quantize) {
  namespace cu = quant::kernels::cuda;
  for (const Config& c : configs()) {
    if (c.spec.block_scale_bits > 0) continue;
    BOOST_TEST_CONTEXT(c.name) {
      auto fq = make_fq(c);
      fq->train();
      // x as (outer, len, inner) around the axis; ranges of m elements each, as observe() has them
      const bool per_axis = c.spec.granularity != quant::Granularity::PerTensor;
      const int axis = per_axis ? c.shape.axis(c.spec.axis, "test") : -1;
      const std::int64_t block =
          c.spec.granularity == quant::Granularity::PerBlock ? c.spec.block_size : 0;
      std::int64_t outer = 1, len = 1, inner = 1;
      if (axis >= 0) {
        for (int d = 0; d < c.shape.rank(); ++d)
          (d < axis ? outer : d > axis ? inner : len) *= c.shape[d];
      } else {
        inner = c.shape.numel();
      }
      const std::int64_t ranges = block ? outer * (len / block) * inner : len;
      const std::int64_t m = block ? block : outer * inner;
      BOOST_TEST_REQUIRE(ranges == params_of(c).numel());
      auto element = [&](std::int64_t j, std::int64_t r) {
        return block ? cu::block_element(j, r, inner, block) : cu::channel_element(j, r, len, inner);
      };
      std::vector<float> mn(ranges, kInf), mx(ranges, -kInf), scale(ranges, 1);
      std::vector<std::int32_t> zp(ranges, 0);
      std::vector<int> seen(c.shape.numel(), 0);  // every element in exactly one range
      const float ac = fq->observer()->device_averaging_constant();
      for (int step = 0; step < 5; ++step) {
        const Tensor x = batch(c.shape, axis_of(c), 100 + step, -1.0f - step, 2.0f + 0.5f * step);
        const Tensor y = fq->forward(x);
        const std::vector<float> xv = x.to_vector<float>(), yv = y.to_vector<float>();
        for (std::int64_t r = 0; r < ranges; ++r) {
          float lo = kInf, hi = -kInf;
          for (std::int64_t j = m - 1; j >= 0; --j) {
            const std::int64_t i = element(j, r);
            if (step == 0) ++seen[i];
            BOOST_TEST_REQUIRE(cu::param_of(i, len, inner, block) == r);
            lo = obs::min_z(xv[i], lo);
            hi = obs::max_z(xv[i], hi);
          }
          obs::update_range(&mn[r], &mx[r], lo, hi, ac);
          obs::qparams_one(mn[r], mx[r], range_of(c.spec), &scale[r], &zp[r]);
        }
        if (step == 0) BOOST_TEST(std::count(seen.begin(), seen.end(), 1) == c.shape.numel());
        BOOST_TEST_CONTEXT("step " << step) {
          const Shape ps = params_of(c);
          require_same_values(fq->observer()->min_val(), Tensor::from_vector(mn, ps));
          require_same_values(fq->observer()->max_val(), Tensor::from_vector(mx, ps));
          require_bits_equal(fq->scale(), Tensor::from_vector(scale, ps));
          require_same_ints(fq->zero_point(), Tensor::from_vector(zp, ps));
          const float qlo = static_cast<float>(c.spec.quant_min()),
                      qhi = static_cast<float>(c.spec.quant_max());
          for (std::size_t i = 0; i < xv.size(); ++i) {
            const std::int64_t r = cu::param_of(static_cast<std::int64_t>(i), len, inner, block);
            std::uint8_t mk = 0;
            const float want = obs::fake_quant_one(xv[i], 1.0f / scale[r], scale[r],
                                                   static_cast<float>(zp[r]), qlo, qhi, &mk);
            if (!same_bits(want, yv[i]))
              BOOST_FAIL("element " << i << ": cpu " << yv[i] << ", sim " << want);
          }
        }
      }
    }
  }
}

// ---- with a device -----------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(cuda_quant, *boost::unit_test::precondition(has_cuda_device))

// Each observer on CUDA (moved with Module::to) against the same observer on the CPU: statistics
// and calculate_qparams after every batch.
BOOST_AUTO_TEST_CASE(observers_match_cpu) {
  for (const Config& c : configs()) {
    BOOST_TEST_CONTEXT(c.name) {
      auto h = quant::make_observer(c.kind, c.spec, params_of(c));
      auto d = quant::make_observer(c.kind, c.spec, params_of(c));
      d->to(Device::CUDA);
      for (int step = 0; step < 5; ++step) {
        const Tensor x = batch(c.shape, axis_of(c), 200 + step, -2.0f + 0.3f * step, 1.0f + step);
        h->forward(x);
        d->forward(x.to(Device::CUDA));
        BOOST_TEST_CONTEXT("step " << step) {
          BOOST_TEST((d->min_val().device() == Device::CUDA));
          require_same_values(h->min_val(), d->min_val());
          require_same_values(h->max_val(), d->max_val());
          const quant::QParams qh = h->calculate_qparams(), qd = d->calculate_qparams();
          require_bits_equal(qh.scale, qd.scale);
          require_same_ints(qh.zero_point, qd.zero_point);
        }
      }
      BOOST_TEST(d->nonfinite_batches().item() == 0.0);
    }
  }
}

// FakeQuantize on CUDA against the CPU over batches: the first sets the range, then the moving
// average / running min-max; a step with the observer off, one with fake quant off, one in eval
// mode, an empty input. Output, STE gradient, scale / zero_point bit-exact.
BOOST_AUTO_TEST_CASE(fake_quantize_matches_cpu) {
  for (const Config& c : configs()) {
    BOOST_TEST_CONTEXT(c.name) {
      auto h = make_fq(c), d = make_fq(c);
      d->to(Device::CUDA);
      h->train(), d->train();
      for (int step = 0; step < 8; ++step) {
        BOOST_TEST_CONTEXT("step " << step) {
          h->enable_observer(step != 3), d->enable_observer(step != 3);
          h->enable_fake_quant(step != 4), d->enable_fake_quant(step != 4);
          h->train(step != 5), d->train(step != 5);
          const Tensor x =
              batch(c.shape, axis_of(c), 300 + step, -1.5f - 0.2f * step, 1.0f + 0.4f * step);
          const Tensor xh = leaf(x), xd = leaf(x.to(Device::CUDA));
          const Tensor yh = h->forward(xh), yd = d->forward(xd);
          BOOST_TEST((yd.device() == Device::CUDA));
          require_bits_equal(yh, yd);
          require_bits_equal(h->scale(), d->scale());
          require_same_ints(h->zero_point(), d->zero_point());
          require_same_values(h->observer()->min_val(), d->observer()->min_val());
          require_same_values(h->observer()->max_val(), d->observer()->max_val());
          const Tensor g = rnd(x.shape(), 400 + step);
          yh.backward(g);
          yd.backward(g.to(Device::CUDA));
          require_bits_equal(xh.grad(), xd.grad());
        }
      }
      // an empty batch changes nothing
      Shape empty = c.shape;
      empty[axis_of(c) == 0 ? 1 : 0] = 0;
      const Tensor yd = d->forward(Tensor::empty(empty).to(Device::CUDA));
      BOOST_TEST(yd.numel() == 0);
      require_bits_equal(h->scale(), d->scale());
    }
  }
}

// A batch holding NaN or inf: the CPU refuses it, CUDA skips it (statistics and qparams as they
// were) and counts it, without a host sync.
BOOST_AUTO_TEST_CASE(nonfinite_batches_are_counted_and_skipped) {
  for (const Config& c : configs()) {
    BOOST_TEST_CONTEXT(c.name) {
      auto h = make_fq(c), d = make_fq(c);
      d->to(Device::CUDA);
      h->train(), d->train();
      for (int step = 0; step < 2; ++step) {
        const Tensor x = batch(c.shape, axis_of(c), 500 + step, -1, 1);
        h->forward(x);
        d->forward(x.to(Device::CUDA));
      }
      for (float bad : {std::numeric_limits<float>::quiet_NaN(), kInf}) {
        std::vector<float> v = batch(c.shape, axis_of(c), 510, -3, 3).to_vector<float>();
        v[v.size() / 2] = bad;
        const Tensor x = Tensor::from_vector(v, c.shape);
        BOOST_CHECK_THROW(h->forward(x), Error);
        d->forward(x.to(Device::CUDA));
        require_bits_equal(h->scale(), d->scale());
        require_same_values(h->observer()->min_val(), d->observer()->min_val());
        require_same_values(h->observer()->max_val(), d->observer()->max_val());
      }
      BOOST_TEST(d->observer()->nonfinite_batches().item() == 2.0);
      // the plain observer too
      auto o = quant::make_observer(c.kind, c.spec, params_of(c));
      o->to(Device::CUDA);
      std::vector<float> v = batch(c.shape, axis_of(c), 520, -3, 3).to_vector<float>();
      v[0] = -kInf;
      o->forward(Tensor::from_vector(v, c.shape).to(Device::CUDA));
      BOOST_TEST(o->nonfinite_batches().item() == 1.0);
      BOOST_TEST(!o->has_observed());
    }
  }
}

// Quantizer state observed on the CPU, moved to CUDA, observed further on both, moved back: the
// same buffers as the quantizer that stayed on the CPU.
BOOST_AUTO_TEST_CASE(module_to_moves_quantizer_state) {
  const Config c = configs()[3];
  auto h = make_fq(c), d = make_fq(c);
  h->train(), d->train();
  for (int step = 0; step < 4; ++step) {
    if (step == 2) d->to(Device::CUDA);
    const Tensor x = batch(c.shape, 0, 600 + step, -1, 1 + step);
    h->forward(x);
    d->forward(step >= 2 ? x.to(Device::CUDA) : x);
  }
  for (const auto& [name, t] : d->named_buffers()) BOOST_TEST((t.device() == Device::CUDA));
  d->to(Device::CPU);
  const NamedTensors bh = h->named_buffers(), bd = d->named_buffers();
  BOOST_REQUIRE(bh.size() == bd.size());
  for (std::size_t i = 0; i < bh.size(); ++i) BOOST_TEST_CONTEXT(bh[i].first) {
      BOOST_TEST((bd[i].second.device() == Device::CPU));
      if (bh[i].second.dtype() == DType::Float32)
        require_same_values(bh[i].second, bd[i].second);
      else  // integer buffers (counts, per-channel zero points): the same values
        BOOST_TEST(bh[i].second.to(DType::Float64).to_vector<double>() ==
                       bd[i].second.to(DType::Float64).to_vector<double>(),
                   boost::test_tools::per_element());
    }
}

namespace {

nn::ModulePtr qat_cnn(bool batch_norm) {
  manual_seed(3);
  using namespace nn;
  auto net = std::make_shared<Sequential>();
  net->push_back("quant", std::make_shared<quant::QuantStub>());
  net->push_back("conv1", std::make_shared<Conv2d>(1, 8, 5, Conv2dParams{.padding = {2, 2}}));
  if (batch_norm) net->push_back("bn1", std::make_shared<BatchNorm2d>(8));
  net->push_back("relu1", std::make_shared<ReLU>());
  net->push_back("pool1", std::make_shared<MaxPool2d>(2));
  net->push_back("conv2", std::make_shared<Conv2d>(8, 12, 3, Conv2dParams{.padding = {1, 1}}));
  if (batch_norm) net->push_back("bn2", std::make_shared<BatchNorm2d>(12));
  net->push_back("relu2", std::make_shared<ReLU>());
  net->push_back("pool2", std::make_shared<MaxPool2d>(2));
  net->push_back("flatten", std::make_shared<Flatten>());
  net->push_back("fc", std::make_shared<Linear>(12 * 3 * 3, 5));
  net->push_back("dequant", std::make_shared<quant::DeQuantStub>());
  quant::prepare_qat(*net, quant::QConfigRegistry{});
  return net;
}


// Fake-quantized outputs computed through float32 GEMMs: a last-bit difference before a
// quantizer may move a value by one step. Most elements agree to float tolerance, none by more
// than `steps_abs`.
void require_close_quantized(const Tensor& cpu, const Tensor& gpu, double steps_abs) {
  BOOST_REQUIRE(cpu.shape() == gpu.shape());
  const std::vector<float> a = cpu.to_vector<float>(), b = gpu.to_vector<float>();
  std::size_t off = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double e = std::abs(a[i] - b[i]);
    BOOST_REQUIRE_MESSAGE(e <= steps_abs, "element " << i << ": cpu " << a[i] << ", cuda " << b[i]);
    off += e > 1e-4 * std::max(1.0f, std::abs(a[i]));
  }
  BOOST_TEST(off <= a.size() / 50);
}

}  // namespace

// prepare_qat with int8_default (per-channel symmetric weights, affine activations, Conv-BN
// folded), moved to CUDA: forward and backward as the CPU model.
BOOST_AUTO_TEST_CASE(qat_layers_forward_backward) {
  for (bool bn : {false, true}) {
    BOOST_TEST_CONTEXT("batch norm " << bn) {
      auto h = qat_cnn(bn), d = qat_cnn(bn);
      d->to(Device::CUDA);
      h->train(), d->train();
      const Tensor x = rnd(Shape{5, 1, 12, 12}, 700);
      const Tensor xh = leaf(x), xd = leaf(x.to(Device::CUDA));
      const Tensor yh = (*h)(xh), yd = (*d)(xd);
      require_close_quantized(yh, yd, 0.1);
      const Tensor g = rnd(yh.shape(), 701);
      yh.backward(g);
      yd.backward(g.to(Device::CUDA));
      require_close_quantized(xh.grad(), xd.grad(), 0.05);
      const NamedTensors ph = h->named_parameters(), pd = d->named_parameters();
      for (std::size_t i = 0; i < ph.size(); ++i) BOOST_TEST_CONTEXT(ph[i].first) {
          require_close_quantized(ph[i].second.grad(), pd[i].second.grad(), 0.5);
        }
      const NamedTensors bh = h->named_buffers(), bd = d->named_buffers();
      for (std::size_t i = 0; i < bh.size(); ++i) BOOST_TEST_CONTEXT(bh[i].first) {
          // without batch norm folded in (powf on the device), the weights are the same bits
          if (!bn && bh[i].first.find("weight_fake_quant.scale") != std::string::npos)
            require_bits_equal(bh[i].second, bd[i].second);
        }
    }
  }
}

// The examples' QAT step (int8_default) trained 20 steps on the CPU and on CUDA with the same
// seed and data (train_alike.h), and no batch skipped by an observer.
BOOST_AUTO_TEST_CASE(qat_models_train_alike) {
  struct Case {
    const char* name;
    std::function<nn::ModulePtr()> make;
    Shape input;
  };
  for (const Case& c : {Case{"mlp", [] { return qat::test::qat_mlp(); }, Shape{16, 23}},
                        Case{"cnn-bn", [] { return qat_cnn(true); }, Shape{8, 1, 12, 12}},
                        Case{"cnn", [] { return qat_cnn(false); }, Shape{8, 1, 12, 12}}}) {
    BOOST_TEST_CONTEXT(c.name) {
      auto h = c.make(), d = c.make();
      qat::test::require_trains_alike(h, d, c.input, 8);
      for (const auto& [name, m] : d->named_modules())
        if (auto* q = dynamic_cast<quant::Quantizer*>(m); q && q->observer())
          BOOST_TEST(q->observer()->nonfinite_batches().item() == 0.0);
    }
  }
}

// QAT training on the GPU, twice from the same seed: every parameter and buffer (observer ranges,
// qparams, BN statistics) the same bits after 8 SGD steps; and from the third step on, no step
// asks cudaMalloc for memory (the caching allocator serves the step from its cache).
BOOST_AUTO_TEST_CASE(qat_training_is_reproducible_and_allocation_free) {
  auto train = [](std::uint64_t& fresh_after_warmup, std::uint64_t& fresh_at_end) {
    auto net = qat_cnn(true);
    net->to(Device::CUDA);
    net->train();
    optim::SGD opt(net->named_parameters(), {.lr = 0.02, .momentum = 0.9});
    Generator gen(12);
    for (int step = 0; step < 8; ++step) {
      const Tensor x = rnd(Shape{8, 1, 12, 12}, 700 + step, -1, 1).to(Device::CUDA);
      std::vector<std::int64_t> y(8);
      for (auto& v : y) v = static_cast<std::int64_t>(gen.below(5));
      opt.zero_grad();
      cross_entropy((*net)(x), Tensor::from_vector(y, Shape{8}).to(Device::CUDA)).backward();
      opt.step();
      cuda::synchronize();
      if (step == 2) fresh_after_warmup = cuda::allocator_stats().fresh_allocations;
    }
    fresh_at_end = cuda::allocator_stats().fresh_allocations;
    return net;
  };
  std::uint64_t warm1 = 0, end1 = 0, warm2 = 0, end2 = 0;
  const auto a = train(warm1, end1), b = train(warm2, end2);
  BOOST_TEST(end1 == warm1);  // steps 3..7: no cudaMalloc
  BOOST_TEST(end2 == warm2);
  const NamedTensors sa = a->named_state(), sb = b->named_state();
  BOOST_REQUIRE_EQUAL(sa.size(), sb.size());
  for (std::size_t i = 0; i < sa.size(); ++i) BOOST_TEST_CONTEXT(sa[i].first) {
      const Tensor ha = sa[i].second.to(Device::CPU), hb = sb[i].second.to(Device::CPU);
      BOOST_REQUIRE(ha.shape() == hb.shape());
      BOOST_REQUIRE(ha.dtype() == hb.dtype());
      BOOST_TEST(std::memcmp(ha.raw_data(), hb.raw_data(), ha.nbytes()) == 0);
    }
}

BOOST_AUTO_TEST_SUITE_END()
