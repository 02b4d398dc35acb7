// Optimizer steps on CUDA (kernels.h): every parameter of a step in one launch. The host splits
// the tensors into chunks of kChunk elements, uploads the chunk table, and block b updates chunk
// b with kernels::sgd_step / adam_step's operations (cpu/optim.h) in the same order.
#include <cmath>

#include "framework/kernels/cuda/kernels.h"
#include "framework/kernels/cuda/launch.h"
#include "framework/kernels/cuda/runtime.h"

namespace qat::kernels::cuda {
namespace {

using i64 = std::int64_t;
constexpr i64 kChunk = 16 * kBlock;  // elements a block updates

template <class T>
struct Chunk {
  StepTensor<T> t;
  i64 begin, end;
};

// torch.optim.SGD:  d = g + wd p;  b = first ? d : momentum b + keep d;  d = nesterov ? d + momentum b :
// b; p += neg_lr d
template <class T>
__global__ void sgd_kernel(const Chunk<T>* chunks, SgdScalars<T> s) {
  const Chunk<T>& ch = chunks[blockIdx.x];
  const StepTensor<T>& t = ch.t;
  for (i64 i = ch.begin + threadIdx.x; i < ch.end; i += blockDim.x) {
    T d = t.g[i];
    if (s.decay) d = d + s.wd * t.p[i];
    if (t.s0) {
      const T b = t.first ? d : t.s0[i] * s.momentum + s.keep * d;
      t.s0[i] = b;
      d = s.nesterov ? d + s.momentum * b : b;
    }
    t.p[i] = t.p[i] + s.neg_lr * d;
  }
}

// torch.optim.Adam / AdamW, multiply-adds fused as the CPU's Highway MulAdd:
//   g += wd p (l2) or p *= shrink (decoupled);  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//   v_max = max(v_max, v);  p += step m / (sqrt(v or v_max) / bc2_sqrt + eps)
template <class T>
__global__ void adam_kernel(const Chunk<T>* chunks, AdamScalars<T> s) {
  const Chunk<T>& ch = chunks[blockIdx.x];
  const StepTensor<T>& t = ch.t;
  for (i64 i = ch.begin + threadIdx.x; i < ch.end; i += blockDim.x) {
    T g = t.g[i], p = t.p[i];
    if (s.l2) g = fma(s.wd, p, g);
    if (s.decoupled) p = p * s.shrink;
    const T m = fma(s.one_minus_b1, g, t.s0[i] * s.b1);
    const T v = fma(s.one_minus_b2 * g, g, t.s1[i] * s.b2);
    t.s0[i] = m;
    t.s1[i] = v;
    T second = v;
    if (t.s2) {
      const T old = t.s2[i];
      second = old < v ? v : old;
      t.s2[i] = second;
    }
    const T denom = sqrt(second) / t.bc2_sqrt + s.eps;
    t.p[i] = p + t.neg_step_size * m / denom;
  }
}

// The chunk table on the device for one launch (back to the pool afterwards: reuse is ordered
// by the one stream).
template <class T>
class ChunkTable {
 public:
  ChunkTable(const std::vector<StepTensor<T>>& ts, const char* fn) {
    std::vector<Chunk<T>> host;
    for (const StepTensor<T>& t : ts)
      for (i64 b = 0; b < t.n; b += kChunk) host.push_back({t, b, std::min(t.n, b + kChunk)});
    size_ = host.size();
    if (size_ == 0) return;
    const std::size_t bytes = size_ * sizeof(Chunk<T>);
    dev_ = static_cast<Chunk<T>*>(::qat::cuda::detail::allocate(bytes, &capacity_, fn));
    ::qat::cuda::detail::copy(dev_, Device::CUDA, host.data(), Device::CPU, bytes, fn);
  }
  ~ChunkTable() {
    if (dev_) ::qat::cuda::detail::release(dev_, capacity_);
  }
  ChunkTable(const ChunkTable&) = delete;
  ChunkTable& operator=(const ChunkTable&) = delete;
  const Chunk<T>* data() const { return dev_; }
  unsigned size() const { return static_cast<unsigned>(size_); }

 private:
  Chunk<T>* dev_ = nullptr;
  std::size_t size_ = 0, capacity_ = 0;
};

template <class T>
void launch_sgd(const std::vector<StepTensor<T>>& ts, const SgdScalars<T>& s) {
  const ChunkTable<T> table(ts, "SGD::step");
  if (table.size() == 0) return;
  sgd_kernel<<<table.size(), kBlock, 0, stream("SGD::step")>>>(table.data(), s);
  QAT_CUDA_CHECK_LAUNCH("SGD::step");
}

template <class T>
void launch_adam(const std::vector<StepTensor<T>>& ts, const AdamScalars<T>& s) {
  const char* fn = s.decoupled ? "AdamW::step" : "Adam::step";
  const ChunkTable<T> table(ts, fn);
  if (table.size() == 0) return;
  adam_kernel<<<table.size(), kBlock, 0, stream(fn)>>>(table.data(), s);
  QAT_CUDA_CHECK_LAUNCH(fn);
}

}  // namespace

void sgd_step(const std::vector<StepTensor<float>>& ts, const SgdScalars<float>& s) {
  launch_sgd(ts, s);
}
void sgd_step(const std::vector<StepTensor<double>>& ts, const SgdScalars<double>& s) {
  launch_sgd(ts, s);
}
void adam_step(const std::vector<StepTensor<float>>& ts, const AdamScalars<float>& s) {
  launch_adam(ts, s);
}
void adam_step(const std::vector<StepTensor<double>>& ts, const AdamScalars<double>& s) {
  launch_adam(ts, s);
}

}  // namespace qat::kernels::cuda
