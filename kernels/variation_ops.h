// Argument checks and helpers shared by the CPU (variation.cpp) and CUDA (variation_cuda.cu) variation ops.
#pragma once
#include "ops.h"
#include "variation.h"

namespace gprl {

// Shared by the CPU and CUDA implementations: argument checks and the parameter block.
inline VaryParams vary_params(int64_t max_len, int64_t n_in, int64_t n_out, int64_t max_depth,
                              int64_t subtree_depth, double xo_leaf_prob, double multi_prob, double const_sigma,
                              double const_prob, double const_low, double const_high, double output_prob,
                              double leaf_prob, int64_t seed) {
  TORCH_CHECK(max_depth >= 0 && max_depth <= MAX_GEN_DEPTH, "gprl: max_depth must be in 0..",
              std::to_string(MAX_GEN_DEPTH));
  TORCH_CHECK(subtree_depth >= 0 && subtree_depth <= MAX_GEN_DEPTH, "gprl: subtree_depth must be in 0..",
              std::to_string(MAX_GEN_DEPTH));
  return VaryParams{int(max_len), int(n_in), int(n_out), int(max_depth), int(subtree_depth), float(xo_leaf_prob),
                    float(multi_prob), float(const_sigma), float(const_prob), float(const_low), float(const_high),
                    float(output_prob), float(leaf_prob), uint64_t(seed)};
}

inline void check_vary_args(const at::Tensor& kind, const at::Tensor& dkind, const at::Tensor& parent,
                            const at::Tensor& donor, const at::Tensor& op, const at::Tensor& node,
                            const at::Tensor& dnode, const at::Tensor& weights) {
  int64_t N = parent.numel();
  for (const at::Tensor* t : {&parent, &donor, &op, &node, &dnode}) {
    TORCH_CHECK(t->dim() == 1 && t->numel() == N, "gprl: parent/donor/op/node/donor_node must be [N]");
    TORCH_CHECK(t->device() == kind.device(), "gprl: index tensors must be on the population's device");
  }
  TORCH_CHECK(parent.scalar_type() == at::kLong && donor.scalar_type() == at::kLong,
              "gprl: parent/donor must be int64");
  TORCH_CHECK(op.scalar_type() == at::kInt && node.scalar_type() == at::kInt && dnode.scalar_type() == at::kInt,
              "gprl: op/node/donor_node must be int32");
  TORCH_CHECK(weights.numel() == NUM_FUNCTIONS && weights.scalar_type() == at::kFloat &&
              weights.device() == kind.device(), "gprl: function weights must be float32 [",
              std::to_string(NUM_FUNCTIONS), "] on the population's device");
  TORCH_CHECK(kind.size(0) > 0 || N == 0, "gprl: children need at least one parent");
  TORCH_CHECK(dkind.device() == kind.device(), "gprl: donors must be on the population's device");
}

inline Pop5 empty_children(const at::Tensor& kind, int64_t N) { return empty_population(kind.options(), N, kind.size(1)); }

}  // namespace gprl
