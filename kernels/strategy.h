// Evaluation strategies: how the CUDA evaluation ops map (tree, row) work onto threads, and the launch
// shape ("plan") of each. gprl/strategy.py mirrors the ids and names and picks one per call with a cost
// model calibrated on the device; AUTO (-1) is the built-in heuristic used when Python has no choice.
// The CPU kernels accept every id and ignore it (they have one mapping).
//
// Every strategy runs the same interpreter (eval_cuda.cuh) on every row, so predictions are bit-identical
// across strategies; fused losses differ only in the (fixed, deterministic) order of their double sums.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "nodes.h"

namespace gprl {

enum Strategy : int64_t {
  AUTO = -1,
  THREAD = 0,     // one thread per tree over all its rows, R rows per pass (tiny D, many trees)
  WARP = 1,       // one warp per tree over all its rows, tree staged per warp (small D)
  HYBRID_R1 = 2,  // one block per (tree, segment of blockDim * R rows), tree staged per block; R = 1
  HYBRID_R2 = 3,  //   ... R = 2
  HYBRID_R4 = 4,  //   ... R = 4
  DATA = 5,       // few trees x huge D: 256-thread blocks, R = 4, each block loops over a long segment;
                  // segments are sized so that the grid just fills the GPU (~8 blocks per SM)
  ROW = 6,        // forward_batched only: one thread per (tree, row)
  NUM_STRATEGIES = 7
};

// Which group of threads evaluates one tree over one segment of rows.
enum Team : int { TEAM_BLOCK = 0, TEAM_THREAD = 1, TEAM_WARP = 32 };

inline bool strategy_supported(int64_t s, bool batched) {
  if (s == AUTO) return true;
  return batched ? (s == ROW || s == THREAD || s == WARP) : (s >= THREAD && s <= DATA);
}

// A launch: blocks of `threads` threads; teams of `team` threads (TEAM_BLOCK: the whole block) each take one
// (tree, segment) work item, R = `rows` rows per thread and pass; segment s of a tree covers rows
// [s * seg_rows, (s + 1) * seg_rows). Partial losses go through a second pass only when nseg > 1.
struct Plan {
  int team, rows, threads;
  int64_t nseg, seg_rows, blocks;
  bool x_in_smem;  // stage the whole (shared) input matrix in shared memory once per block
};

// What a plan depends on.
struct EvalShape {
  int64_t P, D;       // trees, rows per tree
  int n_in, n_out, L;  // inputs, outputs, max_len
  bool fitness;       // fused loss (else predictions)
  bool batched;       // each tree reads its own rows (forward_batched)
  int sms;            // streaming multiprocessors of the device
  size_t smem_optin;  // largest dynamic shared memory a block may ask for
};

GPRL_HD size_t align16(size_t bytes) { return (bytes + 15) / 16 * 16; }
GPRL_HD size_t tree_smem_bytes(int L) { return align16(size_t(L) * 8); }  // packed 8-byte nodes

// Dynamic shared memory of an evaluation block, in this order (each part 16-byte aligned):
// reduction scratch (block teams, fitness) | per-thread loss sums of outputs >= 1 (fitness) |
// staged inputs | one staged tree per team (none for thread teams) | per-thread values of outputs >= 1.
// Output 0 lives in registers, so single-output trees need no per-thread buffers.
struct SmemLayout {
  size_t scratch, loss, x, trees, slots, total;
};

GPRL_HD SmemLayout smem_layout(int team, int threads, int rows, int L, int n_out, int64_t x_elems, bool fitness) {
  const int teams = team == TEAM_BLOCK ? 1 : threads / team;
  SmemLayout s;
  size_t o = 0;
  s.scratch = o;
  o += (fitness && team == TEAM_BLOCK) ? align16(32 * sizeof(double)) : 0;
  s.loss = o;
  o += fitness ? align16(size_t(threads) * (n_out - 1) * sizeof(double)) : 0;
  s.x = o;
  o += align16(size_t(x_elems) * sizeof(float));
  s.trees = o;
  o += team == TEAM_THREAD ? 0 : size_t(teams) * tree_smem_bytes(L);
  s.slots = o;
  o += align16(size_t(threads) * rows * (n_out - 1) * sizeof(float));
  s.total = o;
  return s;
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int warp_round(int64_t n) { return int(std::max<int64_t>(32, ceil_div(n, 32) * 32)); }

// The heuristic that AUTO means (the thresholds gprl used before calibration existed).
inline int64_t heuristic_strategy(const EvalShape& s) {
  if (s.batched) return ROW;
  if (s.fitness && s.n_out == 1 && s.D <= 1024 && (s.P >= 2048 || s.D <= 64)) return WARP;
  return s.D >= 8192 ? HYBRID_R4 : (s.D >= 1024 ? HYBRID_R2 : HYBRID_R1);
}

// Rows per thread for mappings that loop over all rows of a tree: no more than there are rows.
inline int loop_rows(int64_t rows_per_thread) { return rows_per_thread >= 4 ? 4 : (rows_per_thread >= 2 ? 2 : 1); }

inline Plan make_plan(int64_t strategy, const EvalShape& s) {
  if (strategy == AUTO) strategy = heuristic_strategy(s);
  Plan p{TEAM_BLOCK, 1, 128, 1, s.D, 0, false};
  const size_t x_bytes = size_t(s.n_in) * s.D * sizeof(float);
  switch (strategy) {
    case ROW:  // consecutive threads take consecutive rows of a tree, then the next tree
      p.team = TEAM_THREAD; p.rows = 1; p.nseg = s.D; p.seg_rows = 1;
      break;
    case THREAD:  // consecutive threads take consecutive trees
      p.team = TEAM_THREAD; p.rows = loop_rows(s.D);
      p.x_in_smem = !s.batched && x_bytes <= 16 * 1024;  // every thread of the block reads every row
      break;
    case WARP:
      p.team = TEAM_WARP; p.rows = s.D <= 32 ? 1 : (s.D <= 64 ? 2 : 4);
      // Few blocks: stage the data once per block (a first touch of a row is a long global load on the
      // critical path). Many blocks: restaging costs more than the L1 that a block's warps share saves.
      p.x_in_smem = !s.batched && x_bytes <= 32 * 1024 && s.P <= 1024;
      break;
    case DATA:
      p.rows = 4; p.threads = 256;
      break;
    default:  // HYBRID_R*
      p.rows = strategy == HYBRID_R4 ? 4 : (strategy == HYBRID_R2 ? 2 : 1);
      p.threads = std::min(128, warp_round(ceil_div(s.D, p.rows)));
  }
  // Values of outputs >= 1 (and their loss sums) take per-thread shared memory: at most ~100 KB of it,
  // halving rows per thread, then threads per block, until they fit.
  const size_t fixed = smem_layout(p.team, p.threads, 0, s.L, 1, p.x_in_smem ? int64_t(s.n_in) * s.D : 0,
                                   s.fitness).total;
  auto fits = [&] {
    const size_t total = smem_layout(p.team, p.threads, p.rows, s.L, s.n_out,
                                     p.x_in_smem ? int64_t(s.n_in) * s.D : 0, s.fitness).total;
    return total - fixed <= 100 * 1024 && total <= s.smem_optin;
  };
  while (!fits() && (p.rows > 1 || p.threads > 32)) {
    if (p.rows > 1) p.rows /= 2;
    else p.threads /= 2;
  }
  const int64_t trees_per_block = p.team == TEAM_BLOCK ? 1 : p.threads / p.team;
  if (p.team == TEAM_BLOCK) {
    if (strategy == DATA) {
      // Enough segments per tree to give ~8 blocks per SM; long segments amortise the tree staging.
      const int64_t chunk = int64_t(p.threads) * p.rows;
      const int64_t want = std::max<int64_t>(1, ceil_div(int64_t(8) * s.sms, s.P));
      const int64_t nseg = std::min(want, ceil_div(s.D, chunk));
      p.seg_rows = ceil_div(ceil_div(s.D, nseg), chunk) * chunk;
    } else {
      p.seg_rows = int64_t(p.threads) * p.rows;
    }
    p.nseg = ceil_div(s.D, p.seg_rows);
  }
  p.blocks = ceil_div(s.P * p.nseg, trees_per_block);
  return p;
}

}  // namespace gprl
