// Evaluation strategies: which of the CUDA evaluation kernels (eval_cuda.cu, eval_level_cuda.cu) a
// `fitness` / `forward` call launches, and with how many rows per thread. gprl/backend/strategy.py mirrors
// the ids and names and picks one per call with a cost model calibrated on the device; AUTO (-1) is the
// kernels' built-in heuristic. The CPU kernels have two mappings, the shared-subtree graph (6) and the
// interpreter (7, and the CUDA ids); AUTO picks by the population's share of repeated subtrees (eval_cpu.cpp).
//
// Every strategy applies the same node functions to the same operands and sums outputs in the same order, so
// predictions are identical across strategies; fused losses differ only in the (fixed, deterministic) order
// of their double sums.
#pragma once
#include <c10/util/Exception.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace gprl {

enum Strategy : int64_t {
  STRATEGY_AUTO = -1,      // the built-in heuristic
  // 0 is kept free (a future thread-per-tree mapping)
  STRATEGY_WARP = 1,       // fitness only, n_out == 1: one warp per tree over all rows (fitness_warp_kernel)
  STRATEGY_HYBRID_R1 = 2,  // one block per (tree, segment of rows), 1 row per thread (fitness_kernel, forward_kernel)
  STRATEGY_HYBRID_R2 = 3,  //   ... 2 rows per thread
  STRATEGY_HYBRID_R4 = 4,  //   ... 4 rows per thread
  STRATEGY_LEVEL = 5,      // one block per (tree, segment of rows), a depth level at a time (eval_levels)
  STRATEGY_SHARED = 6,       // CPU: each distinct subtree of the population once per row (subtrees.h)
  STRATEGY_INTERPRETER = 7,  // CPU: each tree interpreted over chunks of rows (eval_cpu.cpp)
};

// Rows per thread of a hybrid strategy. Trees whose stack needs more than 256 slots run with 1 row per thread
// whatever the strategy (with_stack in eval_cuda.cu: the local-memory stack of deep trees).
inline int hybrid_rows(int64_t s) { return s == STRATEGY_HYBRID_R4 ? 4 : (s == STRATEGY_HYBRID_R2 ? 2 : 1); }

// Multi-output fitness keeps every thread's R rows x n_out outputs in shared memory, up to this many bytes.
constexpr size_t MULTI_OUTPUT_SMEM_LIMIT = 96 * 1024;

// Checks that `fitness` (else `forward`) supports strategy `s` for `n_out` outputs on the CPU (else a CUDA
// device); the message names the valid ids. Shared by the CPU and CUDA implementations (numbers through
// std::to_string: ops.h says why).
inline void check_strategy(int64_t s, bool fitness, int64_t n_out, bool cpu) {
  if (s == STRATEGY_SHARED || s == STRATEGY_INTERPRETER) {  // every op and output count, on the CPU
    TORCH_CHECK(cpu, "gprl: strategy ", std::to_string(s), " evaluates on the CPU only; valid ids on a CUDA ",
                "device: -1 (auto), 1 (warp, fitness), 2 (hybrid_r1), 3 (hybrid_r2), 4 (hybrid_r4), 5 (level)");
    return;
  }
  if (fitness) {
    TORCH_CHECK(s == STRATEGY_AUTO || (s >= STRATEGY_WARP && s <= STRATEGY_LEVEL), "gprl: strategy ",
                std::to_string(s), " is not a strategy of fitness; valid ids: -1 (auto), 1 (warp), 2 (hybrid_r1), ",
                "3 (hybrid_r2), 4 (hybrid_r4), 5 (level), 6 (shared, CPU), 7 (interpreter, CPU)");
    TORCH_CHECK(s != STRATEGY_WARP || n_out == 1, "gprl: strategy 1 (warp) evaluates single-output trees only, ",
                "got n_out=", std::to_string(n_out), "; valid ids for n_out > 1: -1 (auto), 2 (hybrid_r1), ",
                "3 (hybrid_r2), 4 (hybrid_r4), 5 (level)");
  } else {
    TORCH_CHECK(s == STRATEGY_AUTO || (s >= STRATEGY_HYBRID_R1 && s <= STRATEGY_LEVEL), "gprl: strategy ",
                std::to_string(s), " is not a strategy of forward; valid ids: -1 (auto), 2 (hybrid_r1), ",
                "3 (hybrid_r2), 4 (hybrid_r4), 5 (level), 6 (shared, CPU), 7 (interpreter, CPU)");
  }
}

}  // namespace gprl
