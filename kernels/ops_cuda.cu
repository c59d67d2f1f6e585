// CUDA implementations of the gprl ops.
//
// Structure ops (generate, node_depth, validate): one thread per tree, running the same per-tree code as
// the CPU (trees.h), so a seed gives identical trees on both backends.
// Evaluation over a shared dataset (forward, fitness): one block per (tree, segment of rows); the tree is
// staged once in shared memory and every thread evaluates R rows of the segment at once, so the per-node
// dispatch is amortised over R rows and uniform across the warp; the level strategy instead evaluates a
// tree one depth level at a time (eval_levels). Where a block takes a whole tree, blocks take the trees
// longest first (longest_first_kernel). Batched evaluation (policy case): one thread per (tree, row).
// Fitness reduces per block, writes one partial per (tree, segment, output) and a second kernel sums them in
// a fixed order: deterministic, no float atomics.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

#include <map>
#include <mutex>
#include <type_traits>

#include "nodes.h"
#include "ops.h"
#include "strategy.h"
#include "trees.h"

namespace gprl {
namespace {

constexpr int WARP = 32;

cudaStream_t stream() { return c10::cuda::getCurrentCUDAStream(); }

// ---------------------------------------------------------------------------------------------------
// structure ops

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

__global__ void validate_kernel(const uint8_t* kind, const int16_t* code, const uint8_t* out, const float* value,
                                const int16_t* size, int64_t P, int L, int n_in, int n_out, int* scratch, int* err) {
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
  GenParams g = generate_params(weights, max_len, n_in, n_out, method, min_depth, max_depth, leaf_prob, const_prob,
                                const_low, const_high, output_prob, seed);
  c10::cuda::CUDAGuard guard(weights.device());
  auto [kind, code, out, value, size] = empty_population(weights.options(), pop_size, max_len);
  if (pop_size == 0) return {kind, code, out, value, size};
  at::Tensor w = weights.contiguous();
  constexpr int T = 128;
  generate_kernel<<<blocks_for(pop_size, T), T, 0, stream()>>>(
      g, w.data_ptr<float>(), pop_size, kind.data_ptr<uint8_t>(), code.data_ptr<int16_t>(), out.data_ptr<uint8_t>(),
      value.data_ptr<float>(), size.data_ptr<int16_t>());
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
  node_depth_kernel<<<blocks_for(P, T), T, 0, stream()>>>(s.data_ptr<int16_t>(), P, int(s.size(1)),
                                                          depth.data_ptr<int16_t>(), scratch.data_ptr<int16_t>());
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
      size.data_ptr<int16_t>(), P, int(L), int(n_in), int(n_out), scratch.data_ptr<int>(), err.data_ptr<int>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return err;
}

// ---------------------------------------------------------------------------------------------------
// evaluation

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

// A tree read in place from the population's arrays in global memory (per-tree rows: nothing to share).
struct GlobalTree {
  const uint8_t* kind;
  const int16_t* code;
  const uint8_t* out;
  const float* value;
  int len;
  __device__ __forceinline__ Node at(int i) const { return Node::pack(kind[i], out[i], code[i]); }
};

// Interprets `t` for R rows per thread. load(v, r) returns input v of the thread's r-th row;
// emit(k, r, value) adds to output k of that row. Returns false for a malformed tree or a stack overflow
// (the caller writes NaN): bad input never traps on the device.
//
// The stack's top value lives in registers (`top`), the values below it in local memory (`below`, slot j + 1
// holding value j, slot 0 a scratch slot so that a push never branches): a leaf stores one value there, a
// binary node loads one, a unary node none. With the whole stack in local memory (three accesses per binary
// node) that traffic overflowed L1 and saturated the H100's L2 in large calls.
//
// A function node loads the value below the top before dispatching on its function (a slot that exists
// whenever the node has an operand): that load's latency overlaps the dispatch instead of following it on
// the node's critical path, which bounds calls whose time is the longest tree's chain of nodes.
template <int R, int STACK, typename TreeT, typename Load, typename Emit>
__device__ __forceinline__ bool eval_tree(const TreeT& t, int n_in, int n_out, Load load, Emit emit) {
  if (t.len < 0) return false;  // a length outside [0, max_len] (checked_len)
  float below[STACK][R], top[R];
#pragma unroll
  for (int r = 0; r < R; ++r) top[r] = 0.f;
  int sp = 0;  // values on the stack
  for (int i = t.len - 1; i >= 0; --i) {
    const Node nd = t.at(i);
    const uint8_t kd = nd.kind();
    const int k = kd & KIND_MASK;
    if (k == FUNC) {
      const int fn = nd.code(), ar = arity(fn);
      if (sp < ar) return false;
      float second[R], res[R];  // second: the second operand of a binary node (sp >= ar >= 1)
#pragma unroll
      for (int r = 0; r < R; ++r) second[r] = below[sp - 1][r];
      switch (fn) {  // operands: the first child's value on top, then the second's and third's below it
#define GPRL_CASE(F)                                                                            \
  case F:                                                                                       \
    _Pragma("unroll") for (int r = 0; r < R; ++r) {                                             \
      const float b = arity(F) >= 2 ? second[r] : top[r];                                       \
      const float c = arity(F) >= 3 ? below[sp - 2][r] : top[r];                                \
      res[r] = apply(F, top[r], b, c);                                                          \
    }                                                                                           \
    break;
        GPRL_FUNCTIONS(GPRL_CASE)
#undef GPRL_CASE
        default: return false;
      }
      sp -= ar - 1;
      if (kd & OUTPUT_FLAG) {  // Modi: add to the output, pass the last child's value up
        const int o = nd.out();
        if (o >= n_out) return false;
#pragma unroll
        for (int r = 0; r < R; ++r) emit(o, r, res[r]);
        if (ar >= 2)
#pragma unroll
          for (int r = 0; r < R; ++r) top[r] = below[sp][r];
      } else {
#pragma unroll
        for (int r = 0; r < R; ++r) top[r] = res[r];
      }
      continue;
    }
    if (sp >= STACK) return false;
#pragma unroll
    for (int r = 0; r < R; ++r) below[sp][r] = top[r];
    if (k == VAR) {
      const int v = nd.code();
      if (v < 0 || v >= n_in) return false;
#pragma unroll
      for (int r = 0; r < R; ++r) top[r] = load(v, r);
    } else {
      const float c = t.value[i];
#pragma unroll
      for (int r = 0; r < R; ++r) top[r] = c;
    }
    ++sp;
  }
  if (t.len > 0 && !(t.at(0).kind() & OUTPUT_FLAG)) {  // the bottom value: the root's for a well-formed tree
#pragma unroll
    for (int r = 0; r < R; ++r) emit(0, r, sp <= 1 ? top[r] : below[1][r]);
  }
  return true;
}

// Tree p's length, or -1 (eval_tree rejects it) where size[p][0] lies outside [0, L]: staging or reading
// that many nodes would run past the tree's slot, and for the last tree past the population.
__device__ __forceinline__ int checked_len(const int16_t* size, int64_t p, int L) {
  const int len = size[p * L];
  return len >= 0 && len <= L ? len : -1;
}

// The tree the i-th block evaluates: the i-th of `order` (longest_first) when ORDERED, else tree i. A template
// parameter: a tree index loaded from memory instead of computed from blockIdx takes the kernels 2-8 more
// registers, which cost up to 6% in large calls.
template <bool ORDERED>
__device__ __forceinline__ int64_t tree_at(const int* order, int64_t i) { return ORDERED ? order[i] : i; }

// Input v of a thread's rows first + r * step (r < R) of X [n_in, D] (column-major). Rows past D read row
// D - 1, whose values the callers never use: the loads need no branch. Offsets are 32-bit (check_input_size):
// 64-bit compares and address sums per row and input node cost more than the node's arithmetic.
struct RowLoad {
  const float* X;
  uint32_t D, first, step;
  __device__ __forceinline__ float operator()(int v, int r) const {
    return X[uint32_t(v) * D + min(first + uint32_t(r) * step, D - 1)];
  }
};

// Copies nodes first, first + step, ... of tree p into `buf` (layout: value[L] | packed node[L]) and
// returns a view; the caller synchronises.
__device__ __forceinline__ Tree copy_tree(const uint8_t* kind, const int16_t* code, const uint8_t* out,
                                          const float* value, const int16_t* size, int64_t p, int L, char* buf,
                                          int first, int step) {
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

// Shared inputs: X column-major [n_in, D]; Y [P, D, n_out] zero-initialised.
template <int R, int STACK, bool ORDERED>
__global__ void forward_kernel(const uint8_t* kind, const int16_t* code, const uint8_t* out, const float* value,
                               const int16_t* size, int L, const int* order, const float* X, int64_t D, int n_in,
                               int n_out, int64_t nseg, float* Y) {
  extern __shared__ __align__(16) char smem[];
  const int64_t p = tree_at<ORDERED>(order, blockIdx.x / nseg), seg = blockIdx.x % nseg;
  const Tree t = stage_tree(kind, code, out, value, size, p, L, smem);
  const int64_t base = seg * int64_t(blockDim.x) * R + threadIdx.x;
  float* y = Y + p * D * n_out;
  auto row = [&](int r) { return base + int64_t(r) * blockDim.x; };
  const RowLoad load{X, uint32_t(D), uint32_t(base), blockDim.x};
  auto emit = [&](int k, int r, float v) { if (row(r) < D) y[row(r) * n_out + k] += v; };
  if (!eval_tree<R, STACK>(t, n_in, n_out, load, emit)) {
    for (int r = 0; r < R; ++r)
      if (row(r) < D)
        for (int k = 0; k < n_out; ++k) y[row(r) * n_out + k] = NAN;
  }
}

// Per-tree inputs: X [P, n_in, B] (transposed so a warp's rows are contiguous); Y [P, B, n_out].
template <int STACK>
__global__ void forward_batched_kernel(const uint8_t* kind, const int16_t* code, const uint8_t* out,
                                       const float* value, const int16_t* size, int L, int64_t P, const float* X,
                                       int64_t B, int n_in, int n_out, float* Y) {
  const int64_t gid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (gid >= P * B) return;
  const int64_t p = gid / B, b = gid % B, o = p * L;
  const GlobalTree t{kind + o, code + o, out + o, value + o, checked_len(size, p, L)};
  const float* x = X + p * n_in * B + b;
  float* y = Y + gid * n_out;
  auto load = [&](int v, int) { return x[int64_t(v) * B]; };
  auto emit = [&](int k, int, float v) { y[k] += v; };
  if (!eval_tree<1, STACK>(t, n_in, n_out, load, emit))
    for (int k = 0; k < n_out; ++k) y[k] = NAN;
}

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

// One row's term of a loss sum: |e| or e^2 of the prediction's error, times the row's weight when weights
// were given. Double: squared errors of float32 predictions may exceed float32's range.
__device__ __forceinline__ double row_loss(float pred, float y, const float* W, int64_t row, int metric) {
  const double e = double(pred) - double(y);
  const double l = metric == MAE ? fabs(e) : e * e;
  return W ? W[row] * l : l;
}

// Loss of a mean over `D` rows, or over the weight sum when weights were given (read on the device).
__device__ __forceinline__ double finish_metric(double s, int64_t D, const double* wsum, int metric) {
  const double m = s / (wsum ? *wsum : double(D));
  return metric == RMSE ? sqrt(m) : m;
}

// Partial loss sums per (tree, segment, output): partial[(p * nseg + seg) * n_out + k], or with one segment
// per tree (partial == nullptr) the finished loss in result[p] (no second kernel).
// MULTI keeps the outputs of every row in shared memory; otherwise output 0 lives in registers.
template <int R, int STACK, bool MULTI, bool ORDERED>
__global__ void fitness_kernel(const uint8_t* kind, const int16_t* code, const uint8_t* out, const float* value,
                               const int16_t* size, int L, const int* order, const float* X, const float* Yt,
                               const float* W, int64_t D, int n_in, int n_out, int metric, int64_t nseg,
                               const double* wsum, double* partial, float* result) {
  extern __shared__ __align__(16) char smem[];
  const int64_t p = tree_at<ORDERED>(order, blockIdx.x / nseg), seg = blockIdx.x % nseg;
  float* acc_smem = reinterpret_cast<float*>(smem + tree_smem_bytes(L));
  double* scratch = reinterpret_cast<double*>(acc_smem + (MULTI ? size_t(blockDim.x) * R * n_out : 0));
  if (MULTI)
    for (int i = threadIdx.x; i < blockDim.x * R * n_out; i += blockDim.x) acc_smem[i] = 0.f;
  const Tree t = stage_tree(kind, code, out, value, size, p, L, smem);  // syncs
  const int64_t base = seg * int64_t(blockDim.x) * R + threadIdx.x;
  auto row = [&](int r) { return base + int64_t(r) * blockDim.x; };
  const RowLoad load{X, uint32_t(D), uint32_t(base), blockDim.x};
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.f;
  auto slot = [&](int k, int r) -> float& { return acc_smem[(size_t(k) * blockDim.x + threadIdx.x) * R + r]; };
  auto emit = [&](int k, int r, float v) {
    if (MULTI) slot(k, r) += v; else acc[r] += v;
  };
  const bool ok = eval_tree<R, STACK>(t, n_in, n_out, load, emit);
  double total = 0.0;
  for (int k = 0; k < n_out; ++k) {
    double s = 0.0;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (row(r) >= D) continue;
      s += row_loss(MULTI ? slot(k, r) : acc[r], Yt[int64_t(k) * D + row(r)], W, row(r), metric);
    }
    if (!ok) s = NAN;
    s = block_sum(s, scratch);
    if (threadIdx.x == 0) {
      if (partial) partial[(p * nseg + seg) * n_out + k] = s;
      else total += finish_metric(s, D, wsum, metric);
    }
  }
  if (!partial && threadIdx.x == 0) result[p] = float(total / n_out);
}

__global__ void finish_loss_kernel(const double* partial, int64_t P, int64_t nseg, int n_out, int metric,
                                   int64_t D, const double* wsum, float* result) {
  const int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= P) return;
  double total = 0.0;
  for (int k = 0; k < n_out; ++k) {
    double s = 0.0;
    for (int64_t seg = 0; seg < nseg; ++seg) s += partial[(p * nseg + seg) * n_out + k];
    total += finish_metric(s, D, wsum, metric);
  }
  result[p] = float(total / n_out);
}

// Copies tree p into a warp's slice of shared memory with the warp's lanes.
__device__ Tree stage_tree_warp(const uint8_t* kind, const int16_t* code, const uint8_t* out, const float* value,
                                const int16_t* size, int64_t p, int L, char* buf, int lane) {
  const Tree t = copy_tree(kind, code, out, value, size, p, L, buf, lane, WARP);
  __syncwarp();
  return t;
}

// One warp per single-output tree, looping over all D rows. The tree is staged in shared memory with one
// coalesced copy and, when it fits, so is the whole dataset (shared by the block's warps): the node loop is
// a chain of dependent loads, cheap from shared memory and slow from global memory. The loss is reduced
// with shuffles in a fixed order.
template <int R, int STACK, bool X_IN_SMEM>
__global__ void fitness_warp_kernel(const uint8_t* kind, const int16_t* code, const uint8_t* out,
                                    const float* value, const int16_t* size, int L, int64_t P, const float* X,
                                    const float* Yt, const float* W, int64_t D, int n_in, int metric,
                                    const double* wsum, float* result) {
  extern __shared__ __align__(16) char smem[];
  const size_t x_bytes = X_IN_SMEM ? (size_t(n_in) * D * 4 + 15) / 16 * 16 : 0;
  const float* x = X;
  if (X_IN_SMEM) {
    float* xs = reinterpret_cast<float*>(smem);
    for (int64_t i = threadIdx.x; i < int64_t(n_in) * D; i += blockDim.x) xs[i] = X[i];
    __syncthreads();
    x = xs;
  }
  const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
  const int64_t p = int64_t(blockIdx.x) * (blockDim.x / WARP) + warp;
  if (p >= P) return;  // whole warps leave together, after the block's barrier
  const Tree t = stage_tree_warp(kind, code, out, value, size, p, L, smem + x_bytes + warp * tree_smem_bytes(L), lane);
  double s = 0.0;
  bool ok = true;
  for (int64_t base = lane; base < D && ok; base += int64_t(WARP) * R) {
    auto row = [&](int r) { return base + int64_t(r) * WARP; };
    const RowLoad load{x, uint32_t(D), uint32_t(base), WARP};
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.f;
    auto emit = [&](int, int r, float v) { acc[r] += v; };
    ok = eval_tree<R, STACK>(t, n_in, 1, load, emit);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (row(r) >= D) continue;
      s += row_loss(acc[r], Yt[row(r)], W, row(r), metric);
    }
  }
  // lanes whose first row is past D skipped the loop; every lane of the warp joins the reduction
  if (!ok) s = NAN;
#pragma unroll
  for (int off = WARP / 2; off > 0; off /= 2) s += __shfl_down_sync(0xffffffffu, s, off);
  if (lane == 0) result[p] = float(finish_metric(s, D, wsum, metric));
}

// ---------------------------------------------------------------------------------------------------
// Level-synchronous evaluation (STRATEGY_LEVEL)
//
// eval_tree walks a tree one node after another, so a call over few trees lasts as long as the longest
// tree's chain of dependent node steps. Nodes of equal depth do not depend on each other: here a block takes
// one (tree, segment of rows) and evaluates one depth level at a time, deepest first, every function node of
// the level times every row of the segment in parallel. A tree of depth d costs d dependent steps instead of
// one per node. Function nodes keep their value per row in shared memory, next to the segment's inputs.
// The depth of every node comes from the subtree sizes without a walk: depth(i) = i - #{j : j + size[j] <= i}
// (the nodes before i whose subtree closed before it), a histogram and a prefix sum. Every node gets the same
// apply() on the same operands as in eval_tree, and outputs are summed in eval_tree's order: predictions are
// equal to the other strategies' bit for bit.

constexpr int LEVEL_THREADS = 256;
constexpr int64_t LEVEL_MAX_ROWS = 64;        // rows per segment (fewer when the tree's values would not fit)
constexpr int64_t LEVEL_STAGED_X = 16 * 1024;  // bytes of a segment's inputs staged in shared memory, at most

__host__ __device__ inline size_t align16(size_t b) { return (b + 15) / 16 * 16; }

// Byte offsets into a level block's dynamic shared memory for trees of max_len L, `rows` rows a segment and
// `x_cols` staged input columns (0: inputs are read from global memory).
struct LevelLayout {
  size_t size, order, desc, cnt, lvl, xs, vals, total;
  __host__ __device__ LevelLayout(int64_t L, int64_t rows, int64_t x_cols) {
    size = tree_smem_bytes(L);               // after the staged tree (stage_tree's layout, values first)
    order = size + align16(2 * L);           // int16 [L]: function nodes grouped by depth
    desc = order + align16(2 * L);           // int [L][3]: where each operand's value comes from (LevelTree::load)
    cnt = desc + align16(12 * L);            // int [L + 1]: subtree ends, then the depth of each node
    lvl = cnt + align16(4 * (L + 1));        // int [L + 1]: function nodes per depth, then their prefix sum
    xs = lvl + align16(4 * (L + 1));         // float [x_cols][rows]: the segment's inputs
    vals = xs + align16(4 * size_t(x_cols) * rows);  // float [L][rows]: function node results
    total = vals + align16(4 * size_t(L) * rows);
  }
};

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

// Tree indices by decreasing length (a counting sort by one block; lengths of 1023 nodes or more share a
// bucket), for the evaluation kernels to take trees in that order. Blocks start in index order, and a call
// over a few waves of blocks lasts until its last tree is done: a long tree started last (its chain of nodes
// or levels is the longest) left the GPU mostly idle while it ran. Within a length the order is arbitrary,
// which changes no result (every tree's value is its own).
constexpr int ORDER_THREADS = 1024, ORDER_CHUNK = 4, ORDER_BUCKETS = 1024, ORDER_MAX_TREES = 65536;

__global__ void longest_first_kernel(const int16_t* size, int P, int L, int* order) {
  __shared__ int end[ORDER_BUCKETS];
  for (int b = threadIdx.x; b < ORDER_BUCKETS; b += blockDim.x) end[b] = 0;
  __syncthreads();
  auto for_each_tree = [&](auto&& f) {  // f(tree, bucket); a chunk's loads are in flight together
    for (int base = threadIdx.x; base < P; base += ORDER_THREADS * ORDER_CHUNK) {
      int bucket[ORDER_CHUNK];
#pragma unroll
      for (int j = 0; j < ORDER_CHUNK; ++j) {
        const int p = base + j * ORDER_THREADS;
        bucket[j] = p < P ? ORDER_BUCKETS - 1 - min(max(int(size[int64_t(p) * L]), 0), ORDER_BUCKETS - 1) : -1;
      }
#pragma unroll
      for (int j = 0; j < ORDER_CHUNK; ++j)
        if (bucket[j] >= 0) f(base + j * ORDER_THREADS, bucket[j]);
    }
  };
  for_each_tree([&](int, int b) { atomicAdd(&end[b], 1); });
  __syncthreads();
  block_scan(end, ORDER_BUCKETS);  // end[b]: where bucket b ends
  for_each_tree([&](int p, int b) { order[atomicSub(&end[b], 1) - 1] = p; });
}

// A tree evaluated level by level for the rows row0 .. row0 + rows - 1 (< D) of X [n_in, D]. A value is
// named by a descriptor d, resolved once per operand at setup: d >= 0 is row r's value at S[d + r] (a
// function node's results or a staged input column); -L <= d < 0 the constant S[-1 - d] (the staged tree's
// value array of node -1 - d); d < -L input column -d - L - 1 read from global memory.
__device__ __forceinline__ bool is_modi(uint8_t kd) { return (kd & KIND_MASK) == FUNC && (kd & OUTPUT_FLAG); }

struct LevelTree {
  Tree t;
  const float* S;  // the block's shared memory as floats
  const float* X;
  int64_t D, row0;
  int L, rows, vals, root;  // vals: S index of function node 0's row; root: the root's descriptor
  bool modi;                // the tree has Modi nodes

  __device__ __forceinline__ float load(int d, int r) const {
    if (d >= 0) return S[d + r];
    if (d >= -L) return S[-1 - d];
    return X[int64_t(-d - L - 1) * D + row0 + r];
  }

  // Output k of row r, summed in eval_tree's order: the Modi nodes last to first, then an unflagged root.
  __device__ float output(int k, int r) const {
    float acc = 0.f;
    if (modi)
      for (int i = t.len - 1; i >= 0; --i)
        if (is_modi(t.at(i).kind()) && t.at(i).out() == k)
          acc += S[vals + i * rows + r];
    if (k == 0 && !(t.at(0).kind() & OUTPUT_FLAG)) acc += load(root, r);
    return acc;
  }
};

// The node whose value node c hands to its parent: c itself, or for a Modi node its last child's.
__device__ int passed_value_node(const Tree& t, const int16_t* size, int c) {
  while (is_modi(t.at(c).kind())) {
    int last = c + 1;
    for (int a = 1; a < arity(t.at(c).code()); ++a) last += size[last];
    c = last;
  }
  return c;
}

// Stages tree p and the segment's inputs, checks the tree's structure, orders its function nodes by depth and
// evaluates every level for `rows` rows from row0 (every thread calls it; ends synchronised). Returns false
// for a malformed tree (as eval_tree does; the caller writes NaN).
__device__ bool eval_levels(const uint8_t* kind, const int16_t* code, const uint8_t* out, const float* value,
                            const int16_t* size, int64_t p, int L, int n_in, int n_out, const float* X,
                            int64_t D, int64_t row0, int rows, bool stage_x, char* smem, LevelTree& lt) {
  __shared__ int max_depth, n_modi;
  const int len = size[p * L];
  if (len < 1 || len > L) return false;  // the same for the whole block
  const LevelLayout lay(L, rows, stage_x ? n_in : 0);
  int16_t* s_size = reinterpret_cast<int16_t*>(smem + lay.size);
  int16_t* order = reinterpret_cast<int16_t*>(smem + lay.order);
  int* desc = reinterpret_cast<int*>(smem + lay.desc);
  int* cnt = reinterpret_cast<int*>(smem + lay.cnt);
  int* lvl = reinterpret_cast<int*>(smem + lay.lvl);
  float* xs = reinterpret_cast<float*>(smem + lay.xs);
  for (int i = threadIdx.x; i <= L; i += blockDim.x) cnt[i] = lvl[i] = 0;
  for (int i = threadIdx.x; i < len; i += blockDim.x) s_size[i] = size[p * L + i];
  if (stage_x)
    for (int i = threadIdx.x; i < n_in * rows; i += blockDim.x) {
      const int64_t row = row0 + i % rows;
      xs[i] = row < D ? X[int64_t(i / rows) * D + row] : 0.f;
    }
  if (threadIdx.x == 0) max_depth = n_modi = 0;
  const Tree t = stage_tree(kind, code, out, value, size, p, L, smem);  // syncs
  const float* S = reinterpret_cast<const float*>(smem);
  const int vals = int(lay.vals / 4), x_index = int(lay.xs / 4);
  auto describe = [&](int j) {  // the descriptor of node j's own value
    const Node nd = t.at(j);
    const int k = nd.kind() & KIND_MASK;
    if (k == FUNC) return vals + j * rows;
    if (k == VAR) return stage_x ? x_index + nd.code() * rows : -L - 1 - nd.code();
    return -1 - j;
  };
  // structure: every function node's children tile its subtree, leaves have size 1, the root spans len
  bool bad = false;
  for (int i = threadIdx.x; i < len && !bad; i += blockDim.x) {
    const Node nd = t.at(i);
    const int sz = s_size[i], k = nd.kind() & KIND_MASK, end = i + sz;
    bool b = sz < 1 || end > len || (i == 0 && sz != len);
    if (!b && k == FUNC) {
      const int fn = nd.code();
      b = fn < 0 || fn >= NUM_FUNCTIONS || ((nd.kind() & OUTPUT_FLAG) && nd.out() >= n_out);
      int c = i + 1;
      for (int a = 0; !b && a < arity(fn); ++a) {
        b = c >= end || s_size[c] < 1;
        if (!b) c += s_size[c];
      }
      b = b || c != end;
    } else if (!b) {
      b = sz != 1 || (k == VAR && (nd.code() < 0 || nd.code() >= n_in));
    }
    if (b) bad = true;
    else atomicAdd(&cnt[end], 1);
  }
  if (__syncthreads_or(bad)) return false;
  block_scan(cnt, len);  // cnt[i] = #{j : j + size[j] <= i}
  for (int i = threadIdx.x; i < len; i += blockDim.x) {
    const int d = i - cnt[i];
    cnt[i] = d;  // from here on the node's depth (read by this thread only until the next barrier)
    if ((t.at(i).kind() & KIND_MASK) == FUNC) atomicAdd(&lvl[d + 1], 1);
    if (is_modi(t.at(i).kind())) atomicAdd(&n_modi, 1);
    atomicMax(&max_depth, d);
  }
  __syncthreads();
  const int depth = max_depth;  // function nodes lie above the deepest node, a leaf
  block_scan(lvl, depth);       // lvl[d] = function nodes above depth d: where depth d's group starts
  for (int i = threadIdx.x; i < len; i += blockDim.x) {
    if ((t.at(i).kind() & KIND_MASK) != FUNC) continue;
    order[atomicAdd(&lvl[cnt[i]], 1)] = int16_t(i);  // afterwards lvl[d] is where group d ends
    const int ar = arity(t.at(i).code());
    int c = i + 1;
    for (int a = 0; a < 3; ++a) {  // operands past the arity repeat the first one, as in eval_tree
      desc[3 * i + a] = a < ar ? describe(passed_value_node(t, s_size, c)) : desc[3 * i];
      if (a < ar) c += s_size[c];
    }
  }
  lt = {t, S, X, D, row0, L, rows, vals, describe(0), n_modi > 0};
  __syncthreads();
  for (int d = depth - 1; d >= 0; --d) {
    const int first = d ? lvl[d - 1] : 0, n = lvl[d] - first;
    for (int it = threadIdx.x; it < n * rows; it += blockDim.x) {
      const int j = order[first + it / rows], r = it % rows;
      if (row0 + r >= D) continue;
      const int* op = desc + 3 * j;
      const float v = apply(t.at(j).code(), lt.load(op[0], r), lt.load(op[1], r), lt.load(op[2], r));
      reinterpret_cast<float*>(smem)[vals + j * rows + r] = v;
    }
    __syncthreads();
  }
  return true;
}

// Level-evaluated predictions: Y [P, D, n_out] (zero-initialised), one block per (tree, segment of rows).
template <bool ORDERED>
__global__ void forward_level_kernel(const uint8_t* kind, const int16_t* code, const uint8_t* out,
                                     const float* value, const int16_t* size, int L, const int* order,
                                     const float* X, int64_t D, int n_in, int n_out, int rows, bool stage_x,
                                     int64_t nseg, float* Y) {
  extern __shared__ __align__(16) char smem[];
  const int64_t p = tree_at<ORDERED>(order, blockIdx.x / nseg), row0 = blockIdx.x % nseg * rows;
  LevelTree lt;
  const bool ok = eval_levels(kind, code, out, value, size, p, L, n_in, n_out, X, D, row0, rows, stage_x, smem, lt);
  float* y = Y + p * D * n_out;
  for (int r = threadIdx.x; r < rows && row0 + r < D; r += blockDim.x)
    for (int k = 0; k < n_out; ++k) y[(row0 + r) * n_out + k] = ok ? lt.output(k, r) : NAN;
}

// Level-evaluated loss: per (tree, segment, output) partial sums as fitness_kernel writes them, or with one
// segment per tree the finished loss itself (no second kernel).
template <bool ORDERED>
__global__ void fitness_level_kernel(const uint8_t* kind, const int16_t* code, const uint8_t* out,
                                     const float* value, const int16_t* size, int L, const int* order,
                                     const float* X, const float* Yt, const float* W, int64_t D, int n_in,
                                     int n_out, int metric, int rows, bool stage_x, int64_t nseg,
                                     const double* wsum, double* partial, float* result) {
  extern __shared__ __align__(16) char smem[];
  __shared__ double scratch[WARP];
  const int64_t p = tree_at<ORDERED>(order, blockIdx.x / nseg), seg = blockIdx.x % nseg, row0 = seg * rows;
  LevelTree lt;
  const bool ok = eval_levels(kind, code, out, value, size, p, L, n_in, n_out, X, D, row0, rows, stage_x, smem, lt);
  double total = 0.0;
  for (int k = 0; k < n_out; ++k) {
    double s = 0.0;
    for (int r = threadIdx.x; ok && r < rows && row0 + r < D; r += blockDim.x)
      s += row_loss(lt.output(k, r), Yt[int64_t(k) * D + row0 + r], W, row0 + r, metric);
    if (!ok) s = NAN;
    s = block_sum(s, scratch);
    if (threadIdx.x == 0) {
      if (partial) partial[(p * nseg + seg) * n_out + k] = s;
      else total += finish_metric(s, D, wsum, metric);
    }
  }
  if (!partial && threadIdx.x == 0) result[p] = float(total / n_out);
}

template <int V>
using Int = std::integral_constant<int, V>;

// The order in which blocks of `threads` threads, `nseg` per tree, take trees (longest_first_kernel), or an
// undefined tensor (index order) where it does not pay. Measured on an H100 (results/h100_long_trees/): up to
// a few hundred trees run at once anyway; trees split over several segments, and blocks of under 128 threads
// (warp per tree, hybrid blocks at D = 60), finish too soon for the sort and each block's dependent load of
// its tree index to pay. Past ORDER_MAX_TREES the one-block sort grows with P while the tail it saves does
// not (not measured there).
at::Tensor longest_first(const at::Tensor& size, int64_t nseg, int threads) {
  const int64_t P = size.size(0);
  if (nseg != 1 || threads < 128 || P < 256 || P > ORDER_MAX_TREES) return {};
  at::Tensor order = at::empty({P}, size.options().dtype(at::kInt));
  longest_first_kernel<<<1, ORDER_THREADS, 0, stream()>>>(size.data_ptr<int16_t>(), int(P), int(size.size(1)),
                                                          order.data_ptr<int>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return order;
}

const int* data_or_null(const at::Tensor& order) { return order.defined() ? order.data_ptr<int>() : nullptr; }

// Calls f(Int<R>, Int<STACK>) with the smallest stack bucket that holds `need`; deep trees use one row
// per thread to keep the local-memory stack small.
template <typename Fn>
void with_stack(int64_t need, int rows, Fn&& f) {
  TORCH_CHECK(need <= 4096, "gprl: evaluation stack of ", std::to_string(need), " exceeds 4096");
  if (need > 256) {
    if (need <= 1024) f(Int<1>(), Int<1024>());
    else f(Int<1>(), Int<4096>());
  } else if (rows >= 4) {
    if (need <= 16) f(Int<4>(), Int<16>());
    else if (need <= 64) f(Int<4>(), Int<64>());
    else f(Int<4>(), Int<256>());
  } else if (rows == 2) {
    if (need <= 16) f(Int<2>(), Int<16>());
    else if (need <= 64) f(Int<2>(), Int<64>());
    else f(Int<2>(), Int<256>());
  } else {
    if (need <= 16) f(Int<1>(), Int<16>());
    else if (need <= 64) f(Int<1>(), Int<64>());
    else f(Int<1>(), Int<256>());
  }
}

// Rows per thread and threads per block of the block kernels for a dataset of D rows: the built-in choice
// (STRATEGY_AUTO), else the rows of a hybrid strategy. Blocks of 128 threads, or of up to `one_block` (>= 128)
// threads when that covers all D rows: one segment per tree stages the tree once and needs no second pass over
// partial sums.
void shared_mode_shape(int64_t D, int* rows, int* threads, int64_t strategy, int one_block) {
  *rows = strategy == STRATEGY_AUTO ? (D >= 8192 ? 4 : (D >= 1024 ? 2 : 1)) : hybrid_rows(strategy);
  const int64_t per_thread = (D + *rows - 1) / *rows, warps = (per_thread + WARP - 1) / WARP;
  *threads = int(warps * WARP <= one_block ? warps * WARP : 128);
}

// Raises a kernel's dynamic shared-memory limit when a launch needs more than the default 48 KiB (once per
// kernel, device and size: the call costs host time on every launch otherwise).
void set_smem(const void* kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return;
  int device;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, size_t> raised;
  std::lock_guard<std::mutex> lock(mutex);
  size_t& have = raised[{kernel, device}];
  if (bytes <= have) return;
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  have = bytes;
}

// Rows per segment, segments per tree and shared memory of the level strategy for trees of max_len L over D
// rows of n_in inputs: up to LEVEL_MAX_ROWS rows, balanced across segments, fewer where the device's shared
// memory per block would not hold them; the inputs are staged when they take at most LEVEL_STAGED_X bytes.
struct LevelShape {
  int rows;
  bool stage_x;
  int64_t nseg;
  size_t smem;
};

LevelShape level_shape(int64_t L, int64_t D, int64_t n_in) {
  int device, optin;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const size_t limit = size_t(optin) - 2 * 1024;  // the kernels' static shared memory
  const bool stage_x = 4 * n_in * LEVEL_MAX_ROWS <= LEVEL_STAGED_X;
  // one row takes 4 bytes per node slot and staged input; the two row arrays' alignment, 32 bytes at most
  const size_t fixed = LevelLayout(L, 0, 0).total + 32, per_row = 4 * size_t(L + (stage_x ? n_in : 0));
  TORCH_CHECK(fixed + per_row <= limit, "gprl: strategy 5 (level) needs ", std::to_string(fixed + per_row),
              " bytes of shared memory for trees of max_len=", std::to_string(L), ", over this device's ",
              std::to_string(limit), "; use -1 (auto) or another strategy");
  const int64_t most = std::min<int64_t>(LEVEL_MAX_ROWS, int64_t((limit - fixed) / per_row));
  const int64_t nseg = (D + most - 1) / most, rows = (D + nseg - 1) / nseg;
  return {int(rows), stage_x, nseg, LevelLayout(L, rows, stage_x ? n_in : 0).total};
}

at::Tensor forward_cuda(const at::Tensor& kind, const at::Tensor& code, const at::Tensor& out, const at::Tensor& value,
                        const at::Tensor& size, const at::Tensor& Xt, int64_t n_out, int64_t max_stack,
                        int64_t strategy) {
  check_population(kind, code, out, value, size);
  check_strategy(strategy, false, n_out);
  check_data(Xt, kind, "Xt");
  TORCH_CHECK(Xt.dim() == 2, "gprl: Xt must be [n_in, D]");
  check_input_size(Xt);
  c10::cuda::CUDAGuard guard(kind.device());
  const int64_t P = kind.size(0), L = kind.size(1), D = Xt.size(1);
  at::Tensor Y = at::zeros({P, D, n_out}, Xt.options());
  if (P == 0 || D == 0 || L == 0) return Y;
  at::Tensor xc = Xt.contiguous();
  if (strategy == STRATEGY_LEVEL) {
    const LevelShape sh = level_shape(L, D, xc.size(0));
    const at::Tensor order = longest_first(size, sh.nseg, LEVEL_THREADS);
    auto launch = [&](auto kernel) {
      set_smem(reinterpret_cast<const void*>(kernel), sh.smem);
      kernel<<<P * sh.nseg, LEVEL_THREADS, sh.smem, stream()>>>(
          kind.data_ptr<uint8_t>(), code.data_ptr<int16_t>(), out.data_ptr<uint8_t>(), value.data_ptr<float>(),
          size.data_ptr<int16_t>(), int(L), data_or_null(order), xc.data_ptr<float>(), D, int(xc.size(0)),
          int(n_out), sh.rows, sh.stage_x, sh.nseg, Y.data_ptr<float>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    if (order.defined()) launch(forward_level_kernel<true>);
    else launch(forward_level_kernel<false>);
    return Y;
  }
  int rows, threads;
  shared_mode_shape(D, &rows, &threads, strategy, 128);
  with_stack(max_stack, rows, [&](auto r_, auto s_) {
    constexpr int R = decltype(r_)::value, S = decltype(s_)::value;
    const int64_t nseg = (D + int64_t(threads) * R - 1) / (int64_t(threads) * R);
    const at::Tensor order = longest_first(size, nseg, threads);
    const size_t smem = tree_smem_bytes(L);
    auto launch = [&](auto kernel) {
      set_smem(reinterpret_cast<const void*>(kernel), smem);
      kernel<<<P * nseg, threads, smem, stream()>>>(
          kind.data_ptr<uint8_t>(), code.data_ptr<int16_t>(), out.data_ptr<uint8_t>(), value.data_ptr<float>(),
          size.data_ptr<int16_t>(), int(L), data_or_null(order), xc.data_ptr<float>(), D, int(xc.size(0)),
          int(n_out), nseg, Y.data_ptr<float>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    if (order.defined()) launch(forward_kernel<R, S, true>);
    else launch(forward_kernel<R, S, false>);
  });
  return Y;
}

at::Tensor forward_batched_cuda(const at::Tensor& kind, const at::Tensor& code, const at::Tensor& out,
                                const at::Tensor& value, const at::Tensor& size, const at::Tensor& X,
                                int64_t n_out, int64_t max_stack) {
  check_population(kind, code, out, value, size);
  check_data(X, kind, "X");
  TORCH_CHECK(X.dim() == 3 && X.size(0) == kind.size(0), "gprl: X must be [P, B, n_in]");
  c10::cuda::CUDAGuard guard(kind.device());
  const int64_t P = X.size(0), B = X.size(1), L = kind.size(1);
  at::Tensor Y = at::zeros({P, B, n_out}, X.options());
  if (P == 0 || B == 0 || L == 0) return Y;
  at::Tensor xc = X.transpose(1, 2).contiguous();
  with_stack(max_stack, 1, [&](auto, auto s_) {
    constexpr int S = decltype(s_)::value;
    constexpr int T = 128;
    forward_batched_kernel<S><<<blocks_for(P * B, T), T, 0, stream()>>>(
        kind.data_ptr<uint8_t>(), code.data_ptr<int16_t>(), out.data_ptr<uint8_t>(), value.data_ptr<float>(),
        size.data_ptr<int16_t>(), int(L), P, xc.data_ptr<float>(), B, int(xc.size(1)), int(n_out),
        Y.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return Y;
}

// Sums the partial losses of every tree in a fixed order into result [P] (finish_loss_kernel).
void finish_losses(const double* partial, int64_t P, int64_t nseg, int64_t n_out, int64_t metric, int64_t D,
                   const double* wsum, at::Tensor& result) {
  constexpr int T = 128;
  finish_loss_kernel<<<blocks_for(P, T), T, 0, stream()>>>(partial, P, nseg, int(n_out), int(metric), D, wsum,
                                                           result.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor fitness_cuda(const at::Tensor& kind, const at::Tensor& code, const at::Tensor& out, const at::Tensor& value,
                        const at::Tensor& size, const at::Tensor& Xt, const at::Tensor& yt,
                        const std::optional<at::Tensor>& weight, int64_t metric, int64_t max_stack,
                        int64_t strategy) {
  at::Tensor w = check_fitness_args(kind, code, out, value, size, Xt, yt, weight, metric);
  check_strategy(strategy, true, yt.size(0));
  check_input_size(Xt);
  c10::cuda::CUDAGuard guard(kind.device());
  const int64_t P = kind.size(0), L = kind.size(1), D = Xt.size(1), n_out = yt.size(0);
  at::Tensor result = at::empty({P}, Xt.options());
  if (P == 0) return result;
  TORCH_CHECK(D > 0 && L > 0, "gprl: fitness needs at least one row and max_len >= 1");
  at::Tensor xc = Xt.contiguous(), yc = yt.contiguous();
  at::Tensor wsum;
  if (w.defined()) wsum = w.to(at::kDouble).sum();  // stays on the device: no host sync
  const float* wp = w.defined() ? w.data_ptr<float>() : nullptr;
  const double* wsum_p = wsum.defined() ? wsum.data_ptr<double>() : nullptr;
  const int n_in = int(xc.size(0));

  if (strategy == STRATEGY_LEVEL) {
    const LevelShape sh = level_shape(L, D, n_in);
    const at::Tensor order = longest_first(size, sh.nseg, LEVEL_THREADS);
    at::Tensor partial;  // one segment per tree: the kernel finishes the loss itself
    if (sh.nseg > 1) partial = at::empty({P * sh.nseg * n_out}, Xt.options().dtype(at::kDouble));
    double* partial_p = partial.defined() ? partial.data_ptr<double>() : nullptr;
    auto launch = [&](auto kernel) {
      set_smem(reinterpret_cast<const void*>(kernel), sh.smem);
      kernel<<<P * sh.nseg, LEVEL_THREADS, sh.smem, stream()>>>(
          kind.data_ptr<uint8_t>(), code.data_ptr<int16_t>(), out.data_ptr<uint8_t>(), value.data_ptr<float>(),
          size.data_ptr<int16_t>(), int(L), data_or_null(order), xc.data_ptr<float>(), yc.data_ptr<float>(), wp,
          D, n_in, int(n_out), int(metric), sh.rows, sh.stage_x, sh.nseg, wsum_p, partial_p,
          result.data_ptr<float>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    if (order.defined()) launch(fitness_level_kernel<true>);
    else launch(fitness_level_kernel<false>);
    if (partial_p) finish_losses(partial_p, P, sh.nseg, n_out, metric, D, wsum_p, result);
    return result;
  }

  // Small single-output datasets (or STRATEGY_WARP): one warp per tree over all rows, no staging, no second pass.
  const bool warp_mode = strategy == STRATEGY_AUTO ? (n_out == 1 && D <= 1024 && (P >= 2048 || D <= 64))
                                                   : strategy == STRATEGY_WARP;  // n_out == 1: check_strategy
  if (warp_mode) {
    const int rows = D <= WARP ? 1 : (D <= 2 * WARP ? 2 : 4);
    constexpr int WARPS = 4;
    const size_t x_bytes = (size_t(n_in) * D * 4 + 15) / 16 * 16;
    // Few blocks: stage the data once per block (the first touch of each row is a long global load). Many
    // blocks: every block restaging it costs more than L1, which the block's warps share, saves.
    const bool x_in_smem = x_bytes <= 32 * 1024 && P <= 1024;
    const size_t smem = (x_in_smem ? x_bytes : 0) + WARPS * tree_smem_bytes(L);
    with_stack(max_stack, rows, [&](auto r_, auto s_) {
      constexpr int R = decltype(r_)::value, S = decltype(s_)::value;
      auto launch = [&](auto kernel) {
        set_smem(reinterpret_cast<const void*>(kernel), smem);
        kernel<<<blocks_for(P, WARPS), WARPS * WARP, smem, stream()>>>(
            kind.data_ptr<uint8_t>(), code.data_ptr<int16_t>(), out.data_ptr<uint8_t>(), value.data_ptr<float>(),
            size.data_ptr<int16_t>(), int(L), P, xc.data_ptr<float>(), yc.data_ptr<float>(), wp, D, n_in,
            int(metric), wsum_p, result.data_ptr<float>());
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      };
      if (x_in_smem) launch(fitness_warp_kernel<R, S, true>);
      else launch(fitness_warp_kernel<R, S, false>);
    });
    return result;
  }

  const bool multi = n_out > 1;
  int rows, threads;
  shared_mode_shape(D, &rows, &threads, strategy, multi ? 128 : 512);
  // Multi-output keeps rows x outputs in shared memory: the built-in choice falls back to fewer rows when that
  // is large; a hybrid strategy keeps its rows, so one that does not fit is an error.
  const size_t multi_bytes = size_t(threads) * rows * n_out * 4;
  if (multi && multi_bytes > MULTI_OUTPUT_SMEM_LIMIT) {
    TORCH_CHECK(strategy == STRATEGY_AUTO, "gprl: strategy ", std::to_string(strategy), " (",
                std::to_string(rows), " rows per thread, ", std::to_string(threads), " threads) needs ",
                std::to_string(multi_bytes), " bytes of shared memory for n_out=", std::to_string(n_out),
                " outputs, over the ", std::to_string(MULTI_OUTPUT_SMEM_LIMIT),
                " byte limit; use -1 (auto) or a hybrid strategy with fewer rows per thread");
    rows = 1;
    threads = WARP;
  }
  with_stack(max_stack, rows, [&](auto r_, auto s_) {
    constexpr int R = decltype(r_)::value, S = decltype(s_)::value;
    const int64_t nseg = (D + int64_t(threads) * R - 1) / (int64_t(threads) * R);
    const at::Tensor order = longest_first(size, nseg, threads);
    at::Tensor partial;  // one segment per tree: the kernel finishes the loss itself
    if (nseg > 1) partial = at::empty({P * nseg * n_out}, Xt.options().dtype(at::kDouble));
    double* partial_p = partial.defined() ? partial.data_ptr<double>() : nullptr;
    const size_t smem = tree_smem_bytes(L) + (multi ? size_t(threads) * R * n_out * 4 : 0) + WARP * 8;
    auto launch = [&](auto kernel) {
      set_smem(reinterpret_cast<const void*>(kernel), smem);
      kernel<<<P * nseg, threads, smem, stream()>>>(
          kind.data_ptr<uint8_t>(), code.data_ptr<int16_t>(), out.data_ptr<uint8_t>(), value.data_ptr<float>(),
          size.data_ptr<int16_t>(), int(L), data_or_null(order), xc.data_ptr<float>(), yc.data_ptr<float>(), wp, D,
          n_in, int(n_out), int(metric), nseg, wsum_p, partial_p, result.data_ptr<float>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    if (multi) {
      if (order.defined()) launch(fitness_kernel<R, S, true, true>);
      else launch(fitness_kernel<R, S, true, false>);
    } else {
      if (order.defined()) launch(fitness_kernel<R, S, false, true>);
      else launch(fitness_kernel<R, S, false, false>);
    }
    if (partial_p) finish_losses(partial_p, P, nseg, n_out, metric, D, wsum_p, result);
  });
  return result;
}

}  // namespace
}  // namespace gprl

TORCH_LIBRARY_IMPL(gprl, CUDA, m) {
  m.impl("generate", &gprl::generate_cuda);
  m.impl("node_depth", &gprl::node_depth_cuda);
  m.impl("validate", &gprl::validate_cuda);
  m.impl("forward", &gprl::forward_cuda);
  m.impl("forward_batched", &gprl::forward_batched_cuda);
  m.impl("fitness", &gprl::fitness_cuda);
}
