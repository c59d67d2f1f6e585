// sin, cos and tan over rows for the CPU evaluator (eval_cpu.cpp). Why not nodes.h's sinf/cosf/tanf: those
// are scalar libm calls, which the compiler cannot vectorise, and they took ~75% of the CPU evaluation time
// of trig-heavy trees. The functions here are plain branch-free arithmetic that the row loops vectorise.
// They compute the same mathematical function to within 0.504 ulp of the exact value (argument reduction and
// polynomials in double, one rounding to float at the end: correctly rounded but for ~4 in 10^4 arguments;
// tests/core/test_eval.py checks <= 1 ulp; glibc's tanf reaches 1.4 ulp), and rows outside the fast range
// (|x| > TRIG_FAST_MAX, inf, NaN) go through nodes.h's apply() itself, which does not clamp these finite
// results either. CUDA keeps its own sinf/cosf/tanf via apply().
#pragma once
#include <cstdint>
#include <cstring>

#include "nodes.h"

// Always inlined: eval_cpu.cpp compiles its callers once per x86-64 level, and a call to an out-of-line copy
// would run the baseline (SSE2) code on every CPU; an outlined helper also stops the row loop vectorising.
#if defined(__GNUC__)
#define GPRL_ROW_INLINE inline __attribute__((always_inline))
#else
#define GPRL_ROW_INLINE inline
#endif

namespace gprl {
namespace cpu_trig {

// Up to 2^20 the reduction below is exact up to ~2^-68 absolute: k * PIO2_HI is exact (|k| < 2^20, 31-bit
// constant), x - k * PIO2_HI is exact (both are multiples of 2^-30 when k != 0 and the difference is below 1),
// and only k * PIO2_LO rounds. Relative to r that stays negligible even for the floats nearest to multiples
// of pi/2 (measured there: <= 0.5004 ulp). Beyond 2^20 libm's full reduction takes over.
constexpr float TRIG_FAST_MAX = 1048576.0f;  // 2^20

constexpr double INV_PIO2 = 0x1.45f306dc9c883p-1;  // 2 / pi
constexpr double PIO2_HI = 0x1.921fb544p+0;        // pi / 2 to 31 significant bits
constexpr double PIO2_LO = 0x1.0b4611a626331p-34;  // pi / 2 - PIO2_HI
constexpr double SHIFT = 0x1.8p52;                 // adding and subtracting it rounds to an integer

// Polynomials for |r| <= pi / 4 (+0.05%), fitted at Chebyshev nodes in r^2 (near-minimax): relative error
// 1.9e-11 for sin (degree 9) and 2.7e-10 for cos (degree 8), i.e. below 0.003 float ulp.
constexpr double S1 = -0x1.555555545d0c6p-3, S2 = 0x1.11110decc436cp-7, S3 = -0x1.a013a451a4c53p-13,
                 S4 = 0x1.6dbcf9fa6e607p-19;
constexpr double C1 = -0x1.fffffffaac65fp-2, C2 = 0x1.55554cb4a40ccp-5, C3 = -0x1.6c0e0406b5cc7p-10,
                 C4 = 0x1.9a6db8d6d5b16p-16;

GPRL_ROW_INLINE uint64_t bits(double v) { uint64_t b; std::memcpy(&b, &v, 8); return b; }
GPRL_ROW_INLINE double from_bits(uint64_t b) { double v; std::memcpy(&v, &b, 8); return v; }

// sin(r), cos(r) of the reduced argument and the quadrant k mod 4 (in the low bits of q) of x = k pi/2 + r.
// Everything stays in 64-bit lanes (the quadrant comes from the bits of the rounding sum, not from an int
// conversion), so the loops vectorise even on plain SSE2.
struct Reduced {
  double s, c;
  uint64_t q;
};

GPRL_ROW_INLINE Reduced reduce(float xf) {
  double x = xf;
  double t = x * INV_PIO2 + SHIFT;  // round to nearest: k sits in the low mantissa bits of t
  double k = t - SHIFT;             // +0 (never -0) for small x: r = x keeps the sign of x = -0
  double r = (x - k * PIO2_HI) - k * PIO2_LO;
  double u = r * r;
  Reduced out;
  out.s = r + r * u * (S1 + u * (S2 + u * (S3 + u * S4)));
  out.c = 1.0 + u * (C1 + u * (C2 + u * (C3 + u * C4)));
  out.q = bits(t);
  return out;
}

// a if the bit is 0, else b; and a with its sign flipped if the bit is set (bit: 0 or 1).
GPRL_ROW_INLINE double pick(uint64_t bit, double a, double b) {
  uint64_t m = uint64_t(0) - bit;
  return from_bits((bits(a) & ~m) | (bits(b) & m));
}
GPRL_ROW_INLINE double flip(uint64_t bit, double a) { return from_bits(bits(a) ^ (bit << 63)); }

// x in [-TRIG_FAST_MAX, TRIG_FAST_MAX]
GPRL_ROW_INLINE float sin_fast(float x) {
  Reduced v = reduce(x);  // sin(k pi/2 + r) = s, c, -s, -c for k mod 4 = 0..3
  return float(flip((v.q >> 1) & 1, pick(v.q & 1, v.s, v.c)));
}
GPRL_ROW_INLINE float cos_fast(float x) {
  Reduced v = reduce(x);  // cos(k pi/2 + r) = c, -s, -c, s
  return float(flip(((v.q + 1) >> 1) & 1, pick(v.q & 1, v.c, v.s)));
}
GPRL_ROW_INLINE float tan_fast(float x) {
  Reduced v = reduce(x);  // tan(k pi/2 + r) = s / c for even k, -c / s for odd k
  uint64_t odd = v.q & 1;
  return float(pick(odd, v.s, v.c) / flip(odd, pick(odd, v.c, v.s)));
}

template <int F>
GPRL_ROW_INLINE float trig_fast(float x) {
  static_assert(F == SIN || F == COS || F == TAN, "sin, cos or tan");
  return F == SIN ? sin_fast(x) : F == COS ? cos_fast(x) : tan_fast(x);
}

// dst[r] = apply(F, a[r], ...) for r < n <= chunk; dst may alias a. The fast rows are computed into `tmp`
// (n floats) first, so the few rows outside the fast range can still read their argument afterwards.
template <int F>
GPRL_ROW_INLINE void trig_rows(int n, const float* a, float* dst, float* tmp) {
  int slow = 0;
  for (int r = 0; r < n; ++r) {
    float x = a[r];
    slow |= !(std::fabs(x) <= TRIG_FAST_MAX);  // true for NaN
    tmp[r] = trig_fast<F>(x);                  // garbage (no UB) outside the fast range: replaced below
  }
  if (!slow) {
    for (int r = 0; r < n; ++r) dst[r] = tmp[r];
    return;
  }
  for (int r = 0; r < n; ++r) {
    float x = a[r];
    dst[r] = std::fabs(x) <= TRIG_FAST_MAX ? tmp[r] : apply(F, x, x, x);
  }
}

}  // namespace cpu_trig
}  // namespace gprl
