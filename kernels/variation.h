// Per-tree variation operators, shared by the CPU loop (variation.cpp) and the CUDA kernel
// (variation_cuda.cu). Every operator is a subtree exchange on the prefix/size encoding: the child is
// parent-prefix + a middle + parent-suffix, with the ancestors' sizes grown by the middle's change.
//
// One child is written by `nl` cooperating lanes (1 on the CPU, a warp of 32 on CUDA). Every lane runs the
// same decisions from the same Philox(seed, child) stream, so they agree without communicating; bulk copies
// are strided over the lanes, and single-node writes are done by every lane with identical values. A
// lane_sync() separates writes from later reads or overwrites of the same addresses by other lanes.
// The output never aliases the inputs, so the parents are read-only and any lane may read any of them.
#pragma once
#include "trees.h"

namespace gprl {

// Operator codes; gprl/evolve/variation.py mirrors them (OPS).
enum VaryOp : int {
  OP_COPY = 0, OP_EXCHANGE, OP_CROSSOVER, OP_SUBTREE, OP_HOIST, OP_POINT, OP_MULTIPOINT, OP_INSERT, OP_DELETE,
  OP_CONSTANT, OP_MULTICONSTANT, OP_OUTPUT, NUM_VARY_OPS
};

struct TreeRef {
  const uint8_t* kind; const int16_t* code; const uint8_t* out; const float* value; const int16_t* size;
};
struct TreeOut {
  uint8_t* kind; int16_t* code; uint8_t* out; float* value; int16_t* size;
};

struct VaryParams {
  int max_len;        // row length of the parents and the children
  int n_in, n_out;
  int max_depth;      // a child deeper than this is replaced by its parent; 0 = no limit (<= MAX_GEN_DEPTH)
  int subtree_depth;  // depth of the subtrees grown by subtree mutation
  float xo_leaf_prob;  // crossover picks a leaf with this probability, else a function node; < 0: uniform
  float multi_prob;    // per-node probability of multi-point and multi-constant mutation
  float const_sigma;   // standard deviation of the Gaussian constant perturbation
  float const_prob, const_low, const_high;  // new leaves: constant with const_prob, uniform in [low, high)
  float output_prob;   // new function nodes become Modi nodes with this probability (n_out > 1)
  float leaf_prob;     // grow: a leaf with this probability below the depth limit
  uint64_t seed;
};

// Index clamped into [0, n): out-of-range indices never read out of bounds (Python validates them).
GPRL_HD int64_t clamp_index(int64_t i, int64_t n) { return i < 0 ? 0 : (i >= n ? n - 1 : i); }

GPRL_HD void lane_sync() {
#if defined(__CUDA_ARCH__)
  __syncwarp();
#endif
}

// The scans over a tree (counting node classes, finding the m-th one, depths) are where a child's time went
// when every lane walked them alone (latency-bound chains of loads). With a whole warp on a child (nl == 32)
// the lanes split them and combine with ballots and shuffles; every lane gets the same answer, so the
// decisions stay identical to the CPU's sequential loops.
constexpr int WARP_LANES = 32;
#if defined(__CUDA_ARCH__)
#define GPRL_WARP_COOP(nl) ((nl) == WARP_LANES)
__device__ __forceinline__ unsigned warp_ballot(bool x) { return __ballot_sync(0xffffffffu, x); }
#endif

// ---- node classes and node picking ----
enum NodeClass : int { ANY_NODE = 0, FUNC_NODE, LEAF_NODE, CONST_NODE };

GPRL_HD bool in_class(uint8_t kind, int cls) {
  int k = kind & KIND_MASK;
  switch (cls) {
    case FUNC_NODE: return k == FUNC;
    case LEAF_NODE: return k == VAR || k == CONST;
    case CONST_NODE: return k == CONST;
    default: return true;
  }
}

GPRL_HD int count_class(const TreeRef& a, int len, int cls, int lane, int nl) {
  if (cls == ANY_NODE) return len;
#if defined(__CUDA_ARCH__)
  if (GPRL_WARP_COOP(nl)) {
    int n = 0;
    for (int base = 0; base < len; base += WARP_LANES)
      n += __popc(warp_ballot(base + lane < len && in_class(a.kind[base + lane], cls)));
    return n;
  }
#endif
  int n = 0;
  for (int i = 0; i < len; ++i) n += in_class(a.kind[i], cls);
  return n;
}

// Index of the m-th node (0-based) of class `cls`.
GPRL_HD int nth_of_class(const TreeRef& a, int len, int cls, int m, int lane, int nl) {
  if (cls == ANY_NODE) return m;
#if defined(__CUDA_ARCH__)
  if (GPRL_WARP_COOP(nl)) {
    for (int base = 0; base < len; base += WARP_LANES) {
      unsigned hits = warp_ballot(base + lane < len && in_class(a.kind[base + lane], cls));
      const int c = __popc(hits);
      if (m < c) {
        for (; m > 0; --m) hits &= hits - 1;  // drop the m lowest hits
        return base + __ffs(hits) - 1;
      }
      m -= c;
    }
    return len - 1;
  }
#endif
  for (int i = 0; i < len; ++i)
    if (in_class(a.kind[i], cls) && m-- == 0) return i;
  return len - 1;  // unreachable when m < count_class
}

// A uniformly drawn node of class `cls`, or -1 if the tree has none.
GPRL_HD int pick_of_class(Philox& rng, const TreeRef& a, int len, int cls, int lane, int nl) {
  int n = count_class(a, len, cls, lane, nl);
  return n > 0 ? nth_of_class(a, len, cls, rng.below(n), lane, nl) : -1;
}

// Crossover point: uniform over all nodes (leaf_prob < 0), else a leaf with probability leaf_prob and a
// function node otherwise (Koza's 90/10 rule is leaf_prob = 0.1); falls back to a leaf without functions.
GPRL_HD int pick_crossover_node(Philox& rng, const TreeRef& a, int len, float leaf_prob, int lane, int nl) {
  if (leaf_prob < 0.f) return rng.below(len);
  int nf = count_class(a, len, FUNC_NODE, lane, nl);
  bool leaf = nf == 0 || rng.uniform() < leaf_prob;
  return leaf ? nth_of_class(a, len, LEAF_NODE, rng.below(len - nf), lane, nl)
              : nth_of_class(a, len, FUNC_NODE, rng.below(nf), lane, nl);
}

// Depth of node k: the number of its ancestors (nodes i < k whose subtree covers k).
GPRL_HD int depth_of(const int16_t* size, int k, int lane, int nl) {
#if defined(__CUDA_ARCH__)
  if (GPRL_WARP_COOP(nl)) {
    int d = 0;
    for (int base = 0; base < k; base += WARP_LANES) {
      const int i = base + lane;
      d += __popc(warp_ballot(i < k && i + size[i] > k));
    }
    return d;
  }
#endif
  int d = 0;
  for (int i = 0; i < k; ++i) d += i + size[i] > k;
  return d;
}

// Whether the tree (of at most max_len nodes) has a node deeper than `limit` (<= MAX_GEN_DEPTH).
// A warp uses depth(i) = i - #{m : m + size[m] <= i} (the nodes before i whose subtree closed by i): a
// histogram of subtree ends in `hist` (max_len + 1 ints of shared memory) and one scan, instead of the
// sequential stack walk below, which stops at the first node that is too deep.
GPRL_HD bool depth_exceeds(const int16_t* size, int limit, int max_len, int lane, int nl, int* hist) {
#if defined(__CUDA_ARCH__)
  if (GPRL_WARP_COOP(nl)) {
    const int len = min(max(int(size[0]), 0), max_len);
    for (int e = lane; e <= len; e += WARP_LANES) hist[e] = 0;
    __syncwarp();
    for (int m = lane; m < len; m += WARP_LANES) atomicAdd(&hist[min(max(m + size[m], 0), len)], 1);
    __syncwarp();
    // each lane scans a contiguous chunk; an exclusive scan of the chunk sums gives its starting count
    const int chunk = (len + WARP_LANES - 1) / WARP_LANES, lo = min(lane * chunk, len), hi = min(lo + chunk, len);
    int sum = 0;
    for (int e = lo; e < hi; ++e) sum += hist[e];
    int before = sum;
    for (int off = 1; off < WARP_LANES; off <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, before, off);
      if (lane >= off) before += v;
    }
    int closed = before - sum, deepest = 0;
    for (int i = lo; i < hi; ++i) {
      closed += hist[i];
      deepest = max(deepest, i - closed);
    }
    for (int off = WARP_LANES / 2; off > 0; off >>= 1) deepest = max(deepest, __shfl_xor_sync(0xffffffffu, deepest, off));
    __syncwarp();  // hist is free again
    return deepest > limit;
  }
#endif
  int16_t ends[MAX_GEN_DEPTH + 2];
  int len = size[0], h = 0;
  for (int i = 0; i < len; ++i) {
    while (h > 0 && ends[h - 1] <= i) --h;
    if (h > limit) return true;
    ends[h++] = int16_t(i + size[i]);
  }
  return false;
}

// ---- writing a child ----
GPRL_HD void put_node(const TreeOut& d, int i, uint8_t kind, int16_t code, uint8_t out, float value, int16_t size) {
  d.kind[i] = kind; d.code[i] = code; d.out[i] = out; d.value[i] = value; d.size[i] = size;
}

// Copies nodes [from, from + n) of `s` to [at, at + n) of `d`, sizes unchanged.
GPRL_HD void copy_range(const TreeOut& d, int at, const TreeRef& s, int from, int n, int lane, int nl) {
  for (int i = lane; i < n; i += nl)
    put_node(d, at + i, s.kind[from + i], s.code[from + i], s.out[from + i], s.value[from + i], s.size[from + i]);
}

// Zeroes p[from, to). A warp writes 16 bytes a lane between a scalar head and tail: padding is most of a
// child's bytes (max_len >> mean length), and one byte a lane left the stores far from the bandwidth.
template <typename T>
GPRL_HD void zero_fill(T* p, int from, int to, int lane, int nl) {
#if defined(__CUDA_ARCH__)
  if (GPRL_WARP_COOP(nl) && from < to) {
    constexpr int per = 16 / sizeof(T);
    const int head = int((16 - (reinterpret_cast<uintptr_t>(p + from) & 15)) & 15) / int(sizeof(T));
    const int a = min(from + head, to), nvec = (to - a) / per;
    for (int i = from + lane; i < a; i += nl) p[i] = T(0);
    uint4* v = reinterpret_cast<uint4*>(p + a);
    for (int i = lane; i < nvec; i += nl) v[i] = make_uint4(0u, 0u, 0u, 0u);
    for (int i = a + nvec * per + lane; i < to; i += nl) p[i] = T(0);
    return;
  }
#endif
  for (int i = from + lane; i < to; i += nl) p[i] = T(0);
}

GPRL_HD void zero_range(const TreeOut& d, int from, int to, int lane, int nl) {
  static_assert(PAD == 0, "padding is all-zero bytes");
  zero_fill(d.kind, from, to, lane, nl);
  zero_fill(d.code, from, to, lane, nl);
  zero_fill(d.out, from, to, lane, nl);
  zero_fill(d.value, from, to, lane, nl);
  zero_fill(d.size, from, to, lane, nl);
}

GPRL_HD void copy_tree(const TreeOut& d, const TreeRef& s, int L, int lane, int nl) {
  int len = s.size[0];
  copy_range(d, 0, s, 0, len, lane, nl);
  zero_range(d, len, L, lane, nl);
}

// Writes `s` with its subtree [k, k + old) replaced by a middle of `mid` nodes, except the middle itself
// (the caller writes it at [k, k + mid)): the prefix with its ancestors' sizes adjusted, the shifted
// suffix and the zero padding. The caller has checked len - old + mid <= L.
GPRL_HD void splice_frame(const TreeOut& d, const TreeRef& s, int len, int k, int old, int mid, int L, int lane,
                          int nl) {
  int delta = mid - old;
  for (int i = lane; i < k; i += nl) {
    int sz = s.size[i];
    put_node(d, i, s.kind[i], s.code[i], s.out[i], s.value[i], int16_t(i + sz > k ? sz + delta : sz));
  }
  copy_range(d, k + mid, s, k + old, len - k - old, lane, nl);
  zero_range(d, len + delta, L, lane, nl);
}

// A new leaf: a constant with probability const_prob (always without variables), else a variable.
GPRL_HD void put_random_leaf(Philox& rng, const VaryParams& p, const TreeOut& d, int i) {
  if (p.n_in == 0 || rng.uniform() < p.const_prob)
    put_node(d, i, CONST, 0, 0, p.const_low + (p.const_high - p.const_low) * rng.uniform(), 1);
  else
    put_node(d, i, VAR, int16_t(rng.below(p.n_in)), 0, 0.f, 1);
}

// Point change of node i of `a`, written to d[i]: a function becomes another allowed function of the same
// arity (weighted), a variable another variable, a constant a new uniform constant; the Modi flag, output
// index and size stay. Nodes without an alternative stay as they are (already copied).
GPRL_HD void point_change(Philox& rng, const TreeRef& a, int i, const float* w, const VaryParams& p,
                          const TreeOut& d) {
  int k = a.kind[i] & KIND_MASK;
  if (k == FUNC) {
    int cur = a.code[i], ar = arity(cur);
    float total = 0.f;
    for (int f = 0; f < NUM_FUNCTIONS; ++f)
      if (f != cur && arity(f) == ar && w[f] > 0.f) total += w[f];
    if (!(total > 0.f)) return;
    float u = rng.uniform() * total, acc = 0.f;
    int pick = -1;
    for (int f = 0; f < NUM_FUNCTIONS && pick < 0; ++f) {
      if (f == cur || arity(f) != ar || !(w[f] > 0.f)) continue;
      acc += w[f];
      if (u < acc) pick = f;
    }
    if (pick < 0)  // u rounded up to total: the last candidate
      for (int f = NUM_FUNCTIONS - 1; f >= 0 && pick < 0; --f)
        if (f != cur && arity(f) == ar && w[f] > 0.f) pick = f;
    d.code[i] = int16_t(pick);
  } else if (k == VAR) {
    if (p.n_in < 2) return;
    int v = rng.below(p.n_in - 1);
    d.code[i] = int16_t(v >= a.code[i] ? v + 1 : v);
  } else if (k == CONST) {
    d.value[i] = p.const_low + (p.const_high - p.const_low) * rng.uniform();
  }
}

// Gaussian perturbation of constant i; a non-finite result keeps the old value.
GPRL_HD void perturb_constant(Philox& rng, const TreeRef& a, int i, const VaryParams& p, const TreeOut& d) {
  float v = a.value[i] + p.const_sigma * rng.normal();
  if (fabsf(v) <= VALUE_BOUND) d.value[i] = v;
}

// Writes child `t` of parent `a` (and donor `b` for exchange/crossover) into `d`. `node`/`dnode` are the
// exchange points of OP_EXCHANGE. A child that would exceed max_len or max_depth is a copy of `a`.
// `hist` is the depth check's scratch on CUDA (max_len + 1 ints a warp); unused on the CPU.
GPRL_HD void vary_tree(int64_t t, int op, const TreeRef& a, const TreeRef& b, bool has_donor, int node, int dnode,
                       const float* w, const VaryParams& p, const TreeOut& d, int lane, int nl, int* hist) {
  Philox rng(p.seed, uint64_t(t));
  const int L = p.max_len, len = a.size[0];
  bool done = false, grows = false;
  switch (op) {
    case OP_EXCHANGE:
    case OP_CROSSOVER: {
      if (!has_donor) break;
      int blen = b.size[0], k = node, j = dnode;
      if (op == OP_CROSSOVER) {
        k = pick_crossover_node(rng, a, len, p.xo_leaf_prob, lane, nl);
        j = pick_crossover_node(rng, b, blen, p.xo_leaf_prob, lane, nl);
      }
      if (k < 0 || k >= len || j < 0 || j >= blen) break;
      int old = a.size[k], mid = b.size[j];
      if (len - old + mid > L) break;
      splice_frame(d, a, len, k, old, mid, L, lane, nl);
      copy_range(d, k, b, j, mid, lane, nl);
      done = grows = true;
      break;
    }
    case OP_SUBTREE: {
      int k = rng.below(len), old = a.size[k];
      int depth = p.subtree_depth;
      if (p.max_depth > 0) {
        int room = p.max_depth - depth_of(a.size, k, lane, nl);
        depth = room < depth ? (room < 0 ? 0 : room) : depth;
      }
      // grown in place at k with a budget that leaves room for the suffix, unpadded: the suffix and the
      // padding written below after the sync cover the rest
      GenParams g{L - (len - old), p.n_in, p.n_out, GROW, 0, depth, p.leaf_prob, p.const_prob, p.const_low,
                  p.const_high, p.output_prob, p.seed ^ 0x9E3779B97F4A7C15ull};
      generate_tree(t, g, w, d.kind + k, d.code + k, d.out + k, d.value + k, d.size + k, /*pad=*/false);
      lane_sync();
      splice_frame(d, a, len, k, old, d.size[k], L, lane, nl);
      done = grows = true;
      break;
    }
    case OP_HOIST:
    case OP_DELETE: {
      int k = pick_of_class(rng, a, len, FUNC_NODE, lane, nl);
      if (k < 0) break;
      int old = a.size[k], j = k + 1;
      if (op == OP_HOIST) {
        j = k + 1 + rng.below(old - 1);  // any proper descendant
      } else {
        for (int c = rng.below(arity(a.code[k])); c > 0; --c) j += a.size[j];  // any child
      }
      splice_frame(d, a, len, k, old, a.size[j], L, lane, nl);
      copy_range(d, k, a, j, a.size[j], lane, nl);
      done = true;
      break;
    }
    case OP_INSERT: {
      int f = draw_function(rng, w, L - len);  // arity(f) new nodes must fit
      if (f < 0) break;
      int k = rng.below(len), old = a.size[k], ar = arity(f), pos = rng.below(ar);
      uint8_t kind = FUNC, o = 0;
      if (p.n_out > 1 && rng.uniform() < p.output_prob) {
        kind |= OUTPUT_FLAG;
        o = uint8_t(rng.below(p.n_out));
      }
      put_node(d, k, kind, int16_t(f), o, 0.f, int16_t(old + ar));
      int at = k + 1;
      for (int c = 0; c < ar; ++c) {
        if (c == pos) {
          copy_range(d, at, a, k, old, lane, nl);
          at += old;
        } else {
          put_random_leaf(rng, p, d, at++);
        }
      }
      splice_frame(d, a, len, k, old, old + ar, L, lane, nl);
      done = grows = true;
      break;
    }
    case OP_POINT:
    case OP_MULTIPOINT:
    case OP_CONSTANT:
    case OP_MULTICONSTANT:
    case OP_OUTPUT: {
      copy_tree(d, a, L, lane, nl);
      lane_sync();
      done = true;
      if (op == OP_POINT) {
        point_change(rng, a, rng.below(len), w, p, d);
      } else if (op == OP_MULTIPOINT) {
        for (int i = 0; i < len; ++i)
          if (rng.uniform() < p.multi_prob) point_change(rng, a, i, w, p, d);
      } else if (op == OP_CONSTANT) {
        int k = pick_of_class(rng, a, len, CONST_NODE, lane, nl);
        if (k >= 0) perturb_constant(rng, a, k, p, d);
      } else if (op == OP_MULTICONSTANT) {
        for (int i = 0; i < len; ++i)
          if ((a.kind[i] & KIND_MASK) == CONST && rng.uniform() < p.multi_prob) perturb_constant(rng, a, i, p, d);
      } else {  // OP_OUTPUT: a Modi node is cleared or redirected, a plain function node becomes one
        int k = pick_of_class(rng, a, len, FUNC_NODE, lane, nl);
        if (k < 0 || p.n_out < 2) break;
        if (a.kind[k] & OUTPUT_FLAG) {
          if (rng.uniform() < 0.5f) {
            d.kind[k] = FUNC;
            d.out[k] = 0;
          } else {
            int o = rng.below(p.n_out - 1);
            d.out[k] = uint8_t(o >= a.out[k] ? o + 1 : o);
          }
        } else {
          d.kind[k] = FUNC | OUTPUT_FLAG;
          d.out[k] = uint8_t(rng.below(p.n_out));
        }
      }
      break;
    }
    default: break;
  }
  if (!done) {
    copy_tree(d, a, L, lane, nl);
  } else if (grows && p.max_depth > 0) {
    lane_sync();
    bool deep = depth_exceeds(d.size, p.max_depth, L, lane, nl, hist);
    lane_sync();
    if (deep) copy_tree(d, a, L, lane, nl);
  }
}

}  // namespace gprl
