// CUDA evaluation by interpreting trees node by node (eval_tree): forward and fitness over a shared dataset,
// forward_batched over per-tree inputs, and the host dispatch that picks a kernel per call (strategy.h).
// Shared dataset: one block per (tree, segment of rows); the tree is staged once in shared memory and every
// thread evaluates R rows of the segment at once, so the per-node dispatch is amortised over R rows and
// uniform across the warp (small single-output fitness: one warp per tree over all rows). The level strategy
// evaluates a tree one depth level at a time instead (eval_level_cuda.cu). Where a block takes a whole tree,
// blocks take the trees longest first (longest_first_kernel). Batched evaluation (policy case): one thread
// per (tree, row).
// Fitness reduces per block, writes one partial per (tree, segment, output) and a second kernel sums them in
// a fixed order: deterministic, no float atomics.
#include <map>
#include <mutex>
#include <type_traits>

#include "eval_cuda.h"

namespace gprl {
namespace {

int blocks_for(int64_t n, int threads) { return int((n + threads - 1) / threads); }

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

// Shared inputs: X column-major [n_in, D]; Y [P, D, n_out] zero-initialised.
template <int R, int STACK, bool ORDERED>
__global__ void forward_kernel(const uint8_t* kind, const int16_t* code, const uint8_t* out,
                               const float* value, const int16_t* size, int L, const int* order,
                               const float* X, int64_t D, int n_in, int n_out, int64_t nseg, float* Y) {
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
                                       const float* value, const int16_t* size, int L, int64_t P,
                                       const float* X, int64_t B, int n_in, int n_out, float* Y) {
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

// Partial sums of the loss terms per (tree, segment, output): partial[((p * nseg + seg) * n_out + k) * nt + j]
// (nt = metric_terms), or with one segment per tree (partial == nullptr) the finished loss in result[p] (no
// second kernel).
// MULTI keeps the outputs of every row in shared memory; otherwise output 0 lives in registers.
template <int R, int STACK, bool MULTI, bool ORDERED>
__global__ void fitness_kernel(const uint8_t* kind, const int16_t* code, const uint8_t* out,
                               const float* value, const int16_t* size, int L, const int* order,
                               const float* X, const float* Yt, const float* W, int64_t D, int n_in,
                               int n_out, int metric, int64_t nseg, const double* wsum,
                               const double* ystat, double* partial, float* result) {
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
  auto slot = [&](int k, int r) -> float& {
    return acc_smem[(size_t(k) * blockDim.x + threadIdx.x) * R + r];
  };
  auto emit = [&](int k, int r, float v) {
    if (MULTI) slot(k, r) += v; else acc[r] += v;
  };
  const bool ok = eval_tree<R, STACK>(t, n_in, n_out, load, emit);
  const int nt = metric_terms(metric);
  double total = 0.0;
  for (int k = 0; k < n_out; ++k) {
    double s[MAX_TERMS] = {};
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (row(r) >= D) continue;
      row_terms(s, MULTI ? slot(k, r) : acc[r], Yt[int64_t(k) * D + row(r)], W, row(r), metric);
    }
#pragma unroll
    for (int j = 0; j < MAX_TERMS; ++j)
      if (j < nt) s[j] = block_sum(ok ? s[j] : NAN, scratch);
    if (threadIdx.x == 0) {
      if (partial)
        for (int j = 0; j < nt; ++j) partial[((p * nseg + seg) * n_out + k) * nt + j] = s[j];
      else total += finish_metric(s, D, wsum, ystat, k, metric);
    }
  }
  if (!partial && threadIdx.x == 0) result[p] = float(total / n_out);
}

__global__ void finish_loss_kernel(const double* partial, int64_t P, int64_t nseg, int n_out, int metric,
                                   int64_t D, const double* wsum, const double* ystat, float* result) {
  const int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= P) return;
  const int nt = metric_terms(metric);
  double total = 0.0;
  for (int k = 0; k < n_out; ++k) {
    double s[MAX_TERMS] = {};
    for (int64_t seg = 0; seg < nseg; ++seg)
#pragma unroll
      for (int j = 0; j < MAX_TERMS; ++j)
        if (j < nt) s[j] += partial[((p * nseg + seg) * n_out + k) * nt + j];
    total += finish_metric(s, D, wsum, ystat, k, metric);
  }
  result[p] = float(total / n_out);
}

// Copies tree p into a warp's slice of shared memory with the warp's lanes.
__device__ Tree stage_tree_warp(const uint8_t* kind, const int16_t* code, const uint8_t* out,
                                const float* value, const int16_t* size, int64_t p, int L, char* buf,
                                int lane) {
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
                                    const double* wsum, const double* ystat, float* result) {
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
  const Tree t = stage_tree_warp(kind, code, out, value, size, p, L,
                                 smem + x_bytes + warp * tree_smem_bytes(L), lane);
  double s[MAX_TERMS] = {};
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
      row_terms(s, acc[r], Yt[row(r)], W, row(r), metric);
    }
  }
  // lanes whose first row is past D skipped the loop; every lane of the warp joins the reduction
  const int nt = metric_terms(metric);
#pragma unroll
  for (int j = 0; j < MAX_TERMS; ++j) {
    if (j >= nt) continue;
    if (!ok) s[j] = NAN;
#pragma unroll
    for (int off = WARP / 2; off > 0; off /= 2) s[j] += __shfl_down_sync(0xffffffffu, s[j], off);
  }
  if (lane == 0) result[p] = float(finish_metric(s, D, wsum, ystat, 0, metric));
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
        bucket[j] = p < P ? ORDER_BUCKETS - 1 - min(max(int(size[int64_t(p) * L]), 0), ORDER_BUCKETS - 1)
                          : -1;
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

template <int V>
using Int = std::integral_constant<int, V>;

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
// (STRATEGY_AUTO), else the rows of a hybrid strategy. Blocks of 128 threads, or of up to `one_block`
// (>= 128) threads when that covers all D rows: one segment per tree stages the tree once and needs no second
// pass over partial sums.
void shared_mode_shape(int64_t D, int* rows, int* threads, int64_t strategy, int one_block) {
  *rows = strategy == STRATEGY_AUTO ? (D >= 8192 ? 4 : (D >= 1024 ? 2 : 1)) : hybrid_rows(strategy);
  const int64_t per_thread = (D + *rows - 1) / *rows, warps = (per_thread + WARP - 1) / WARP;
  *threads = int(warps * WARP <= one_block ? warps * WARP : 128);
}

}  // namespace

// The order in which blocks of `threads` threads, `nseg` per tree, take trees (longest_first_kernel), or an
// undefined tensor (index order) where it does not pay. Measured on an H100: up to
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

// Sums the partial losses of every tree in a fixed order into result [P] (finish_loss_kernel).
void finish_losses(const double* partial, int64_t P, int64_t nseg, int64_t n_out, int64_t metric, int64_t D,
                   const double* wsum, const double* ystat, at::Tensor& result) {
  constexpr int T = 128;
  finish_loss_kernel<<<blocks_for(P, T), T, 0, stream()>>>(partial, P, nseg, int(n_out), int(metric), D, wsum,
                                                           ystat, result.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

namespace {

at::Tensor forward_cuda(const at::Tensor& kind, const at::Tensor& code, const at::Tensor& out,
                        const at::Tensor& value, const at::Tensor& size, const at::Tensor& Xt, int64_t n_out,
                        int64_t max_stack, int64_t strategy) {
  check_population(kind, code, out, value, size);
  check_strategy(strategy, false, n_out, false);
  check_data(Xt, kind, "Xt");
  TORCH_CHECK(Xt.dim() == 2, "gprl: Xt must be [n_in, D]");
  check_input_size(Xt);
  c10::cuda::CUDAGuard guard(kind.device());
  const int64_t P = kind.size(0), L = kind.size(1), D = Xt.size(1);
  at::Tensor Y = at::zeros({P, D, n_out}, Xt.options());
  if (P == 0 || D == 0 || L == 0) return Y;
  at::Tensor xc = Xt.contiguous();
  if (strategy == STRATEGY_LEVEL) {
    forward_level(kind, code, out, value, size, xc, n_out, Y);
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
          kind.data_ptr<uint8_t>(), code.data_ptr<int16_t>(), out.data_ptr<uint8_t>(),
          value.data_ptr<float>(), size.data_ptr<int16_t>(), int(L), data_or_null(order),
          xc.data_ptr<float>(), D, int(xc.size(0)), int(n_out), nseg, Y.data_ptr<float>());
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

at::Tensor fitness_cuda(const at::Tensor& kind, const at::Tensor& code, const at::Tensor& out,
                        const at::Tensor& value, const at::Tensor& size, const at::Tensor& Xt,
                        const at::Tensor& yt, const std::optional<at::Tensor>& weight, int64_t metric,
                        int64_t max_stack, int64_t strategy) {
  at::Tensor w = check_fitness_args(kind, code, out, value, size, Xt, yt, weight, metric);
  check_strategy(strategy, true, yt.size(0), false);
  check_input_size(Xt);
  c10::cuda::CUDAGuard guard(kind.device());
  const int64_t P = kind.size(0), L = kind.size(1), D = Xt.size(1), n_out = yt.size(0);
  at::Tensor result = at::empty({P}, Xt.options());
  if (P == 0) return result;
  TORCH_CHECK(D > 0 && L > 0, "gprl: fitness needs at least one row and max_len >= 1");
  at::Tensor xc = Xt.contiguous(), yc = yt.contiguous(), ystat;
  if (metric >= SCALED_MSE) std::tie(yc, ystat) = scaled_targets(yt, w);  // on the device: no host sync
  at::Tensor wsum;
  if (w.defined()) wsum = w.to(at::kDouble).sum();  // stays on the device: no host sync
  const float* wp = w.defined() ? w.data_ptr<float>() : nullptr;
  const double* wsum_p = wsum.defined() ? wsum.data_ptr<double>() : nullptr;
  const double* ystat_p = ystat.defined() ? ystat.data_ptr<double>() : nullptr;
  const int n_in = int(xc.size(0)), nt = metric_terms(metric);

  if (strategy == STRATEGY_LEVEL) {
    fitness_level(kind, code, out, value, size, xc, yc, wp, wsum_p, ystat_p, metric, result);
    return result;
  }

  // Small single-output datasets (or STRATEGY_WARP): one warp per tree over all rows, no staging, no second
  // pass.
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
            kind.data_ptr<uint8_t>(), code.data_ptr<int16_t>(), out.data_ptr<uint8_t>(),
            value.data_ptr<float>(), size.data_ptr<int16_t>(), int(L), P, xc.data_ptr<float>(),
            yc.data_ptr<float>(), wp, D, n_in, int(metric), wsum_p, ystat_p, result.data_ptr<float>());
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
  // Multi-output keeps rows x outputs in shared memory: the built-in choice falls back to fewer rows when
  // that is large; a hybrid strategy keeps its rows, so one that does not fit is an error.
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
    if (nseg > 1) partial = at::empty({P * nseg * n_out * nt}, Xt.options().dtype(at::kDouble));
    double* partial_p = partial.defined() ? partial.data_ptr<double>() : nullptr;
    const size_t smem = tree_smem_bytes(L) + (multi ? size_t(threads) * R * n_out * 4 : 0) + WARP * 8;
    auto launch = [&](auto kernel) {
      set_smem(reinterpret_cast<const void*>(kernel), smem);
      kernel<<<P * nseg, threads, smem, stream()>>>(
          kind.data_ptr<uint8_t>(), code.data_ptr<int16_t>(), out.data_ptr<uint8_t>(),
          value.data_ptr<float>(), size.data_ptr<int16_t>(), int(L), data_or_null(order),
          xc.data_ptr<float>(), yc.data_ptr<float>(), wp, D, n_in, int(n_out), int(metric), nseg, wsum_p,
          ystat_p, partial_p, result.data_ptr<float>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    if (multi) {
      if (order.defined()) launch(fitness_kernel<R, S, true, true>);
      else launch(fitness_kernel<R, S, true, false>);
    } else {
      if (order.defined()) launch(fitness_kernel<R, S, false, true>);
      else launch(fitness_kernel<R, S, false, false>);
    }
    if (partial_p) finish_losses(partial_p, P, nseg, n_out, metric, D, wsum_p, ystat_p, result);
  });
  return result;
}

}  // namespace
}  // namespace gprl

TORCH_LIBRARY_IMPL(gprl, CUDA, m) {
  m.impl("forward", &gprl::forward_cuda);
  m.impl("forward_batched", &gprl::forward_batched_cuda);
  m.impl("fitness", &gprl::fitness_cuda);
}
