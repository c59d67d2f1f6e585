// Shared by the CUDA evaluators, eval_cuda.cu (interpreter: hybrid, warp and batched kernels) and
// eval_level_cuda.cu (level strategy): the staged tree, the loss terms and reductions, and the host helpers
// that both launch with. Included by .cu files only.
#pragma once
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

#include "nodes.h"
#include "ops.h"
#include "strategy.h"
#include "trees.h"

namespace gprl {

// Defined in eval_cuda.cu (comments there).
at::Tensor longest_first(const at::Tensor& size, int64_t nseg, int threads);
void set_smem(const void* kernel, size_t bytes);
void finish_losses(const double* partial, int64_t P, int64_t nseg, int64_t n_out, int64_t metric, int64_t D,
                   const double* wsum, const double* ystat, at::Tensor& result);

// Strategy 5 (STRATEGY_LEVEL, eval_level_cuda.cu) for forward_cuda and fitness_cuda, which have checked the
// arguments, made Xt (xc) and yt (yc) contiguous and set the device.
void forward_level(const at::Tensor& kind, const at::Tensor& code, const at::Tensor& out,
                   const at::Tensor& value, const at::Tensor& size, const at::Tensor& xc, int64_t n_out,
                   at::Tensor& Y);
void fitness_level(const at::Tensor& kind, const at::Tensor& code, const at::Tensor& out,
                   const at::Tensor& value, const at::Tensor& size, const at::Tensor& xc,
                   const at::Tensor& yc, const float* wp, const double* wsum_p, const double* ystat_p,
                   int64_t metric, at::Tensor& result);

// Internal linkage: each .cu file compiles its own copy (device code is not linked across files).
namespace {

constexpr int WARP = 32;

cudaStream_t stream() { return c10::cuda::getCurrentCUDAStream(); }

// A node's kind byte, output index and code in one 32-bit word: the interpreter reads a node with one load
// instead of a load of its kind and, after branching on it, a dependent load of its code.
struct Node {
  uint32_t w;
  __device__ __forceinline__ static Node pack(uint8_t kind, uint8_t out, int16_t code) {
    return {uint32_t(kind) | uint32_t(out) << 8 | uint32_t(uint16_t(code)) << 16};
  }
  __device__ __forceinline__ uint8_t kind() const { return uint8_t(w); }
  __device__ __forceinline__ uint8_t out() const { return uint8_t(w >> 8); }
  __device__ __forceinline__ int16_t code() const { return int16_t(w >> 16); }
};

// A tree staged in shared memory (stage_tree): packed nodes, constants and its length.
struct Tree {
  const uint32_t* node;
  const float* value;
  int len;
  __device__ __forceinline__ Node at(int i) const { return {node[i]}; }
};

// Tree p's length, or -1 (eval_tree rejects it) where size[p][0] lies outside [0, L]: staging or reading
// that many nodes would run past the tree's slot, and for the last tree past the population.
__device__ __forceinline__ int checked_len(const int16_t* size, int64_t p, int L) {
  const int len = size[p * L];
  return len >= 0 && len <= L ? len : -1;
}

// The tree the i-th block evaluates: the i-th of `order` (longest_first) when ORDERED, else tree i. A
// template parameter: a tree index loaded from memory instead of computed from blockIdx takes the kernels
// 2-8 more registers, which cost up to 6% in large calls.
template <bool ORDERED>
__device__ __forceinline__ int64_t tree_at(const int* order, int64_t i) { return ORDERED ? order[i] : i; }

// Copies nodes first, first + step, ... of tree p into `buf` (layout: value[L] | packed node[L]) and
// returns a view; the caller synchronises.
__device__ __forceinline__ Tree copy_tree(const uint8_t* kind, const int16_t* code, const uint8_t* out,
                                          const float* value, const int16_t* size, int64_t p, int L,
                                          char* buf, int first, int step) {
  float* s_value = reinterpret_cast<float*>(buf);
  uint32_t* s_node = reinterpret_cast<uint32_t*>(buf + 4 * L);
  const int64_t o = p * L;
  const int len = checked_len(size, p, L);
  for (int i = first; i < len; i += step) {
    s_value[i] = value[o + i];
    s_node[i] = Node::pack(kind[o + i], out[o + i], code[o + i]).w;
  }
  return {s_node, s_value, len};
}

// Copies tree p into shared memory with the whole block.
__device__ Tree stage_tree(const uint8_t* kind, const int16_t* code, const uint8_t* out, const float* value,
                           const int16_t* size, int64_t p, int L, char* smem) {
  const Tree t = copy_tree(kind, code, out, value, size, p, L, smem, threadIdx.x, blockDim.x);
  __syncthreads();
  return t;
}

__host__ __device__ size_t tree_smem_bytes(int64_t L) { return size_t((8 * L + 15) / 16 * 16); }

__device__ __forceinline__ double block_sum(double v, double* scratch) {
#pragma unroll
  for (int off = WARP / 2; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, nwarps = blockDim.x / WARP;
  __syncthreads();  // scratch may still be read by the previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  double s = 0.0;
  if (threadIdx.x == 0)
    for (int w = 0; w < nwarps; ++w) s += scratch[w];
  return s;
}

// One row's terms (add_row_terms, ops.h), times the row's weight when weights were given.
__device__ __forceinline__ void row_terms(double* s, float pred, float y, const float* W, int64_t row,
                                          int metric) {
  add_row_terms(s, pred, y, W ? double(W[row]) : 1.0, metric);
}

// Loss of output k from its summed terms: a mean over `D` rows or over the weight sum when weights were given
// (read on the device), or the scaled MSE from the target's sums ystat [n_out, 3].
__device__ __forceinline__ double finish_metric(const double* s, int64_t D, const double* wsum,
                                                const double* ystat, int k, int metric) {
  return finish_terms(s, wsum ? *wsum : double(D), ystat ? ystat + 3 * k : nullptr, metric);
}

// In-place inclusive prefix sum of a[0, n) by the whole block (every thread calls it; ends synchronised).
__device__ void block_scan(int* a, int n) {
  __shared__ int warp_total[WARP];
  const int T = blockDim.x, lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
  const int chunk = (n + T - 1) / T, lo = min(n, int(threadIdx.x) * chunk), hi = min(n, lo + chunk);
  int own = 0;
  for (int i = lo; i < hi; ++i) own += a[i];
  int x = own;
#pragma unroll
  for (int off = 1; off < WARP; off *= 2) {
    const int y = __shfl_up_sync(0xffffffffu, x, off);
    if (lane >= off) x += y;
  }
  if (lane == WARP - 1) warp_total[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = lane < T / WARP ? warp_total[lane] : 0;
#pragma unroll
    for (int off = 1; off < WARP; off *= 2) {
      const int y = __shfl_up_sync(0xffffffffu, w, off);
      if (lane >= off) w += y;
    }
    if (lane < T / WARP) warp_total[lane] = w;
  }
  __syncthreads();
  int run = x - own + (warp > 0 ? warp_total[warp - 1] : 0);
  for (int i = lo; i < hi; ++i) a[i] = run += a[i];
  __syncthreads();
}

const int* data_or_null(const at::Tensor& order) { return order.defined() ? order.data_ptr<int>() : nullptr; }

}  // namespace
}  // namespace gprl
