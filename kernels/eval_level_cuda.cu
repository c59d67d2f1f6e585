// Level-synchronous CUDA evaluation (STRATEGY_LEVEL); forward_cuda and fitness_cuda (eval_cuda.cu) call it.
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
#include "eval_cuda.h"

namespace gprl {
namespace {

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
    desc = order + align16(2 * L);           // int [L][3]: where each operand is read (LevelTree::load)
    cnt = desc + align16(12 * L);            // int [L + 1]: subtree ends, then the depth of each node
    lvl = cnt + align16(4 * (L + 1));        // int [L + 1]: function nodes per depth, then their prefix sum
    xs = lvl + align16(4 * (L + 1));         // float [x_cols][rows]: the segment's inputs
    vals = xs + align16(4 * size_t(x_cols) * rows);  // float [L][rows]: function node results
    total = vals + align16(4 * size_t(L) * rows);
  }
};

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
  const bool ok =
      eval_levels(kind, code, out, value, size, p, L, n_in, n_out, X, D, row0, rows, stage_x, smem, lt);
  float* y = Y + p * D * n_out;
  for (int r = threadIdx.x; r < rows && row0 + r < D; r += blockDim.x)
    for (int k = 0; k < n_out; ++k) y[(row0 + r) * n_out + k] = ok ? lt.output(k, r) : NAN;
}

// Level-evaluated loss: per (tree, segment, output) partial sums of the loss terms as fitness_kernel writes
// them, or with one segment per tree the finished loss itself (no second kernel).
template <bool ORDERED>
__global__ void fitness_level_kernel(const uint8_t* kind, const int16_t* code, const uint8_t* out,
                                     const float* value, const int16_t* size, int L, const int* order,
                                     const float* X, const float* Yt, const float* W, int64_t D, int n_in,
                                     int n_out, int metric, int rows, bool stage_x, int64_t nseg,
                                     const double* wsum, const double* ystat, double* partial,
                                     float* result) {
  extern __shared__ __align__(16) char smem[];
  __shared__ double scratch[WARP];
  const int64_t p = tree_at<ORDERED>(order, blockIdx.x / nseg), seg = blockIdx.x % nseg, row0 = seg * rows;
  LevelTree lt;
  const bool ok =
      eval_levels(kind, code, out, value, size, p, L, n_in, n_out, X, D, row0, rows, stage_x, smem, lt);
  const int nt = metric_terms(metric);
  double total = 0.0;
  for (int k = 0; k < n_out; ++k) {
    double s[MAX_TERMS] = {};
    for (int r = threadIdx.x; ok && r < rows && row0 + r < D; r += blockDim.x)
      row_terms(s, lt.output(k, r), Yt[int64_t(k) * D + row0 + r], W, row0 + r, metric);
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

}  // namespace

void forward_level(const at::Tensor& kind, const at::Tensor& code, const at::Tensor& out,
                   const at::Tensor& value, const at::Tensor& size, const at::Tensor& xc, int64_t n_out,
                   at::Tensor& Y) {
  const int64_t P = kind.size(0), L = kind.size(1), D = xc.size(1);
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
}

void fitness_level(const at::Tensor& kind, const at::Tensor& code, const at::Tensor& out,
                   const at::Tensor& value, const at::Tensor& size, const at::Tensor& xc,
                   const at::Tensor& yc, const float* wp, const double* wsum_p, const double* ystat_p,
                   int64_t metric, at::Tensor& result) {
  const int64_t P = kind.size(0), L = kind.size(1), D = xc.size(1), n_out = yc.size(0);
  const int n_in = int(xc.size(0));
  const LevelShape sh = level_shape(L, D, n_in);
  const at::Tensor order = longest_first(size, sh.nseg, LEVEL_THREADS);
  at::Tensor partial;  // one segment per tree: the kernel finishes the loss itself
  if (sh.nseg > 1)
    partial = at::empty({P * sh.nseg * n_out * metric_terms(metric)}, xc.options().dtype(at::kDouble));
  double* partial_p = partial.defined() ? partial.data_ptr<double>() : nullptr;
  auto launch = [&](auto kernel) {
    set_smem(reinterpret_cast<const void*>(kernel), sh.smem);
    kernel<<<P * sh.nseg, LEVEL_THREADS, sh.smem, stream()>>>(
        kind.data_ptr<uint8_t>(), code.data_ptr<int16_t>(), out.data_ptr<uint8_t>(), value.data_ptr<float>(),
        size.data_ptr<int16_t>(), int(L), data_or_null(order), xc.data_ptr<float>(), yc.data_ptr<float>(), wp,
        D, n_in, int(n_out), int(metric), sh.rows, sh.stage_x, sh.nseg, wsum_p, ystat_p, partial_p,
        result.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
  if (order.defined()) launch(fitness_level_kernel<true>);
  else launch(fitness_level_kernel<false>);
  if (partial_p) finish_losses(partial_p, P, sh.nseg, n_out, metric, D, wsum_p, ystat_p, result);
}

}  // namespace gprl
