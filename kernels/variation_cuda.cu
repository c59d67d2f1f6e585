// CUDA implementations of the variation ops. One warp per child: the 32 lanes run the same per-tree code
// as the CPU (variation.h) with identical random decisions and split the copies, so a seed gives the same
// children on both backends and the copies are coalesced.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

#include "variation_ops.h"

namespace gprl {
namespace {

constexpr int VARY_WARP = 32;
constexpr int VARY_THREADS = 128;  // 4 children per block

// 96 registers a thread (unbounded) held occupancy to 20 warps an SM and the kernel stalled on latency
// (ncu, H100); capping at 64 registers lets 8 blocks of 4 warps run per SM.
__global__ void __launch_bounds__(VARY_THREADS, 8) vary_kernel(const uint8_t* kind, const int16_t* code, const uint8_t* out, const float* value,
                            const int16_t* size, int64_t P, const uint8_t* dkind, const int16_t* dcode,
                            const uint8_t* dout, const float* dvalue, const int16_t* dsize, int64_t Q, int LD,
                            const int64_t* parent, const int64_t* donor, const int* op, const int* node,
                            const int* dnode, const float* weights, VaryParams p, int64_t N, uint8_t* ck,
                            int16_t* cc, uint8_t* co, float* cv, int16_t* cs) {
  __shared__ float w[NUM_FUNCTIONS];
  extern __shared__ int hist[];  // the depth check's scratch: max_len + 1 ints a warp
  for (int f = threadIdx.x; f < NUM_FUNCTIONS; f += blockDim.x) w[f] = weights[f];
  __syncthreads();
  const int64_t t = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / VARY_WARP;
  const int lane = threadIdx.x % VARY_WARP;
  if (t >= N) return;  // uniform over the warp: the warp stays whole for __syncwarp
  const int64_t L = p.max_len;
  const int64_t ia = clamp_index(parent[t], P) * L;
  const int64_t ib = Q > 0 ? clamp_index(donor[t], Q) * LD : 0;
  TreeRef a{kind + ia, code + ia, out + ia, value + ia, size + ia};
  TreeRef b{dkind + ib, dcode + ib, dout + ib, dvalue + ib, dsize + ib};
  const int64_t o = t * L;
  TreeOut d{ck + o, cc + o, co + o, cv + o, cs + o};
  vary_tree(t, op[t], a, b, Q > 0 && LD > 0, node[t], dnode[t], w, p, d, lane, VARY_WARP,
            hist + (threadIdx.x / VARY_WARP) * (L + 1));
}

__global__ void uniform_kernel(int64_t n, uint64_t seed, float* u) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) u[i] = Philox(seed, uint64_t(i)).uniform();
}

int vary_blocks(int64_t n, int per_block) { return int((n + per_block - 1) / per_block); }

}  // namespace

Pop5 vary_cuda(const at::Tensor& kind, const at::Tensor& code, const at::Tensor& out, const at::Tensor& value,
               const at::Tensor& size, const at::Tensor& dkind, const at::Tensor& dcode, const at::Tensor& dout,
               const at::Tensor& dvalue, const at::Tensor& dsize, const at::Tensor& parent, const at::Tensor& donor,
               const at::Tensor& op, const at::Tensor& node, const at::Tensor& dnode, const at::Tensor& weights,
               int64_t n_in, int64_t n_out, int64_t max_depth, int64_t subtree_depth, double xo_leaf_prob,
               double multi_prob, double const_sigma, double const_prob, double const_low, double const_high,
               double output_prob, double leaf_prob, int64_t seed) {
  check_population(kind, code, out, value, size);
  check_population(dkind, dcode, dout, dvalue, dsize);
  check_vary_args(kind, dkind, parent, donor, op, node, dnode, weights);
  c10::cuda::CUDAGuard guard(kind.device());
  const int64_t N = parent.numel(), P = kind.size(0), L = kind.size(1), Q = dkind.size(0), LD = dkind.size(1);
  VaryParams p = vary_params(L, n_in, n_out, max_depth, subtree_depth, xo_leaf_prob, multi_prob, const_sigma,
                             const_prob, const_low, const_high, output_prob, leaf_prob, seed);
  auto children = empty_children(kind, N);
  if (N == 0) return children;
  auto& [ck, cc, co, cv, cs] = children;
  at::Tensor w = weights.contiguous(), pa = parent.contiguous(), da = donor.contiguous(), oa = op.contiguous(),
             na = node.contiguous(), dna = dnode.contiguous();
  constexpr int per_block = VARY_THREADS / VARY_WARP;
  const size_t smem = size_t(per_block) * (L + 1) * sizeof(int);
  if (smem > 48 * 1024)  // long trees (max_len > ~3000)
    C10_CUDA_CHECK(cudaFuncSetAttribute(vary_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  vary_kernel<<<vary_blocks(N, per_block), VARY_THREADS, smem, c10::cuda::getCurrentCUDAStream()>>>(
      kind.data_ptr<uint8_t>(), code.data_ptr<int16_t>(), out.data_ptr<uint8_t>(), value.data_ptr<float>(),
      size.data_ptr<int16_t>(), P, dkind.data_ptr<uint8_t>(), dcode.data_ptr<int16_t>(), dout.data_ptr<uint8_t>(),
      dvalue.data_ptr<float>(), dsize.data_ptr<int16_t>(), Q, int(LD), pa.data_ptr<int64_t>(),
      da.data_ptr<int64_t>(), oa.data_ptr<int>(), na.data_ptr<int>(), dna.data_ptr<int>(), w.data_ptr<float>(), p,
      N, ck.data_ptr<uint8_t>(), cc.data_ptr<int16_t>(), co.data_ptr<uint8_t>(), cv.data_ptr<float>(),
      cs.data_ptr<int16_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return children;
}

at::Tensor uniform_cuda(const at::Tensor& like, int64_t n, int64_t seed) {
  TORCH_CHECK(n >= 0, "gprl: n must be >= 0");
  c10::cuda::CUDAGuard guard(like.device());
  at::Tensor u = at::empty({n}, like.options().dtype(at::kFloat));
  if (n == 0) return u;
  constexpr int T = 256;
  uniform_kernel<<<vary_blocks(n, T), T, 0, c10::cuda::getCurrentCUDAStream()>>>(n, uint64_t(seed),
                                                                                u.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return u;
}

}  // namespace gprl

TORCH_LIBRARY_IMPL(gprl, CUDA, m) {
  m.impl("vary", &gprl::vary_cuda);
  m.impl("uniform", &gprl::uniform_cuda);
}
