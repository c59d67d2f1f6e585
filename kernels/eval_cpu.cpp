// CPU evaluation: trees are interpreted once per chunk of rows, so the per-node dispatch is amortised
// over CHUNK rows and the inner loops over rows vectorise. The evaluation stack holds pointers: a variable
// is read where it lies in X (no copy) and a function writes into the buffer of its stack slot, which may be
// one of its own arguments (element r is read before it is written), so no node copies its values. The
// shared-subtree mapping (STRATEGY_SHARED, and `auto` where it pays) evaluates the population's graph of
// distinct subtrees (subtrees.h) chunk by chunk instead, then reads each tree's outputs from it.
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "nodes.h"
#include "ops.h"
#include "strategy.h"
#include "subtrees.h"
#include "trig_cpu.h"

// The row loops are compiled for several x86-64 levels and picked at load time (GCC function multiversioning,
// like glibc's own sinf/cosf variants): the binary runs on any x86-64 and uses AVX2 or AVX-512 where the CPU
// has them, and -ffp-contract=off (gprl/backend/build.py) makes every level compute the same bits. Elsewhere
// (other compilers or architectures) they are compiled once for the build's target.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define GPRL_ROWS __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define GPRL_ROWS
#endif

namespace gprl {
namespace {

// 256 rows: measured 1.3-2x the throughput of 64 at D = 392..1e5 (the per-node dispatch is amortised over more
// rows); the stack buffers of a typical tree still fit in L1/L2.
constexpr int CHUNK = 256;

struct TreeView {
  const uint8_t* kind;
  const int16_t* code;
  const uint8_t* out;
  const float* value;
  int len;
};

TreeView tree_at(const at::Tensor& kind, const at::Tensor& code, const at::Tensor& out, const at::Tensor& value,
                 const at::Tensor& size, int64_t t) {
  int64_t L = kind.size(1), o = t * L;
  int len = L > 0 ? size.data_ptr<int16_t>()[o] : 0;
  // a length past the row would read the next tree's nodes, or past the tensor for the last tree
  TORCH_CHECK(len >= 0 && len <= L, "gprl: tree ", std::to_string(t), " has length size[", std::to_string(t),
              ", 0] = ", std::to_string(len), " outside [0, max_len = ", std::to_string(L),
              "]; check it with gprl.validate");
  return {kind.data_ptr<uint8_t>() + o, code.data_ptr<int16_t>() + o, out.data_ptr<uint8_t>() + o,
          value.data_ptr<float>() + o, len};
}

// dst may alias a, b or c (same row index): no __restrict. sin/cos/tan use the vectorisable versions of
// trig_cpu.h (same values up to 1 ulp, nodes.h's post-processing); `tmp` is CHUNK floats of scratch for them.
GPRL_ROWS void apply_rows(int fn, int n, const float* a, const float* b, const float* c, float* dst, float* tmp) {
  switch (fn) {
#define GPRL_CASE(F)                                                                  \
  case F:                                                                             \
    if constexpr (F == SIN || F == COS || F == TAN) cpu_trig::trig_rows<F>(n, a, dst, tmp); \
    else for (int r = 0; r < n; ++r) dst[r] = apply(F, a[r], b[r], c[r]);              \
    break;
    GPRL_FUNCTIONS(GPRL_CASE)
#undef GPRL_CASE
    default: for (int r = 0; r < n; ++r) dst[r] = 0.f;
  }
}

// Per-thread scratch of one evaluation: a buffer of CHUNK floats per stack slot (plus one for Modi values
// and one for apply_rows) and the stack of pointers to each slot's current values.
struct Scratch {
  std::vector<float> buf;
  std::vector<const float*> slot;
  explicit Scratch(int64_t max_stack)
      : buf((std::max<int64_t>(max_stack, 1) + 2) * CHUNK), slot(std::max<int64_t>(max_stack, 1)) {}
  float* own(int i) { return buf.data() + int64_t(i) * CHUNK; }
  float* modi() { return buf.data() + int64_t(slot.size()) * CHUNK; }
  float* tmp() { return buf.data() + int64_t(slot.size() + 1) * CHUNK; }
  // CHUNK floats per output, for the fitness op's predictions
  std::vector<float> pred_buf;
  float* pred(int64_t n_out) {
    if (int64_t(pred_buf.size()) < n_out * CHUNK) pred_buf.resize(n_out * CHUNK);
    return pred_buf.data();
  }
};

// Evaluates `n` rows of one tree. Column v of the inputs starts at x + v * ld. Each Modi node and a
// non-Modi root call emit(output_index, values[n]).
template <typename Emit>
void eval_chunk(const TreeView& t, const float* x, int64_t ld, int64_t n_in, int64_t n_out, int n, Scratch& s,
                int max_stack, Emit&& emit) {
  const float** stack = s.slot.data();
  int sp = 0;
  for (int i = t.len - 1; i >= 0; --i) {
    uint8_t k = t.kind[i] & KIND_MASK;
    if (k == FUNC) {
      int fn = t.code[i], ar = arity(fn);
      TORCH_CHECK(sp >= ar, "gprl: malformed tree (a function node lacks children); check it with gprl.validate");
      const float* a = stack[sp - 1];
      const float* b = ar >= 2 ? stack[sp - 2] : a;
      const float* c = ar >= 3 ? stack[sp - 3] : a;
      sp -= ar - 1;  // the result takes the last child's slot
      if (t.kind[i] & OUTPUT_FLAG) {  // Modi: the last child's value passes up (its slot is left as it is)
        TORCH_CHECK(t.out[i] < n_out, "gprl: output index ", std::to_string(t.out[i]), " >= n_out ",
                    std::to_string(n_out));
        float* v = s.modi();
        apply_rows(fn, n, a, b, c, v, s.tmp());
        emit(int(t.out[i]), v);
      } else {
        float* dst = s.own(sp - 1);
        apply_rows(fn, n, a, b, c, dst, s.tmp());
        stack[sp - 1] = dst;
      }
      continue;
    }
    TORCH_CHECK(sp < max_stack, "gprl: evaluation stack overflow (max_stack too small)");
    if (k == VAR) {
      TORCH_CHECK(t.code[i] >= 0 && t.code[i] < n_in, "gprl: variable index ", std::to_string(t.code[i]),
                  " >= n_in ", std::to_string(n_in));
      stack[sp] = x + int64_t(t.code[i]) * ld;
    } else {  // CONST (PAD never lies inside a tree)
      float* dst = s.own(sp);
      for (int r = 0; r < n; ++r) dst[r] = t.value[i];
      stack[sp] = dst;
    }
    ++sp;
  }
  if (t.len > 0 && !(t.kind[0] & OUTPUT_FLAG)) emit(0, stack[0]);
}

// ---- scheduling: jobs over the calling thread and helpers from torch's inter-op pool ----

// Below this many node-rows of work per thread the kernels run on the calling thread alone: waking a
// helper costs more than it saves for tiny populations or datasets.
constexpr int64_t MIN_WORK_PER_THREAD = int64_t(1) << 18;

// Node-rows of one evaluation (D rows of every tree), capped at `enough`: summing the lengths of big
// populations is only needed when the cheap bounds do not already decide the thread count.
int64_t work_of(const at::Tensor& size, int64_t rows, int64_t enough) {
  int64_t P = size.size(0), L = size.size(1);
  if (L == 0 || P * rows >= enough) return P * rows;
  const int16_t* sp = size.data_ptr<int16_t>();
  int64_t nodes = 0;
  for (int64_t t = 0; t < P; ++t) nodes += sp[t * L];
  return nodes * rows;
}

// Shared state of one run_jobs call. Threads claim batches of jobs from `next`; the caller waits only for
// batches that were claimed, so a helper that the OS starts late (a machine shared with other processes)
// finds no work left and costs nothing. (An OpenMP region ends in a barrier over all its threads: with two
// threads on a loaded 2-core machine a 1 ms evaluation took 12 ms, most of it waiting for the second thread
// to be scheduled.) Helpers hold this state by shared_ptr and call `body` only after claiming a batch, while
// the caller is still waiting, so nothing they touch can be gone.
struct JobQueue {
  int64_t jobs, batch;
  std::atomic<int64_t> next{0}, done{0};
  std::function<void(int64_t begin, int64_t end)> body;  // runs jobs [begin, end) on the calling thread
  std::mutex mutex;
  std::condition_variable finished;
  std::exception_ptr error;
  std::atomic<bool> failed{false};

  // Claims and runs batches until none is left; returns when this thread has no claimed work. After an
  // error the remaining batches are claimed and counted without running, so the caller's wait still ends.
  void work() {
    for (int64_t j0; (j0 = next.fetch_add(batch, std::memory_order_relaxed)) < jobs;) {
      int64_t j1 = std::min(jobs, j0 + batch);
      if (!failed.load(std::memory_order_relaxed)) {
        try {
          body(j0, j1);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mutex);
          if (!error) error = std::current_exception();
          failed.store(true, std::memory_order_relaxed);
        }
      }
      if (done.fetch_add(j1 - j0, std::memory_order_acq_rel) + (j1 - j0) == jobs) {
        std::lock_guard<std::mutex> lock(mutex);
        finished.notify_all();
      }
    }
  }
};

// Runs body(scratch, job) for every job in [0, jobs): on the calling thread plus up to torch's thread count - 1
// helpers from torch's inter-op pool, about one thread per MIN_WORK_PER_THREAD of work. Each job writes only
// its own outputs, so the results do not depend on which thread ran it.
template <typename Body>
void run_jobs(int64_t jobs, const at::Tensor& size, int64_t rows, int64_t max_stack, Body&& body) {
  if (jobs <= 0) return;
  int64_t threads = at::in_parallel_region() ? 1 : std::min<int64_t>(at::get_num_threads(), jobs);
  if (threads > 1) {
    int64_t work = work_of(size, rows, threads * MIN_WORK_PER_THREAD);
    threads = std::max<int64_t>(1, std::min(threads, work / MIN_WORK_PER_THREAD));
  }
  if (threads == 1) {
    Scratch scratch(max_stack);
    for (int64_t j = 0; j < jobs; ++j) body(scratch, j);
    return;
  }
  auto queue = std::make_shared<JobQueue>();
  queue->jobs = jobs;
  queue->batch = std::max<int64_t>(1, jobs / (threads * 64));
  queue->body = [&](int64_t begin, int64_t end) {
    Scratch scratch(max_stack);
    for (int64_t j = begin; j < end; ++j) body(scratch, j);
  };
  for (int64_t h = 1; h < threads; ++h) at::launch([queue] { queue->work(); });
  queue->work();
  {
    std::unique_lock<std::mutex> lock(queue->mutex);
    queue->finished.wait(lock, [&] { return queue->done.load(std::memory_order_acquire) == jobs; });
  }
  if (queue->error) std::rethrow_exception(queue->error);
}

// Rows [begin, end) of part `i` of `parts` equal parts of `chunks` chunks: depends only on the sizes.
inline int64_t part_begin(int64_t i, int64_t parts, int64_t chunks) { return i * chunks / parts * CHUNK; }

// A job evaluates one tree on one contiguous part of the rows. Jobs run part-major (all trees on part 0,
// then part 1, ...), so a part of X stays in cache while the trees read it. PARTS_PER_TREE bounds the number
// of parts (and of fitness partial sums) per tree; small datasets have one part per chunk.
constexpr int64_t PARTS_PER_TREE = 16;

struct Split {
  int64_t P, chunks, parts;
  Split(int64_t P_, int64_t D) : P(P_), chunks((D + CHUNK - 1) / CHUNK), parts(std::min(chunks, PARTS_PER_TREE)) {}
  int64_t jobs() const { return P * parts; }
  int64_t tree(int64_t job) const { return job % P; }
  int64_t part(int64_t job) const { return job / P; }
};

// y[r * n_out + k] += v[r], the forward ops' output layout [.., rows, n_out]
template <typename EvalRows>
void forward_rows(const Split& split, int64_t job, int64_t D, int64_t n_out, float* yp, EvalRows&& eval_rows) {
  int64_t t = split.tree(job), p = split.part(job);
  int64_t r_end = std::min(D, part_begin(p + 1, split.parts, split.chunks));
  for (int64_t r0 = part_begin(p, split.parts, split.chunks); r0 < r_end; r0 += CHUNK) {
    int n = int(std::min<int64_t>(CHUNK, r_end - r0));
    float* y = yp + (t * D + r0) * n_out;
    eval_rows(t, r0, n, [&](int k, const float* v) { for (int r = 0; r < n; ++r) y[r * n_out + k] += v[r]; });
  }
}

// ---- shared subtrees (subtrees.h): each distinct subtree of the population once per row ----

// One thread's values of every graph node on a chunk of rows: a function node writes CHUNK floats of its own,
// a variable points into X, a constant into rows filled once per call (`constant_rows`). The storage is the
// thread's and stays between calls: a run evaluates graphs of about the same size every generation, and fresh
// pages for each part of the rows cost about a tenth of the evaluation.
struct GraphRows {
  const SubtreeGraph& g;
  std::vector<const float*>& at;
  float* buf;  // not zeroed: every function node writes its rows before they are read

  GraphRows(const SubtreeGraph& graph, const std::vector<float>& constant_rows) : g(graph), at(storage().at) {
    Storage& s = storage();
    const size_t floats = g.functions.size() * CHUNK;
    if (s.capacity < floats) s.buf.reset(new float[floats]), s.capacity = floats;
    buf = s.buf.get();
    at.resize(g.size());
    for (size_t j = 0; j < g.constants.size(); ++j) at[g.constants[j]] = constant_rows.data() + j * CHUNK;
  }
  void eval(const float* x, int64_t ld, int n, float* tmp) {
    for (int32_t v : g.variables) at[v] = x + int64_t(g.code[v]) * ld;
    for (size_t j = 0; j < g.functions.size(); ++j) {
      const int32_t f = g.functions[j], *c = g.child.data() + 3 * int64_t(f);
      float* dst = buf + j * CHUNK;
      apply_rows(g.code[f], n, at[c[0]], at[c[1]], at[c[2]], dst, tmp);
      at[f] = dst;
    }
  }
  // emit(output, values) for each emission of tree t, in the interpreter's order
  template <typename Emit>
  void emit(int64_t t, Emit&& emit) const {
    for (int64_t e = g.emit_begin[t]; e < g.emit_begin[t + 1]; ++e) emit(int(g.emit_out[e]), at[g.emit_node[e]]);
  }

 private:
  struct Storage {
    std::vector<const float*> at;
    std::unique_ptr<float[]> buf;
    size_t capacity = 0;
  };
  static Storage& storage() {
    thread_local Storage s;
    return s;
  }
};

std::vector<float> constant_rows(const SubtreeGraph& g) {
  std::vector<float> rows(g.constants.size() * CHUNK);
  for (size_t j = 0; j < g.constants.size(); ++j)
    std::fill_n(rows.begin() + j * CHUNK, CHUNK, g.value[g.constants[j]]);
  return rows;
}

// `auto` builds the graph only from this many rows, and takes it where its estimated time is below the
// interpreter's: building costs about GRAPH_BUILD_COST node evaluations of the interpreter per node read, a
// distinct function node about GRAPH_NODE_COST per row (it writes rows of its own, where the interpreter reuses a
// few stack buffers that stay in L1); the graph's parallelism is over chunks of rows, the interpreter's also over
// trees. Measured on a 2-core EPYC (2 threads): Feynman populations of 2,000 trees from a run's generations
// 1-100 take 0.2-0.7x the interpreter's time at 1,024 rows and more; random populations of 1,000-10,000 trees,
// where 30% of the function nodes repeat, 0.7-0.75x at 20,640 rows but up to 1.4x at 392 (the build) under
// `shared`, and `auto` keeps them on the interpreter.
constexpr int64_t GRAPH_MIN_ROWS = 1024;
constexpr double GRAPH_BUILD_COST = 32.0;
constexpr double GRAPH_NODE_COST = 1.5;
// `auto` keeps the interpreter where a thread's rows of the graph's function nodes would pass this (16,384
// distinct function nodes; a Feynman run's 2,000 trees have 4,000-6,000): rows that spill out of the caches
// cost more than the interpreter's.
constexpr size_t GRAPH_MAX_BYTES = size_t(16) << 20;

// The graph of the population when `strategy` asks for it, or when `auto` finds it cheaper than the
// interpreter (an empty optional: interpret).
std::optional<SubtreeGraph> shared_graph(int64_t strategy, const at::Tensor& kind, const at::Tensor& code,
                                         const at::Tensor& out, const at::Tensor& value, const at::Tensor& size,
                                         int64_t D, int64_t n_in, int64_t n_out, int64_t max_stack) {
  const int64_t P = kind.size(0);
  auto tree = [&](int64_t t) { return tree_at(kind, code, out, value, size, t); };
  if (strategy == STRATEGY_SHARED) return build_subtree_graph(P, tree, n_in, n_out, max_stack, SIZE_MAX);
  if (strategy != STRATEGY_AUTO || D < GRAPH_MIN_ROWS) return std::nullopt;
  // the interpreter's time, and the most distinct function nodes at which the graph's is still below it: the
  // build stops there (a constant is a fill per row in the interpreter, about a quarter of a function's cost)
  const int64_t threads = at::in_parallel_region() ? 1 : at::get_num_threads();
  const int64_t graph_threads = std::min(threads, Split(1, D).parts);
  int64_t nodes = 0, functions = 0, constants = 0;
  for (int64_t t = 0; t < P; ++t) {
    const TreeView v = tree(t);
    nodes += v.len;
    for (int i = 0; i < v.len; ++i) {
      const uint8_t node = v.kind[i] & KIND_MASK;
      functions += node == FUNC, constants += node == CONST;
    }
  }
  const double interpreted = (double(functions) + 0.25 * double(constants)) * double(D) / double(threads);
  const double room = (interpreted - GRAPH_BUILD_COST * double(nodes)) / (GRAPH_NODE_COST * double(D) / graph_threads);
  const double most = std::min(room, double(GRAPH_MAX_BYTES / (CHUNK * sizeof(float))));
  if (most < 1) return std::nullopt;
  return build_subtree_graph(P, tree, n_in, n_out, max_stack, size_t(most));
}

at::Tensor forward_cpu(const at::Tensor& kind, const at::Tensor& code, const at::Tensor& out, const at::Tensor& value,
                       const at::Tensor& size, const at::Tensor& Xt, int64_t n_out, int64_t max_stack,
                       int64_t strategy) {
  check_population(kind, code, out, value, size);
  check_strategy(strategy, false, n_out, true);
  check_data(Xt, kind, "Xt");
  TORCH_CHECK(Xt.dim() == 2, "gprl: Xt must be [n_in, D]");
  int64_t P = kind.size(0), n_in = Xt.size(0), D = Xt.size(1);
  at::Tensor xc = Xt.contiguous();
  at::Tensor Y = at::zeros({P, D, n_out}, Xt.options());
  const float* xp = xc.data_ptr<float>();
  float* yp = Y.data_ptr<float>();
  Split split(P, D);
  if (auto g = shared_graph(strategy, kind, code, out, value, size, D, n_in, n_out, max_stack)) {
    // a job evaluates the graph on one part of the rows, then adds every tree's emissions
    const std::vector<float> consts = constant_rows(*g);
    run_jobs(split.parts, size, D, max_stack, [&](Scratch& scratch, int64_t p) {
      GraphRows rows(*g, consts);
      int64_t r_end = std::min(D, part_begin(p + 1, split.parts, split.chunks));
      for (int64_t r0 = part_begin(p, split.parts, split.chunks); r0 < r_end; r0 += CHUNK) {
        int n = int(std::min<int64_t>(CHUNK, r_end - r0));
        rows.eval(xp + r0, D, n, scratch.tmp());
        for (int64_t t = 0; t < P; ++t) {
          float* y = yp + (t * D + r0) * n_out;
          rows.emit(t, [&](int k, const float* v) { for (int r = 0; r < n; ++r) y[r * n_out + k] += v[r]; });
        }
      }
    });
    return Y;
  }
  run_jobs(split.jobs(), size, D, max_stack, [&](Scratch& scratch, int64_t job) {
    forward_rows(split, job, D, n_out, yp, [&](int64_t t, int64_t r0, int n, auto&& emit) {
      eval_chunk(tree_at(kind, code, out, value, size, t), xp + r0, D, n_in, n_out, n, scratch, int(max_stack),
                 emit);
    });
  });
  return Y;
}

at::Tensor forward_batched_cpu(const at::Tensor& kind, const at::Tensor& code, const at::Tensor& out,
                               const at::Tensor& value, const at::Tensor& size, const at::Tensor& X,
                               int64_t n_out, int64_t max_stack) {
  check_population(kind, code, out, value, size);
  check_data(X, kind, "X");
  TORCH_CHECK(X.dim() == 3 && X.size(0) == kind.size(0), "gprl: X must be [P, B, n_in]");
  int64_t P = X.size(0), B = X.size(1);
  at::Tensor xc = X.transpose(1, 2).contiguous();  // [P, n_in, B]
  int64_t n_in = xc.size(1);
  at::Tensor Y = at::zeros({P, B, n_out}, X.options());
  const float* xp = xc.data_ptr<float>();
  float* yp = Y.data_ptr<float>();
  Split split(P, B);
  run_jobs(split.jobs(), size, B, max_stack, [&](Scratch& scratch, int64_t job) {
    forward_rows(split, job, B, n_out, yp, [&](int64_t t, int64_t r0, int n, auto&& emit) {
      eval_chunk(tree_at(kind, code, out, value, size, t), xp + t * n_in * B + r0, B, n_in, n_out, n, scratch,
                 int(max_stack), emit);
    });
  });
  return Y;
}

// Terms (add_row_terms, ops.h) summed over n <= CHUNK rows: LANES independent double partial sums (so the
// loop vectorises; one serial sum was a 4-cycle dependency chain per row), added in a fixed order at the
// end: the result depends only on the data, not on the threads. double: squared errors of float32
// predictions may exceed float32's range.
template <int64_t METRIC, bool WEIGHTED>
GPRL_ROW_INLINE void terms_rows_impl(int n, const float* pred, const float* y, const float* w, double* out) {
  constexpr int LANES = 8, NT = METRIC >= SCALED_MSE ? 3 : 1;
  double acc[LANES][NT] = {};
  auto add = [&](int l, int r) { add_row_terms(acc[l], pred[r], y[r], WEIGHTED ? double(w[r]) : 1.0, METRIC); };
  int r0 = 0;
  for (; r0 + LANES <= n; r0 += LANES)
    for (int l = 0; l < LANES; ++l) add(l, r0 + l);
  for (int l = 0; r0 + l < n; ++l) add(l, r0 + l);
  for (int j = 0; j < NT; ++j) {
    double s = 0.0;
    for (int l = 0; l < LANES; ++l) s += acc[l][j];
    out[j] += s;
  }
}

GPRL_ROWS void terms_rows(int64_t metric, int n, const float* pred, const float* y, const float* w, double* out) {
  if (metric >= SCALED_MSE)
    return w ? terms_rows_impl<SCALED_MSE, true>(n, pred, y, w, out)
             : terms_rows_impl<SCALED_MSE, false>(n, pred, y, w, out);
  if (metric == MAE)
    return w ? terms_rows_impl<MAE, true>(n, pred, y, w, out) : terms_rows_impl<MAE, false>(n, pred, y, w, out);
  return w ? terms_rows_impl<MSE, true>(n, pred, y, w, out) : terms_rows_impl<MSE, false>(n, pred, y, w, out);
}

at::Tensor fitness_cpu(const at::Tensor& kind, const at::Tensor& code, const at::Tensor& out, const at::Tensor& value,
                       const at::Tensor& size, const at::Tensor& Xt, const at::Tensor& yt,
                       const std::optional<at::Tensor>& weight, int64_t metric, int64_t max_stack,
                       int64_t strategy) {
  at::Tensor w = check_fitness_args(kind, code, out, value, size, Xt, yt, weight, metric);
  check_strategy(strategy, true, yt.size(0), true);
  int64_t P = kind.size(0), n_in = Xt.size(0), D = Xt.size(1), n_out = yt.size(0);
  const int nt = metric_terms(metric);
  at::Tensor xc = Xt.contiguous(), yc = yt.contiguous(), ystat;
  if (metric >= SCALED_MSE) std::tie(yc, ystat) = scaled_targets(yt, w);
  const float *xp = xc.data_ptr<float>(), *yp = yc.data_ptr<float>();
  const float* wp = w.defined() ? w.data_ptr<float>() : nullptr;
  // One set of terms per tree, part of the rows and output, summed in a fixed order: the result does not
  // depend on the threads.
  Split split(P, D);
  std::vector<double> partial(split.jobs() * n_out * nt, 0.0);
  // The terms of tree t on rows [r0, r0 + n) of part p, from its outputs' emissions (eval_tree(emit)).
  auto add_terms = [&](int64_t t, int64_t p, int64_t r0, int n, float* pred, auto&& eval_tree) {
    std::fill(pred, pred + n_out * CHUNK, 0.f);
    eval_tree([&](int k, const float* v) { for (int r = 0; r < n; ++r) pred[k * CHUNK + r] += v[r]; });
    double* part = partial.data() + (t * split.parts + p) * n_out * nt;
    for (int64_t k = 0; k < n_out; ++k)
      terms_rows(metric, n, pred + k * CHUNK, yp + k * D + r0, wp ? wp + r0 : nullptr, part + k * nt);
  };
  if (auto g = shared_graph(strategy, kind, code, out, value, size, D, n_in, n_out, max_stack)) {
    // A job evaluates the graph on one part of the rows, then sums every tree's terms there. A tree whose one
    // emission is a node's values (a single-output tree without Modi nodes) has that node's terms: a tree
    // that repeats whole (elites, copies) reuses them. (0 + v, the interpreter's prediction, has v's terms.)
    const std::vector<float> consts = constant_rows(*g);
    std::vector<int32_t> root(P, -1), root_node;  // tree -> its slot among the distinct such nodes
    if (n_out == 1) {
      std::vector<int32_t> slot(g->size(), -1);
      for (int64_t t = 0; t < P; ++t) {
        if (g->emit_begin[t + 1] - g->emit_begin[t] != 1) continue;
        const int32_t v = g->emit_node[g->emit_begin[t]];
        if (slot[v] < 0) slot[v] = int32_t(root_node.size()), root_node.push_back(v);
        root[t] = slot[v];
      }
    }
    run_jobs(split.parts, size, D, max_stack, [&](Scratch& scratch, int64_t p) {
      GraphRows rows(*g, consts);
      float* pred = scratch.pred(n_out);
      std::vector<double> terms(root_node.size() * nt);
      int64_t r_end = std::min(D, part_begin(p + 1, split.parts, split.chunks));
      for (int64_t r0 = part_begin(p, split.parts, split.chunks); r0 < r_end; r0 += CHUNK) {
        int n = int(std::min<int64_t>(CHUNK, r_end - r0));
        rows.eval(xp + r0, D, n, scratch.tmp());
        std::fill(terms.begin(), terms.end(), 0.0);
        for (size_t i = 0; i < root_node.size(); ++i)
          terms_rows(metric, n, rows.at[root_node[i]], yp + r0, wp ? wp + r0 : nullptr, terms.data() + i * nt);
        for (int64_t t = 0; t < P; ++t) {
          if (root[t] < 0) {
            add_terms(t, p, r0, n, pred, [&](auto&& emit) { rows.emit(t, emit); });
            continue;
          }
          double* part = partial.data() + (t * split.parts + p) * nt;
          for (int j = 0; j < nt; ++j) part[j] += terms[root[t] * nt + j];
        }
      }
    });
  } else {
    run_jobs(split.jobs(), size, D, max_stack, [&](Scratch& scratch, int64_t job) {
      int64_t t = split.tree(job), p = split.part(job);
      TreeView tree = tree_at(kind, code, out, value, size, t);
      float* pred = scratch.pred(n_out);
      int64_t r_end = std::min(D, part_begin(p + 1, split.parts, split.chunks));
      for (int64_t r0 = part_begin(p, split.parts, split.chunks); r0 < r_end; r0 += CHUNK) {
        int n = int(std::min<int64_t>(CHUNK, r_end - r0));
        add_terms(t, p, r0, n, pred, [&](auto&& emit) {
          eval_chunk(tree, xp + r0, D, n_in, n_out, n, scratch, int(max_stack), emit);
        });
      }
    });
  }
  double denom = double(D);
  if (wp) {
    denom = 0.0;
    for (int64_t r = 0; r < D; ++r) denom += wp[r];
  }
  const double* sp = ystat.defined() ? ystat.data_ptr<double>() : nullptr;
  at::Tensor result = at::empty({P}, Xt.options());
  float* rp = result.data_ptr<float>();
  for (int64_t t = 0; t < P; ++t) {
    double total = 0.0;
    for (int64_t k = 0; k < n_out; ++k) {
      double s[MAX_TERMS] = {};
      for (int64_t p = 0; p < split.parts; ++p)
        for (int j = 0; j < nt; ++j) s[j] += partial[((t * split.parts + p) * n_out + k) * nt + j];
      total += finish_terms(s, denom, sp ? sp + 3 * k : nullptr, metric);
    }
    rp[t] = float(total / double(n_out));
  }
  return result;
}

}  // namespace
}  // namespace gprl

TORCH_LIBRARY_IMPL(gprl, CPU, m) {
  m.impl("forward", &gprl::forward_cpu);
  m.impl("forward_batched", &gprl::forward_batched_cpu);
  m.impl("fitness", &gprl::fitness_cpu);
}
