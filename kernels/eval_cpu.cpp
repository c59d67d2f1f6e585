// CPU evaluation: trees are interpreted once per chunk of rows, so the per-node dispatch is amortised
// over CHUNK rows and the inner loops over rows vectorise. The evaluation stack holds pointers: a variable
// is read where it lies in X (no copy) and a function writes into the buffer of its stack slot, which may be
// one of its own arguments (element r is read before it is written), so no node copies its values.
#include <ATen/Parallel.h>

#include <vector>

#include "nodes.h"
#include "ops.h"
#include "trig_cpu.h"

// The row loops are compiled for several x86-64 levels and picked at load time (GCC function multiversioning,
// like glibc's own sinf/cosf variants): the binary runs on any x86-64 and uses AVX2 or AVX-512 where the CPU
// has them, and -ffp-contract=off (gprl/_build.py) makes every level compute the same bits. Elsewhere (other
// compilers or architectures) they are compiled once for the build's target.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define GPRL_ROWS __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define GPRL_ROWS
#endif

namespace gprl {
namespace {

constexpr int CHUNK = 64;

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
        TORCH_CHECK(t.out[i] < n_out, "gprl: output index ", int(t.out[i]), " >= n_out ", n_out);
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
      TORCH_CHECK(t.code[i] >= 0 && t.code[i] < n_in, "gprl: variable index ", t.code[i], " >= n_in ", n_in);
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

at::Tensor forward_cpu(const at::Tensor& kind, const at::Tensor& code, const at::Tensor& out, const at::Tensor& value,
                       const at::Tensor& size, const at::Tensor& Xt, int64_t n_out, int64_t max_stack) {
  check_population(kind, code, out, value, size);
  check_data(Xt, kind, "Xt");
  TORCH_CHECK(Xt.dim() == 2, "gprl: Xt must be [n_in, D]");
  int64_t P = kind.size(0), n_in = Xt.size(0), D = Xt.size(1);
  at::Tensor xc = Xt.contiguous();
  at::Tensor Y = at::zeros({P, D, n_out}, Xt.options());
  const float* xp = xc.data_ptr<float>();
  float* yp = Y.data_ptr<float>();
  int64_t chunks = (D + CHUNK - 1) / CHUNK;
  at::parallel_for(0, P * chunks, 1, [&](int64_t begin, int64_t end) {
    Scratch scratch(max_stack);
    for (int64_t job = begin; job < end; ++job) {
      int64_t t = job / chunks, r0 = (job % chunks) * CHUNK;
      int n = int(std::min<int64_t>(CHUNK, D - r0));
      float* y = yp + (t * D + r0) * n_out;
      eval_chunk(tree_at(kind, code, out, value, size, t), xp + r0, D, n_in, n_out, n, scratch, int(max_stack),
                 [&](int k, const float* v) { for (int r = 0; r < n; ++r) y[r * n_out + k] += v[r]; });
    }
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
  int64_t chunks = (B + CHUNK - 1) / CHUNK;
  at::parallel_for(0, P * chunks, 1, [&](int64_t begin, int64_t end) {
    Scratch scratch(max_stack);
    for (int64_t job = begin; job < end; ++job) {
      int64_t t = job / chunks, r0 = (job % chunks) * CHUNK;
      int n = int(std::min<int64_t>(CHUNK, B - r0));
      float* y = yp + (t * B + r0) * n_out;
      eval_chunk(tree_at(kind, code, out, value, size, t), xp + t * n_in * B + r0, B, n_in, n_out, n, scratch,
                 int(max_stack),
                 [&](int k, const float* v) { for (int r = 0; r < n; ++r) y[r * n_out + k] += v[r]; });
    }
  });
  return Y;
}

at::Tensor fitness_cpu(const at::Tensor& kind, const at::Tensor& code, const at::Tensor& out, const at::Tensor& value,
                       const at::Tensor& size, const at::Tensor& Xt, const at::Tensor& yt,
                       const std::optional<at::Tensor>& weight, int64_t metric, int64_t max_stack) {
  at::Tensor w = check_fitness_args(kind, code, out, value, size, Xt, yt, weight, metric);
  int64_t P = kind.size(0), n_in = Xt.size(0), D = Xt.size(1), n_out = yt.size(0);
  at::Tensor xc = Xt.contiguous(), yc = yt.contiguous();
  const float *xp = xc.data_ptr<float>(), *yp = yc.data_ptr<float>();
  const float* wp = w.defined() ? w.data_ptr<float>() : nullptr;
  // Fixed blocks of rows with one partial sum each, summed in order: the result does not depend on threads.
  constexpr int64_t BLOCK_CHUNKS = 16;
  int64_t chunks = (D + CHUNK - 1) / CHUNK, blocks = (chunks + BLOCK_CHUNKS - 1) / BLOCK_CHUNKS;
  std::vector<double> partial(P * blocks * n_out, 0.0);
  at::parallel_for(0, P * blocks, 1, [&](int64_t begin, int64_t end) {
    Scratch scratch(max_stack);
    std::vector<float> pred(n_out * CHUNK);
    for (int64_t job = begin; job < end; ++job) {
      int64_t t = job / blocks, blk = job % blocks;
      TreeView tree = tree_at(kind, code, out, value, size, t);
      double* part = partial.data() + job * n_out;
      for (int64_t ch = blk * BLOCK_CHUNKS; ch < std::min(chunks, (blk + 1) * BLOCK_CHUNKS); ++ch) {
        int64_t r0 = ch * CHUNK;
        int n = int(std::min<int64_t>(CHUNK, D - r0));
        std::fill(pred.begin(), pred.end(), 0.f);
        eval_chunk(tree, xp + r0, D, n_in, n_out, n, scratch, int(max_stack),
                   [&](int k, const float* v) { for (int r = 0; r < n; ++r) pred[k * CHUNK + r] += v[r]; });
        for (int64_t k = 0; k < n_out; ++k) {
          double s = 0.0;  // double: squared errors of float32 predictions may exceed float32's range
          for (int r = 0; r < n; ++r) {
            double e = double(pred[k * CHUNK + r]) - double(yp[k * D + r0 + r]);
            double l = metric == MAE ? std::fabs(e) : e * e;
            s += wp ? wp[r0 + r] * l : l;
          }
          part[k] += s;
        }
      }
    }
  });
  double denom = double(D);
  if (wp) {
    denom = 0.0;
    for (int64_t r = 0; r < D; ++r) denom += wp[r];
  }
  at::Tensor result = at::empty({P}, Xt.options());
  float* rp = result.data_ptr<float>();
  for (int64_t t = 0; t < P; ++t) {
    double total = 0.0;
    for (int64_t k = 0; k < n_out; ++k) {
      double s = 0.0;
      for (int64_t blk = 0; blk < blocks; ++blk) s += partial[(t * blocks + blk) * n_out + k];
      double m = s / denom;
      total += metric == RMSE ? std::sqrt(m) : m;
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
