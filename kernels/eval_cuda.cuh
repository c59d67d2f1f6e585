// Tree evaluation on the GPU: the interpreter and the two kernels (predictions, fused loss) that every
// strategy of strategy.h launches with its own plan. Included by eval_forward_cuda.cu and
// eval_fitness_cuda.cu (two translation units, so the build compiles them in parallel).
//
// A "team" (one thread, one warp or one block) evaluates one tree over one segment of rows, R rows per
// thread and pass: the per-node dispatch is amortised over R rows, and it is uniform across a warp
// whenever the warp belongs to one team.
#pragma once
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <mutex>
#include <type_traits>
#include <unordered_map>

#include "nodes.h"
#include "ops.h"
#include "strategy.h"

namespace gprl {
namespace eval {
namespace {  // internal linkage: each including translation unit has its own copy

constexpr int WARP = 32;

// One node in 8 bytes, so a staged tree yields a node with a single shared-memory load.
struct __align__(8) Node {
  float value;
  int16_t code;
  uint8_t kind;
  uint8_t out;
};

// A tree staged in shared memory. len < 0 marks a tree whose length does not fit max_len.
struct PackedTree {
  const Node* nodes;
  int len;
  __device__ __forceinline__ Node operator[](int i) const { return nodes[i]; }
};

// A tree read in place from the population's arrays (thread teams: one staged tree per thread would not
// fit in shared memory); the read-only cache holds it after the first pass.
struct GlobalTree {
  const uint8_t* kind;
  const int16_t* code;
  const uint8_t* out;
  const float* value;
  int len;
  __device__ __forceinline__ Node operator[](int i) const {
    return {__ldg(value + i), __ldg(code + i), __ldg(kind + i), __ldg(out + i)};
  }
};

struct PopView {
  const uint8_t* kind;
  const int16_t* code;
  const uint8_t* out;
  const float* value;
  const int16_t* size;
  int64_t P;
  int L;
};

// Input v of row r of tree p is X[p * sp + r * sr + v * sv]: sp = 0 for a dataset shared by every tree.
// Strides let the kernels read [n_in, D], [D, n_in] and [P, B, n_in] tensors in place, without a copy.
struct XView {
  const float* X;
  int64_t sp, sr, sv;
};

// Interprets `t` for R rows per thread; load(v, r) gives input v of the thread's r-th row and
// emit(k, r, value) adds to output k of that row. Returns false for a malformed tree or a stack overflow
// (the caller writes NaN): bad input never traps on the device.
//
// The two topmost stack values live in registers (top, second): a function's operands are ready when it
// runs, and the local-memory traffic (spilling `second` on a push, refilling it on a pop) stays off the
// dependency chain. The arithmetic is that of nodes.h in the same order, so results equal the plain
// stack interpreter's bit for bit.
template <int R, int STACK, typename TreeT, typename Load, typename Emit>
__device__ __forceinline__ bool eval_tree(const TreeT& t, int n_in, int n_out, Load load, Emit emit) {
  if (t.len <= 0) return t.len == 0;
  float top[R], second[R], stack[STACK][R];  // stack[j] holds position j < sp - 2
#pragma unroll
  for (int r = 0; r < R; ++r) top[r] = second[r] = 0.f;
  int sp = 0;  // values on the stack, top and second included
  Node next = t[t.len - 1];
  for (int i = t.len - 1; i >= 0; --i) {
    const Node nd = next;
    if (i > 0) next = t[i - 1];  // fetch the next node while this one computes
    const int k = nd.kind & KIND_MASK;
    if (k == FUNC) {
      const int fn = nd.code, ar = arity(fn);
      if (sp < ar) return false;
      float c[R], res[R];
#pragma unroll
      for (int r = 0; r < R; ++r) c[r] = ar >= 3 ? stack[sp - 3][r] : top[r];
      switch (fn) {
#define GPRL_CASE(F)                                                                         \
  case F:                                                                                    \
    _Pragma("unroll") for (int r = 0; r < R; ++r) res[r] = apply(F, top[r], second[r], c[r]); \
    break;
        GPRL_FUNCTIONS(GPRL_CASE)
#undef GPRL_CASE
        default: return false;
      }
      if (nd.kind & OUTPUT_FLAG) {  // Modi: add to the output, pass the last child's value up
        const int o = nd.out;
        if (o >= n_out) return false;
#pragma unroll
        for (int r = 0; r < R; ++r) {
          emit(o, r, res[r]);
          res[r] = ar == 1 ? top[r] : (ar == 2 ? second[r] : c[r]);
        }
      }
      sp -= ar - 1;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        top[r] = res[r];
        if (ar >= 2 && sp >= 2) second[r] = stack[sp - 2][r];  // refill: needed by the next function only
      }
      continue;
    }
    if (sp >= STACK) return false;
    float v[R];
    if (k == VAR) {
      const int var = nd.code;
      if (var < 0 || var >= n_in) return false;
#pragma unroll
      for (int r = 0; r < R; ++r) v[r] = load(var, r);
    } else {
#pragma unroll
      for (int r = 0; r < R; ++r) v[r] = nd.value;  // CONST (PAD never lies inside a tree)
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (sp >= 2) stack[sp - 2][r] = second[r];  // spill
      second[r] = top[r];
      top[r] = v[r];
    }
    ++sp;
  }
  if (!(next.kind & OUTPUT_FLAG)) {  // `next` is the root now; a non-Modi root adds to output 0
    // the bottom of the stack, as the plain interpreter emits (sp > 1 only for malformed trees)
#pragma unroll
    for (int r = 0; r < R; ++r) emit(0, r, sp == 1 ? top[r] : (sp == 2 ? second[r] : stack[0][r]));
  }
  return true;
}

// The tree a team evaluates: staged in shared memory by the team's threads (warp and block teams), or
// read in place (thread teams).
template <int TEAM>
__device__ __forceinline__ auto team_tree(const PopView& pop, int64_t p, char* buf, int lane, int G) {
  const int64_t o = p * pop.L;
  const int size0 = pop.size[o];
  const int len = size0 <= pop.L ? size0 : -1;
  if constexpr (TEAM == TEAM_THREAD) {
    return GlobalTree{pop.kind + o, pop.code + o, pop.out + o, pop.value + o, len};
  } else {
    // The first G nodes are loaded together with size[0] (one memory round trip for most trees), the rest
    // in a loop that keeps several loads in flight.
    Node* nodes = reinterpret_cast<Node*>(buf);
    Node first{};
    if (lane < pop.L) first = Node{pop.value[o + lane], pop.code[o + lane], pop.kind[o + lane], pop.out[o + lane]};
    if (lane < len) nodes[lane] = first;
#pragma unroll 4
    for (int i = lane + G; i < len; i += G) nodes[i] = Node{pop.value[o + i], pop.code[o + i], pop.kind[o + i], pop.out[o + i]};
    if constexpr (TEAM == TEAM_WARP) __syncwarp();
    else __syncthreads();
    return PackedTree{nodes, len};
  }
}

// Copies the shared input matrix into shared memory ([n_in, D], row fastest); the whole block takes part.
// Plans stage at most 32 KB, so 32-bit indices suffice (64-bit division is slow on the GPU).
__device__ __forceinline__ XView stage_inputs(const XView& xv, int n_in, int64_t D, float* xs) {
  const int d = int(D), n = n_in * d;
#pragma unroll 4
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int v = i / d, r = i - v * d;
    xs[i] = xv.X[r * xv.sr + v * xv.sv];
  }
  __syncthreads();
  return {xs, 0, 1, D};
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

// Sum over the team in a fixed order; the team's lane 0 holds the result.
template <int TEAM>
__device__ __forceinline__ double team_sum(double v, double* scratch) {
  if constexpr (TEAM == TEAM_THREAD) {
    return v;
  } else if constexpr (TEAM == TEAM_WARP) {
#pragma unroll
    for (int off = WARP / 2; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
  } else {
    return block_sum(v, scratch);
  }
}

// The team, work item and tree of this thread; shared by both kernels. `valid` is false for the spare
// teams of the last block (thread and warp teams), which leave together after every block-wide barrier.
template <int TEAM, int R>
struct TeamCtx {
  int G, lane;
  int64_t p, seg;
  bool valid;
  SmemLayout lay;
  XView xv;

  __device__ TeamCtx(const PopView& pop, XView x, int64_t D, int n_in, int n_out, int64_t nseg, bool x_in_smem,
                     bool fitness, char* smem) {
    G = TEAM == TEAM_BLOCK ? int(blockDim.x) : TEAM;
    lane = threadIdx.x % G;
    lay = smem_layout(TEAM, blockDim.x, R, pop.L, n_out, x_in_smem ? int64_t(n_in) * D : 0, fitness);
    xv = x_in_smem ? stage_inputs(x, n_in, D, reinterpret_cast<float*>(smem + lay.x)) : x;
    const int64_t w = int64_t(blockIdx.x) * (blockDim.x / G) + threadIdx.x / G;
    p = nseg == 1 ? w : w / nseg;  // no 64-bit division for the one-segment plans (small, latency-bound cells)
    seg = w - p * nseg;
    valid = p < pop.P;
  }
  __device__ float* slots(char* smem, int n_out) const {
    return reinterpret_cast<float*>(smem + lay.slots) + size_t(threadIdx.x) * R * (n_out - 1);
  }
  __device__ char* tree_buf(char* smem, int L) const { return smem + lay.trees + (threadIdx.x / G) * tree_smem_bytes(L); }
};

// Predictions Y [P, D, n_out] (every element written).
template <int TEAM, int R, int STACK>
__global__ void forward_kernel(PopView pop, XView x, int64_t D, int n_in, int n_out, int64_t nseg, int64_t seg_rows,
                               bool x_in_smem, float* Y) {
  extern __shared__ __align__(16) char smem[];
  const TeamCtx<TEAM, R> c(pop, x, D, n_in, n_out, nseg, x_in_smem, false, smem);
  if (!c.valid) return;
  const auto t = team_tree<TEAM>(pop, c.p, c.tree_buf(smem, pop.L), c.lane, c.G);
  float* slots = c.slots(smem, n_out);
  const float* xp = c.xv.X + c.p * c.xv.sp;
  float* y = Y + c.p * D * n_out;
  const int64_t begin = c.seg * seg_rows, end = min(D, begin + seg_rows);
  for (int64_t pass = begin; pass < end; pass += int64_t(c.G) * R) {
    const int64_t base = pass + c.lane;
    if (base >= end) break;
    auto row = [&](int r) { return base + int64_t(r) * c.G; };
    auto load = [&](int v, int r) { return row(r) < end ? xp[row(r) * c.xv.sr + int64_t(v) * c.xv.sv] : 0.f; };
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.f;
    for (int i = 0; i < R * (n_out - 1); ++i) slots[i] = 0.f;
    auto emit = [&](int k, int r, float v) {
      if (k == 0) acc[r] += v;
      else slots[(k - 1) * R + r] += v;
    };
    const bool ok = eval_tree<R, STACK>(t, n_in, n_out, load, emit);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (row(r) >= end) continue;
      float* yr = y + row(r) * n_out;
      yr[0] = ok ? acc[r] : NAN;
      for (int k = 1; k < n_out; ++k) yr[k] = ok ? slots[(k - 1) * R + r] : NAN;
    }
  }
}

__device__ __forceinline__ double row_loss(float pred, float target, const float* W, int64_t row, int metric) {
  const double e = double(pred) - double(target);  // double: squared errors may exceed float32's range
  const double l = metric == MAE ? fabs(e) : e * e;
  return W ? W[row] * l : l;
}

// Loss of a mean over `D` rows, or over the weight sum when weights were given (read on the device).
__device__ __forceinline__ double finish_metric(double s, int64_t D, const double* wsum, int metric) {
  const double m = s / (wsum ? *wsum : double(D));
  return metric == RMSE ? sqrt(m) : m;
}

struct LossArgs {
  const float* Yt;  // [n_out, D]
  const float* W;   // [D] or null
  const double* wsum;
  int metric;
};

// Fused loss. nseg == 1: the team writes result[p]. nseg > 1: partial[(p * nseg + seg) * n_out + k] for a
// second pass (finish_loss_kernel) that sums the segments in order.
template <int TEAM, int R, int STACK>
__global__ void fitness_kernel(PopView pop, XView x, LossArgs a, int64_t D, int n_in, int n_out, int64_t nseg,
                               int64_t seg_rows, bool x_in_smem, double* partial, float* result) {
  extern __shared__ __align__(16) char smem[];
  const TeamCtx<TEAM, R> c(pop, x, D, n_in, n_out, nseg, x_in_smem, true, smem);
  if (!c.valid) return;
  const auto t = team_tree<TEAM>(pop, c.p, c.tree_buf(smem, pop.L), c.lane, c.G);
  float* slots = c.slots(smem, n_out);
  double* loss = reinterpret_cast<double*>(smem + c.lay.loss) + size_t(threadIdx.x) * (n_out - 1);
  double* scratch = reinterpret_cast<double*>(smem + c.lay.scratch);
  for (int k = 0; k < n_out - 1; ++k) loss[k] = 0.0;
  const float* xp = c.xv.X + c.p * c.xv.sp;
  const int64_t begin = c.seg * seg_rows, end = min(D, begin + seg_rows);
  double s0 = 0.0;
  bool ok = true;
  for (int64_t pass = begin; pass < end; pass += int64_t(c.G) * R) {
    const int64_t base = pass + c.lane;
    if (base >= end) break;
    auto row = [&](int r) { return base + int64_t(r) * c.G; };
    auto load = [&](int v, int r) { return row(r) < end ? xp[row(r) * c.xv.sr + int64_t(v) * c.xv.sv] : 0.f; };
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.f;
    for (int i = 0; i < R * (n_out - 1); ++i) slots[i] = 0.f;
    auto emit = [&](int k, int r, float v) {
      if (k == 0) acc[r] += v;
      else slots[(k - 1) * R + r] += v;
    };
    ok = eval_tree<R, STACK>(t, n_in, n_out, load, emit) && ok;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (row(r) >= end) continue;
      s0 += row_loss(acc[r], a.Yt[row(r)], a.W, row(r), a.metric);
      for (int k = 1; k < n_out; ++k)
        loss[k - 1] += row_loss(slots[(k - 1) * R + r], a.Yt[k * D + row(r)], a.W, row(r), a.metric);
    }
  }
  // a tree's failure is structural, so `ok` is uniform over the team; every thread joins the reductions
  double total = 0.0;
  for (int k = 0; k < n_out; ++k) {
    const double s = team_sum<TEAM>(ok ? (k == 0 ? s0 : loss[k - 1]) : NAN, scratch);
    if (c.lane != 0) continue;
    if (partial) partial[(c.p * nseg + c.seg) * n_out + k] = s;
    else total += finish_metric(s, D, a.wsum, a.metric);
  }
  if (c.lane == 0 && !partial) result[c.p] = float(total / n_out);
}

__global__ void finish_loss_kernel(const double* partial, int64_t P, int64_t nseg, int n_out, int metric, int64_t D,
                                   const double* wsum, float* result) {
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

// ---------------------------------------------------------------------------------------------------
// host side

inline cudaStream_t stream() { return c10::cuda::getCurrentCUDAStream(); }

struct DeviceInfo {
  int sms;
  size_t smem_optin;
};

// Queried once per device.
inline DeviceInfo device_info(int device) {
  static std::mutex mu;
  static std::unordered_map<int, DeviceInfo> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(device);
  if (it != cache.end()) return it->second;
  int sms = 0, optin = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return cache[device] = DeviceInfo{sms, size_t(optin)};
}

template <int V>
using Int = std::integral_constant<int, V>;

// Calls f(Int<R>, Int<STACK>) with the smallest stack bucket that holds `need`; deep trees use one row
// per thread to keep the local-memory stack small.
template <typename Fn>
void with_stack(int64_t need, int rows, Fn&& f) {
  TORCH_CHECK(need <= 4096, "gprl: evaluation stack of ", need, " exceeds 4096");
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

// Calls f(Int<TEAM>) for the plan's team kind.
template <typename Fn>
void with_team(int team, Fn&& f) {
  if (team == TEAM_THREAD) f(Int<TEAM_THREAD>());
  else if (team == TEAM_WARP) f(Int<TEAM_WARP>());
  else f(Int<TEAM_BLOCK>());
}

inline void check_strategy(int64_t strategy, bool batched) {
  TORCH_CHECK(strategy_supported(strategy, batched), "gprl: strategy ", strategy, " is not one of ",
              batched ? "-1 (auto), 0 (thread), 1 (warp), 6 (row)" : "-1 (auto) or 0..5 (thread .. data)",
              " for this op; see gprl/strategy.py");
}

// Raises the dynamic shared-memory limit of `kernel` when the launch needs more than the default 48 KB.
inline void prepare_launch(const void* kernel, size_t smem, const DeviceInfo& info) {
  TORCH_CHECK(smem <= info.smem_optin, "gprl: this evaluation needs ", smem, " bytes of shared memory but the device "
              "allows ", info.smem_optin, "; use a smaller max_len or fewer outputs");
  if (smem > 48 * 1024)
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
}

inline PopView pop_view(const at::Tensor& kind, const at::Tensor& code, const at::Tensor& out, const at::Tensor& value,
                        const at::Tensor& size) {
  return {kind.data_ptr<uint8_t>(), code.data_ptr<int16_t>(), out.data_ptr<uint8_t>(), value.data_ptr<float>(),
          size.data_ptr<int16_t>(), kind.size(0), int(kind.size(1))};
}

}  // namespace
}  // namespace eval
}  // namespace gprl
