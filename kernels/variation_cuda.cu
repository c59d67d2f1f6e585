// CUDA implementations of the variation ops. One warp per child: the 32 lanes run the same per-tree code
// as the CPU (variation.h) with identical random decisions and split the copies, so a seed gives the same
// children on both backends and the copies are coalesced.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>

#include "variation_ops.h"

namespace gprl {
namespace {

constexpr int VARY_WARP = 32;

// Shared memory of one warp: its parent and donor rows (10 bytes a node) and the child's sizes. The
// per-tree logic scans these node by node; from shared memory instead of global memory that chain of
// dependent loads costs tens of cycles a step instead of hundreds.
__host__ __device__ size_t tree_bytes(int64_t L) { return size_t((10 * L + 15) / 16 * 16); }
__host__ __device__ size_t warp_smem(int64_t L, int64_t LD) {
  return tree_bytes(L) + tree_bytes(LD) + size_t((2 * L + 15) / 16 * 16);
}

// Copies the first size[0] nodes of a row into `buf` (layout value | code | size | kind | out).
__device__ TreeRef stage_row(const TreeRef& g, int L, char* buf, int lane) {
  float* v = reinterpret_cast<float*>(buf);
  int16_t* c = reinterpret_cast<int16_t*>(buf + 4 * L);
  int16_t* s = reinterpret_cast<int16_t*>(buf + 6 * L);
  uint8_t* k = reinterpret_cast<uint8_t*>(buf + 8 * L);
  uint8_t* o = k + L;
  int len = L > 0 ? g.size[0] : 0;
  len = len < 0 ? 0 : (len > L ? L : len);
  for (int i = lane; i < len; i += VARY_WARP) {
    v[i] = g.value[i]; c[i] = g.code[i]; s[i] = g.size[i]; k[i] = g.kind[i]; o[i] = g.out[i];
  }
  __syncwarp();
  return {k, c, o, v, s};
}

__global__ void vary_kernel(const uint8_t* kind, const int16_t* code, const uint8_t* out, const float* value,
                            const int16_t* size, int64_t P, const uint8_t* dkind, const int16_t* dcode,
                            const uint8_t* dout, const float* dvalue, const int16_t* dsize, int64_t Q, int LD,
                            const int64_t* parent, const int64_t* donor, const int* op, const int* node,
                            const int* dnode, const float* weights, VaryParams p, int64_t N, uint8_t* ck,
                            int16_t* cc, uint8_t* co, float* cv, int16_t* cs) {
  extern __shared__ __align__(16) char smem[];
  __shared__ float w[NUM_FUNCTIONS];
  for (int f = threadIdx.x; f < NUM_FUNCTIONS; f += blockDim.x) w[f] = weights[f];
  __syncthreads();
  const int64_t t = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / VARY_WARP;
  const int lane = threadIdx.x % VARY_WARP;
  if (t >= N) return;  // uniform over the warp: the warp stays whole for __syncwarp
  const int L = p.max_len;
  const bool has_donor = Q > 0 && LD > 0;
  char* mine = smem + (threadIdx.x / VARY_WARP) * warp_smem(L, LD);
  const int64_t ia = clamp_index(parent[t], P) * L;
  const TreeRef a = stage_row({kind + ia, code + ia, out + ia, value + ia, size + ia}, L, mine, lane);
  TreeRef b = a;
  if (has_donor) {
    const int64_t ib = clamp_index(donor[t], Q) * LD;
    b = stage_row({dkind + ib, dcode + ib, dout + ib, dvalue + ib, dsize + ib}, LD, mine + tree_bytes(L), lane);
  }
  int16_t* size_scratch = reinterpret_cast<int16_t*>(mine + tree_bytes(L) + tree_bytes(LD));
  const int64_t o = t * L;
  TreeOut d{ck + o, cc + o, co + o, cv + o, cs + o};
  vary_tree(t, op[t], a, b, has_donor, node[t], dnode[t], w, p, d, lane, VARY_WARP, size_scratch);
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
  const size_t per_warp = warp_smem(L, LD);
  const int per_block = int(std::max<size_t>(1, std::min<size_t>(4, (48 * 1024) / per_warp)));
  const size_t smem = per_block * per_warp;
  TORCH_CHECK(smem <= 200 * 1024, "gprl: max_len too large for vary");
  if (smem > 48 * 1024)
    C10_CUDA_CHECK(cudaFuncSetAttribute(vary_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  vary_kernel<<<vary_blocks(N, per_block), per_block * VARY_WARP, smem, c10::cuda::getCurrentCUDAStream()>>>(
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
