// Op schemas of the structure and evaluation ops (the gprl namespace). Every backend's implementations
// register themselves beside their code (TORCH_LIBRARY_IMPL in structure_*, eval_*); the variation and
// generation ops define their schemas as fragments there too (variation.cpp, generation.cpp).
#include "ops.h"

TORCH_LIBRARY(gprl, m) {
  m.def("generate(Tensor func_weights, int pop_size, int max_len, int n_in, int n_out, int method, "
        "int min_depth, int max_depth, float leaf_prob, float const_prob, float const_low, float const_high, "
        "float output_prob, int seed) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def("node_depth(Tensor size) -> Tensor");
  // Per-tree error code (0 = valid; see TreeError in trees.h)
  m.def("validate(Tensor kind, Tensor code, Tensor out, Tensor value, Tensor size, int n_in, "
        "int n_out) -> Tensor");
  // `strategy` of forward and fitness: which CUDA kernel and rows per thread evaluate (strategy.h; -1 = the
  // built-in heuristic). The CPU kernels check it and ignore it.
  // Xt: column-major inputs [n_in, D] shared by every tree -> [P, D, n_out]
  m.def("forward(Tensor kind, Tensor code, Tensor out, Tensor value, Tensor size, Tensor Xt, int n_out, "
        "int max_stack, int strategy=-1) -> Tensor");
  // X: [P, B, n_in], tree i reads only X[i] -> [P, B, n_out]
  m.def("forward_batched(Tensor kind, Tensor code, Tensor out, Tensor value, Tensor size, Tensor X, "
        "int n_out, int max_stack) -> Tensor");
  // Fused loss of Xt [n_in, D] against yt [n_out, D] (column-major; optional row weights [D]) -> [P];
  // metric: 0 MSE, 1 MAE, 2 RMSE, 3 and 4 MSE and RMSE after each output's linear scaling (ops.h)
  m.def("fitness(Tensor kind, Tensor code, Tensor out, Tensor value, Tensor size, Tensor Xt, Tensor yt, "
        "Tensor? weight, int metric, int max_stack, int strategy=-1) -> Tensor");
}
