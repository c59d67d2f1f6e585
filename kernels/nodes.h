// Node semantics shared by the CPU (C++) and CUDA kernels: node encoding, the function table,
// protected arithmetic and the counter-based random numbers. gprl/core/functions.py mirrors the
// function table and the protection rules for sympy and NumPy; the two must change together.
#pragma once
#include <cstdint>
#include <cmath>

#if defined(__CUDACC__)
#define GPRL_HD __host__ __device__ __forceinline__
#else
#define GPRL_HD inline
#endif

namespace gprl {

// ---- node encoding (documented in gprl/core/encoding.py) ----
enum NodeKind : uint8_t { PAD = 0, VAR = 1, CONST = 2, FUNC = 3 };
constexpr uint8_t KIND_MASK = 0x03;
constexpr uint8_t OUTPUT_FLAG = 0x04;  // a FUNC node that adds its value to output `out` (a Modi node)

// ---- function table: ids are stable (saved populations refer to them) ----
enum Fn : int {
  ADD = 0, SUB, MUL, DIV, SIN, COS, TAN, EXP, LOG, SQRT, ABS, NEG, INV, POW, MAX, MIN, TANH, SIGMOID,
  LT, GT, IF, NUM_FUNCTIONS
};

// X-macro over every function id, for loops that switch once per node and then run over many rows.
#define GPRL_FUNCTIONS(X) \
  X(ADD) X(SUB) X(MUL) X(DIV) X(SIN) X(COS) X(TAN) X(EXP) X(LOG) X(SQRT) X(ABS) X(NEG) X(INV) X(POW) \
  X(MAX) X(MIN) X(TANH) X(SIGMOID) X(LT) X(GT) X(IF)

// Two bits per function id, read with one shift where the interpreters decode a node; ids outside the
// table count as unary (eval rejects them).
constexpr uint64_t ARITY_BITS = [] {
  uint64_t bits = 0;
  for (int fn = 0; fn < NUM_FUNCTIONS; ++fn) {
    const bool binary = fn <= DIV || fn == POW || fn == MAX || fn == MIN || fn == LT || fn == GT;
    bits |= uint64_t(fn == IF ? 3 : (binary ? 2 : 1)) << (2 * fn);
  }
  return bits;
}();
static_assert(2 * NUM_FUNCTIONS <= 64, "ARITY_BITS holds two bits per function");

GPRL_HD constexpr int arity(int fn) { return unsigned(fn) < NUM_FUNCTIONS ? int(ARITY_BITS >> (2 * fn)) & 3 : 1; }

// Protection thresholds and the overflow bound (float32's largest finite value).
constexpr float PROTECT_EPS = 1e-6f;
constexpr float VALUE_BOUND = 3.40282347e38f;

// Overflow to +-inf saturates at +-VALUE_BOUND; NaN passes through (it only arises from NaN inputs).
GPRL_HD float clampv(float v) { return v > VALUE_BOUND ? VALUE_BOUND : (v < -VALUE_BOUND ? -VALUE_BOUND : v); }

GPRL_HD float apply(int fn, float a, float b, float c) {
  float v;
  switch (fn) {
    case ADD: v = a + b; break;
    case SUB: v = a - b; break;
    case MUL: v = a * b; break;
    case DIV: v = fabsf(b) < PROTECT_EPS ? 1.0f : a / b; break;
    // sin, cos and tan of a float are finite or NaN (no float lies on an odd multiple of pi/2), so the clamp
    // below would not change them: skipping it saves the interpreters three instructions per row
    case SIN: return sinf(a);
    case COS: return cosf(a);
    case TAN: return tanf(a);
    case EXP: v = expf(a); break;
    case LOG: v = fabsf(a) < PROTECT_EPS ? 0.0f : logf(fabsf(a)); break;
    case SQRT: v = sqrtf(fabsf(a)); break;
    case ABS: v = fabsf(a); break;
    case NEG: v = -a; break;
    case INV: v = fabsf(a) < PROTECT_EPS ? 1.0f : 1.0f / a; break;
    case POW: v = powf(fabsf(a), b); break;
    case MAX: v = fmaxf(a, b); break;
    case MIN: v = fminf(a, b); break;
    case TANH: v = tanhf(a); break;
    case SIGMOID: v = 1.0f / (1.0f + expf(-a)); break;
    case LT: v = a < b ? 1.0f : -1.0f; break;
    case GT: v = a > b ? 1.0f : -1.0f; break;
    case IF: v = a > 0.0f ? b : c; break;
    default: v = 0.0f; break;
  }
  return clampv(v);
}

// ---- Philox4x32-10: counter-based random numbers, identical on CPU and GPU ----
struct Philox {
  uint32_t key0, key1, ctr0, ctr1, ctr2, ctr3;
  uint32_t out[4];
  int used;

  GPRL_HD Philox(uint64_t seed, uint64_t stream)
      : key0(uint32_t(seed)), key1(uint32_t(seed >> 32)), ctr0(0), ctr1(0),
        ctr2(uint32_t(stream)), ctr3(uint32_t(stream >> 32)), used(4) {}

  GPRL_HD static uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
    uint64_t p = uint64_t(a) * uint64_t(b);
    *hi = uint32_t(p >> 32);
    return uint32_t(p);
  }

  GPRL_HD void refill() {
    uint32_t c0 = ctr0, c1 = ctr1, c2 = ctr2, c3 = ctr3, k0 = key0, k1 = key1;
    for (int r = 0; r < 10; ++r) {
      uint32_t hi0, hi1;
      uint32_t lo0 = mulhilo(0xD2511F53u, c0, &hi0);
      uint32_t lo1 = mulhilo(0xCD9E8D57u, c2, &hi1);
      c0 = hi1 ^ c1 ^ k0; c1 = lo1; c2 = hi0 ^ c3 ^ k1; c3 = lo0;
      k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
    used = 0;
    if (++ctr0 == 0) ++ctr1;
  }

  GPRL_HD uint32_t next_u32() {
    if (used == 4) refill();
    return out[used++];
  }
  // Uniform in [0, 1): 24 random bits, exact in float32.
  GPRL_HD float uniform() { return float(next_u32() >> 8) * (1.0f / 16777216.0f); }
  // Uniform integer in [0, n).
  GPRL_HD int below(int n) { return int((uint64_t(next_u32()) * uint64_t(n)) >> 32); }
  // Standard normal (Box-Muller), for constant mutation.
  GPRL_HD float normal() {
    float u1 = fmaxf(uniform(), 1e-7f), u2 = uniform();
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
  }
};

}  // namespace gprl
