// CUDA implementations of the structure ops (generate, node_depth, validate): one thread per tree, running
// the same per-tree code as the CPU (trees.h, structure_cpu.cpp), so a seed gives identical trees on both
// backends.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

#include "nodes.h"
#include "ops.h"
#include "trees.h"

namespace gprl {
namespace {

cudaStream_t stream() { return c10::cuda::getCurrentCUDAStream(); }

__global__ void generate_kernel(GenParams g, const float* weights, int64_t P, uint8_t* kind, int16_t* code,
                                uint8_t* out, float* value, int16_t* size) {
  __shared__ float w[NUM_FUNCTIONS];
  for (int f = threadIdx.x; f < NUM_FUNCTIONS; f += blockDim.x) w[f] = weights[f];
  __syncthreads();
  int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= P) return;
  int64_t o = t * g.max_len;
  generate_tree(t, g, w, kind + o, code + o, out + o, value + o, size + o);
}

__global__ void node_depth_kernel(const int16_t* size, int64_t P, int L, int16_t* depth, int16_t* scratch) {
  int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < P) node_depths(size + t * L, L, depth + t * L, scratch + t * L);
}

__global__ void validate_kernel(const uint8_t* kind, const int16_t* code, const uint8_t* out,
                                const float* value, const int16_t* size, int64_t P, int L, int n_in,
                                int n_out, int* scratch, int* err) {
  int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= P) return;
  int64_t o = t * L;
  err[t] = validate_tree(kind + o, code + o, out + o, value + o, size + o, L, n_in, n_out, scratch + 2 * o,
                         scratch + 2 * o + L);
}

int blocks_for(int64_t n, int threads) { return int((n + threads - 1) / threads); }

Pop5 generate_cuda(const at::Tensor& weights, int64_t pop_size, int64_t max_len, int64_t n_in, int64_t n_out,
                   int64_t method, int64_t min_depth, int64_t max_depth, double leaf_prob, double const_prob,
                   double const_low, double const_high, double output_prob, int64_t seed) {
  GenParams g = generate_params(weights, max_len, n_in, n_out, method, min_depth, max_depth, leaf_prob,
                                const_prob, const_low, const_high, output_prob, seed);
  c10::cuda::CUDAGuard guard(weights.device());
  auto [kind, code, out, value, size] = empty_population(weights.options(), pop_size, max_len);
  if (pop_size == 0) return {kind, code, out, value, size};
  at::Tensor w = weights.contiguous();
  constexpr int T = 128;
  generate_kernel<<<blocks_for(pop_size, T), T, 0, stream()>>>(
      g, w.data_ptr<float>(), pop_size, kind.data_ptr<uint8_t>(), code.data_ptr<int16_t>(),
      out.data_ptr<uint8_t>(), value.data_ptr<float>(), size.data_ptr<int16_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {kind, code, out, value, size};
}

at::Tensor node_depth_cuda(const at::Tensor& size) {
  TORCH_CHECK(size.dim() == 2 && size.scalar_type() == at::kShort, "gprl: size must be int16 [P, max_len]");
  c10::cuda::CUDAGuard guard(size.device());
  at::Tensor s = size.contiguous();
  at::Tensor depth = at::empty_like(s), scratch = at::empty_like(s);
  int64_t P = s.size(0);
  if (P == 0) return depth;
  constexpr int T = 128;
  node_depth_kernel<<<blocks_for(P, T), T, 0, stream()>>>(
      s.data_ptr<int16_t>(), P, int(s.size(1)), depth.data_ptr<int16_t>(), scratch.data_ptr<int16_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return depth;
}

at::Tensor validate_cuda(const at::Tensor& kind, const at::Tensor& code, const at::Tensor& out,
                         const at::Tensor& value, const at::Tensor& size, int64_t n_in, int64_t n_out) {
  check_population(kind, code, out, value, size);
  c10::cuda::CUDAGuard guard(kind.device());
  int64_t P = kind.size(0), L = kind.size(1);
  at::Tensor err = at::empty({P}, kind.options().dtype(at::kInt));
  if (P == 0) return err;
  at::Tensor scratch = at::empty({P, 2 * L}, kind.options().dtype(at::kInt));
  constexpr int T = 128;
  validate_kernel<<<blocks_for(P, T), T, 0, stream()>>>(
      kind.data_ptr<uint8_t>(), code.data_ptr<int16_t>(), out.data_ptr<uint8_t>(), value.data_ptr<float>(),
      size.data_ptr<int16_t>(), P, int(L), int(n_in), int(n_out), scratch.data_ptr<int>(),
      err.data_ptr<int>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return err;
}

}  // namespace
}  // namespace gprl

TORCH_LIBRARY_IMPL(gprl, CUDA, m) {
  m.impl("generate", &gprl::generate_cuda);
  m.impl("node_depth", &gprl::node_depth_cuda);
  m.impl("validate", &gprl::validate_cuda);
}
