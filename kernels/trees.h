// Per-tree structure algorithms run by one CPU thread or one CUDA thread per tree: random generation
// and node depths. One definition serves both backends, so the same seed gives the same trees on both.
#pragma once
#include "nodes.h"

namespace gprl {

constexpr int MAX_GEN_DEPTH = 64;  // ancestor stack of the generator; deeper trees come from variation only

enum GenMethod : int { GROW = 0, FULL = 1, RAMPED = 2 };

struct GenParams {
  int max_len, n_in, n_out, method, min_depth, max_depth;
  float leaf_prob, const_prob, const_low, const_high, output_prob;
  uint64_t seed;
};

// Draws a function id, by weight, among those whose children fit: `budget` is the number of nodes still
// free beyond one per open slot. Returns -1 when no allowed function has weight.
GPRL_HD int draw_function(Philox& rng, const float* weights, int budget) {
  float total = 0.f;
  for (int f = 0; f < NUM_FUNCTIONS; ++f)
    if (arity(f) <= budget) total += weights[f];
  if (!(total > 0.f)) return -1;
  float u = rng.uniform() * total, acc = 0.f;
  int last = -1;
  for (int f = 0; f < NUM_FUNCTIONS; ++f) {
    if (arity(f) > budget || !(weights[f] > 0.f)) continue;
    acc += weights[f];
    last = f;
    if (u < acc) return f;
  }
  return last;  // u rounded up to total
}

// Writes tree `t` (prefix order) into row pointers of length max_len, zero-padded unless `pad` is false
// (subtree mutation grows in place and overwrites the rest of its budget itself).
GPRL_HD void generate_tree(int64_t t, const GenParams& g, const float* weights, uint8_t* kind, int16_t* code,
                           uint8_t* out, float* value, int16_t* size, bool pad = true) {
  Philox rng(g.seed, uint64_t(t));
  int method = g.method, max_depth = g.max_depth;
  if (method == RAMPED) {  // depths cycle min..max, alternating full and grow at each depth
    int span = g.max_depth - g.min_depth + 1;
    method = (t & 1) ? GROW : FULL;
    max_depth = g.min_depth + int((t >> 1) % span);
  }
  int anc_index[MAX_GEN_DEPTH + 1], anc_left[MAX_GEN_DEPTH + 1];
  int h = 0, pending = 1, i = 0;
  while (pending > 0) {
    int depth = h, budget = g.max_len - i - pending;
    bool want_function = depth < max_depth &&
        (method == FULL || depth < g.min_depth || rng.uniform() >= g.leaf_prob);
    int fn = want_function ? draw_function(rng, weights, budget) : -1;
    code[i] = 0; out[i] = 0; value[i] = 0.f;
    if (fn >= 0) {
      int ar = arity(fn);
      kind[i] = FUNC;
      code[i] = int16_t(fn);
      if (g.n_out > 1 && rng.uniform() < g.output_prob) {
        kind[i] |= OUTPUT_FLAG;
        out[i] = uint8_t(rng.below(g.n_out));
      }
      anc_index[h] = i; anc_left[h] = ar; ++h;
      pending += ar - 1;
      ++i;
      continue;
    }
    if (g.n_in == 0 || rng.uniform() < g.const_prob) {
      kind[i] = CONST;
      value[i] = g.const_low + (g.const_high - g.const_low) * rng.uniform();
    } else {
      kind[i] = VAR;
      code[i] = int16_t(rng.below(g.n_in));
    }
    size[i] = 1;
    --pending;
    ++i;
    // Close every ancestor whose last child this leaf completed.
    while (h > 0 && --anc_left[h - 1] == 0) {
      --h;
      size[anc_index[h]] = int16_t(i - anc_index[h]);
    }
  }
  for (; pad && i < g.max_len; ++i) {
    kind[i] = PAD; code[i] = 0; out[i] = 0; value[i] = 0.f; size[i] = 0;
  }
}

// Depth of every node (root 0, padding -1), from the subtree sizes alone.
GPRL_HD void node_depths(const int16_t* size, int max_len, int16_t* depth, int16_t* scratch_ends) {
  int len = max_len > 0 ? size[0] : 0, h = 0;
  for (int i = 0; i < max_len; ++i) {
    if (i >= len) { depth[i] = -1; continue; }
    while (h > 0 && scratch_ends[h - 1] <= i) --h;  // leave subtrees that ended before i
    depth[i] = int16_t(h);
    scratch_ends[h++] = int16_t(i + size[i]);
  }
}

}  // namespace gprl

namespace gprl {

// Why a tree is invalid; 0 means valid. gprl/core/encoding.py (TREE_ERRORS) turns these into messages.
enum TreeError : int {
  TREE_OK = 0, ERR_LENGTH, ERR_KIND, ERR_STRUCTURE, ERR_SIZE, ERR_FUNCTION, ERR_VARIABLE, ERR_OUTPUT,
  ERR_CONSTANT, ERR_PADDING, ERR_UNUSED_FIELD
};

// Full check of one tree: prefix/arity consistency, subtree sizes, field ranges, finite constants and
// clean padding. `anc_index`/`anc_left` are scratch of max_len ints each.
GPRL_HD int validate_tree(const uint8_t* kind, const int16_t* code, const uint8_t* out, const float* value,
                          const int16_t* size, int max_len, int n_in, int n_out, int* anc_index, int* anc_left) {
  int len = max_len > 0 ? size[0] : 0;
  if (len < 1 || len > max_len) return ERR_LENGTH;
  int h = 0;
  for (int i = 0; i < len; ++i) {
    if (i > 0 && h == 0) return ERR_STRUCTURE;  // the root's subtree ended before `len`
    if (kind[i] & ~(KIND_MASK | OUTPUT_FLAG)) return ERR_KIND;
    int k = kind[i] & KIND_MASK;
    bool modi = kind[i] & OUTPUT_FLAG;
    if (k == PAD) return ERR_STRUCTURE;
    if (modi && k != FUNC) return ERR_KIND;
    if (modi ? out[i] >= n_out : out[i] != 0) return modi ? ERR_OUTPUT : ERR_UNUSED_FIELD;
    if (k != CONST && value[i] != 0.0f) return ERR_UNUSED_FIELD;
    if (k == FUNC) {
      if (code[i] < 0 || code[i] >= NUM_FUNCTIONS) return ERR_FUNCTION;
      anc_index[h] = i; anc_left[h] = arity(code[i]); ++h;
      continue;
    }
    if (k == VAR && (code[i] < 0 || code[i] >= n_in)) return ERR_VARIABLE;
    if (k == CONST && (code[i] != 0)) return ERR_UNUSED_FIELD;
    if (k == CONST && !(fabsf(value[i]) <= VALUE_BOUND)) return ERR_CONSTANT;
    if (size[i] != 1) return ERR_SIZE;
    while (h > 0 && --anc_left[h - 1] == 0) {
      --h;
      if (size[anc_index[h]] != i + 1 - anc_index[h]) return ERR_SIZE;
    }
  }
  if (h != 0) return ERR_STRUCTURE;  // a function node lacks children
  for (int i = len; i < max_len; ++i)
    if (kind[i] || code[i] || out[i] || value[i] != 0.0f || size[i]) return ERR_PADDING;
  return TREE_OK;
}

}  // namespace gprl
