// What runs without a GPU: errors of CUDA ops without a device, device mismatches at the op
// seam, CPU kernels refusing device tensors. With a GPU: the allocator, copies, Module::to and
// checkpoints across devices.
#include <boost/test/unit_test.hpp>
#include <sstream>

#include "cuda_test_util.h"
#include "framework/autograd/ops.h"
#include "framework/io/checkpoint.h"
#include "framework/io/restore.h"
#include "framework/kernels/cuda/kernels.h"
#include "framework/nn/nn.h"

using namespace qat;
using qat::test::has_cuda_device;

namespace {
bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::shared_ptr<nn::Sequential> mlp() {
  manual_seed(3);
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(13, 7), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(7, 3)});
}
}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_without_device)

// cuBLAS is not linked but opened on the first GEMM on a GPU (kernels/cuda/gemm.cpp): a process
// starts without it (libcublasLt's start-up took 0.33 s and 210 MB), and where the build has
// CUDA the library opens and has every entry point gemm.cpp calls. No device needed for either.
BOOST_AUTO_TEST_CASE(cublas_is_opened_on_first_use) {
  BOOST_TEST(!test::g_cublas_mapped_at_start);
  if (!cuda::is_built()) {
    BOOST_TEST(contains(error_of([] { kernels::cuda::cublas_library(); }), "cublas_library"));
    return;
  }
  const std::string file = kernels::cuda::cublas_library();
  BOOST_TEST_MESSAGE("cuBLAS: " << file);
  BOOST_TEST(contains(file, "libcublas"));
  BOOST_TEST(test::maps_library("libcublas"));
}

// A CUDA op on a machine without a device (or in a build without CUDA) throws qat::Error naming
// the op, the device and the CUDA error string; nothing crashes.
BOOST_AUTO_TEST_CASE(cuda_op_without_device_is_a_clear_error) {
  if (cuda::is_available()) return;
  const std::string why = cuda::unavailable_reason();
  BOOST_TEST(!why.empty());
  const std::string e = error_of([] { (void)Tensor::ones(Shape{5, 3}).to(Device::CUDA); });
  BOOST_TEST_MESSAGE(e);
  BOOST_TEST(contains(e, "Tensor::to(cuda)"), e);
  BOOST_TEST(contains(e, "cuda:0"), e);
  if (cuda::is_built())  // the CUDA runtime's own words, e.g. "no CUDA-capable device is detected"
    BOOST_TEST(contains(e, why.substr(0, why.find(" ("))), e);
  else
    BOOST_TEST(contains(e, "no CUDA backend"), e);
  BOOST_TEST(!error_of([] { (void)Tensor::zeros(Shape{2}, DType::Float32, Device::CUDA); }).empty());
  // a model: nothing moves, the error names the op
  auto m = mlp();
  BOOST_TEST(contains(error_of([&] { m->to(Device::CUDA); }), "cuda:0"));
  for (const auto& [name, t] : m->named_state()) BOOST_TEST((t.device() == Device::CPU), name);
  cuda::PinnedStager stage;
  const std::string ps = error_of([&] { (void)stage.to_device(Tensor::ones(Shape{4})); });
  BOOST_TEST(contains(ps, "cuda::PinnedStager::to_device"), ps);
  BOOST_TEST(contains(error_of([] { cuda::PinnedStager bad(0); }), "slots must be in [1, 64], got 0"));
  BOOST_TEST(cuda::allocator_stats().fresh_allocations == 0u);
  cuda::synchronize();  // no-ops without a device
  cuda::empty_cache();
}

// An empty CUDA tensor holds no memory and needs no device: the op seam's checks run on it.
BOOST_AUTO_TEST_CASE(device_mismatch_names_both_devices) {
  const Tensor c = Tensor::empty(Shape{0, 4}, DType::Float32, Device::CUDA);
  const Tensor h = Tensor::empty(Shape{0, 4});
  BOOST_TEST((c.device() == Device::CUDA));
  for (const auto& f :
       std::vector<std::function<void()>>{[&] { (void)add(h, c); }, [&] { (void)mul(c, h); },
                                          [&] {
                                            (void)matmul(h, c.view_as_shape(Shape{4, 0}));
                                          }}) {
    const std::string e = error_of(f);
    BOOST_TEST(contains(e, "different devices"), e);
    BOOST_TEST(contains(e, "is on cpu"), e);
    BOOST_TEST(contains(e, "is on cuda"), e);
  }
  const std::string e = error_of([&] { (void)linear(c, Tensor::empty(Shape{2, 4}), Tensor()); });
  BOOST_TEST(
      (contains(
          e, "linear: tensors on different devices: 'x' [0, 4] is on cuda, 'weight' [2, 4] is on cpu")),
      e);
}

// A CPU kernel never reads device memory: ops without a CUDA kernel throw naming themselves.
BOOST_AUTO_TEST_CASE(cpu_kernels_refuse_cuda_tensors) {
  const Tensor c = Tensor::empty(Shape{0, 3}, DType::Float32, Device::CUDA);
  const std::string e = error_of([&] { (void)clamp(c, -1, 1); });
  BOOST_TEST(contains(e, "clamp: not implemented on CUDA yet"), e);
  BOOST_TEST(
      contains(error_of([&] { (void)transpose(c, 0, 1); }), "transpose: not implemented on CUDA yet"));
  BOOST_TEST(contains(error_of([&] { (void)cat({c, c}, 0); }), "cat: not implemented on CUDA yet"));
  BOOST_TEST(contains(error_of([&] { (void)c.data<float>(); }), "is on cuda"));
  BOOST_TEST(contains(error_of([&] { (void)Tensor::empty(Shape{0}).cuda_data<float>(); }), "is on cpu"));
  // ops with CUDA kernels accept it and launch nothing
  BOOST_TEST((relu(c).device() == Device::CUDA));
  BOOST_TEST((add(c, c).device() == Device::CUDA));
  BOOST_TEST((sum(c, 1).device() == Device::CUDA));  // shape [0]
  BOOST_TEST((sigmoid(c).device() == Device::CUDA));
  BOOST_TEST((log_softmax(c, 1).device() == Device::CUDA));
  BOOST_TEST((max(c, 1).device() == Device::CUDA));
  BOOST_TEST((c.to(Device::CPU).device() == Device::CPU));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(cuda_runtime, *boost::unit_test::precondition(has_cuda_device))

BOOST_AUTO_TEST_CASE(copies_round_trip) {
  Generator gen(1);
  for (std::int64_t n : {0, 1, 257, 100003}) {
    const Tensor h = Tensor::uniform(Shape{n}, -3, 3, gen);
    const Tensor d = h.to(Device::CUDA);
    BOOST_TEST((d.device() == Device::CUDA));
    test::require_bits_equal(h, d.to(Device::CPU));
    test::require_bits_equal(h, d.clone());
  }
  const Tensor z = Tensor::full(Shape{3, 5}, 2.5, DType::Float32, Device::CUDA);
  BOOST_TEST(z.to_vector<float>() == std::vector<float>(15, 2.5f), boost::test_tools::per_element());
  BOOST_TEST(sum(z).item() == 37.5);
  const Tensor i8 = Tensor::full(Shape{7}, -3, DType::Int8, Device::CUDA);
  BOOST_TEST(i8.to_vector<std::int8_t>() == std::vector<std::int8_t>(7, -3),
             boost::test_tools::per_element());
  std::ostringstream os;
  os << z;
  BOOST_TEST(contains(os.str(), "device cuda"), os.str());
}

// Out of device memory: an error naming the op, the size, the device and CUDA's reason (after the
// allocator gave its cache back and tried again); the device stays usable.
BOOST_AUTO_TEST_CASE(out_of_memory_is_a_clear_error) {
  const Tensor before = Tensor::full(Shape{1000}, 1.5, DType::Float32, Device::CUDA);
  try {
    (void)Tensor::empty(Shape{std::int64_t{1} << 40}, DType::Float32, Device::CUDA);  // 4 TiB
    BOOST_FAIL("a 4 TiB tensor was allocated");
  } catch (const Error& e) {
    const std::string m = e.what();
    BOOST_TEST(contains(m, "cudaMalloc of"), m);
    BOOST_TEST(contains(m, "cuda:0"), m);
    BOOST_TEST(contains(m, "out of memory"), m);
  }
  BOOST_TEST(sum(before).item() == 1500.0);
  BOOST_TEST(sum(Tensor::full(Shape{1000}, 2.0, DType::Float32, Device::CUDA)).item() == 2000.0);
}

// Batches through pinned buffers: the values arrive, whatever the order of sizes and dtypes, with
// more batches in flight than buffers (each buffer waits for its previous copy).
BOOST_AUTO_TEST_CASE(pinned_stager_copies_batches) {
  cuda::PinnedStager stage(2);
  Generator gen(4);
  std::vector<Tensor> host, dev;
  for (std::int64_t n : {7, 1000003, 0, 33, 65537, 5}) {
    host.push_back(Tensor::uniform(Shape{n, 3}, -2, 2, gen));
    dev.push_back(stage.to_device(host.back()));
    host.push_back(Tensor::full(Shape{n}, -n, DType::Int64));
    dev.push_back(stage.to_device(host.back()));
  }
  for (std::size_t i = 0; i < host.size(); ++i) {
    BOOST_TEST((dev[i].device() == Device::CUDA));
    BOOST_TEST((dev[i].shape() == host[i].shape()));
    if (host[i].dtype() == DType::Int64)
      BOOST_TEST(host[i].to_vector<std::int64_t>() == dev[i].to_vector<std::int64_t>(),
                 boost::test_tools::per_element());
    else
      test::require_bits_equal(host[i], dev[i]);
  }
  BOOST_TEST((stage.to_device(dev[0]).device() == Device::CUDA));  // already there: itself
}

// A training step in steady state calls cudaMalloc zero times; empty_cache returns the cache.
BOOST_AUTO_TEST_CASE(allocator_steady_state_and_statistics) {
  auto m = mlp();
  m->to(Device::CUDA);
  Generator gen(2);
  const Tensor x = Tensor::uniform(Shape{31, 13}, -1, 1, gen).to(Device::CUDA);
  auto step = [&] {
    for (const Tensor& p : m->parameters()) const_cast<Tensor&>(p).zero_grad();
    Tensor loss = mean(mul(m->forward(x), m->forward(x)));
    loss.backward();
  };
  step();
  step();
  const AllocatorStats warm = cuda::allocator_stats();
  for (int i = 0; i < 5; ++i) step();
  cuda::synchronize();
  const AllocatorStats after = cuda::allocator_stats();
  BOOST_TEST(after.fresh_allocations == warm.fresh_allocations);  // no cudaMalloc
  BOOST_TEST(after.reused_allocations > warm.reused_allocations);
  BOOST_TEST(after.bytes_reserved >= after.bytes_cached);
  cuda::empty_cache();
  BOOST_TEST(cuda::allocator_stats().bytes_cached == 0u);
}

BOOST_AUTO_TEST_CASE(module_to_round_trip_moves_state_in_place) {
  auto m = mlp();
  const NamedTensors before = m->named_state();
  std::vector<std::vector<float>> values;
  for (const auto& [n, t] : before) values.push_back(t.to_vector<float>());
  const Tensor w = m->parameters()[0];  // a handle held elsewhere (an optimizer's)
  m->to(Device::CUDA);
  BOOST_TEST((w.device() == Device::CUDA));
  for (const auto& [n, t] : m->named_state()) BOOST_TEST((t.device() == Device::CUDA), n);
  m->to(Device::CPU);
  std::size_t i = 0;
  for (const auto& [n, t] : m->named_state()) {
    BOOST_TEST((t.device() == Device::CPU), n);
    BOOST_TEST(t.to_vector<float>() == values[i++], boost::test_tools::per_element());
  }
}

// Checkpoints are device-independent: saved from CUDA, loaded on CPU, and the reverse.
BOOST_AUTO_TEST_CASE(checkpoints_cross_devices) {
  auto gpu = mlp();
  gpu->to(Device::CUDA);
  const std::string bytes = io::to_bytes(io::capture(*gpu));
  auto cpu = mlp();
  for (const Tensor& p : cpu->parameters()) p.fill_(0);
  io::load_into(*cpu, io::from_bytes(bytes));
  auto ref = mlp();
  for (std::size_t k = 0; k < ref->parameters().size(); ++k)
    test::require_bits_equal(ref->parameters()[k], cpu->parameters()[k]);
  auto back = mlp();
  back->to(Device::CUDA);
  for (const Tensor& p : back->parameters()) p.fill_(0);
  io::load_into(*back, io::from_bytes(io::to_bytes(io::capture(*ref))));
  for (std::size_t k = 0; k < ref->parameters().size(); ++k) {
    BOOST_TEST((back->parameters()[k].device() == Device::CUDA));
    test::require_bits_equal(ref->parameters()[k], back->parameters()[k]);
  }
}

BOOST_AUTO_TEST_SUITE_END()
