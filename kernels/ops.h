// Declarations shared by the op implementations: argument checks and the loss metrics.
// Python validates user input first (gprl/core/population.py); these checks guard direct torch.ops calls.
//
// Numbers in error messages go through std::to_string, never through an ostream (TORCH_CHECK streams its
// arguments): a toolchain that links its own static libstdc++ into the extension (e.g. a compiler wrapper
// under /opt/gcc) has an uninitialised locale there, and streaming a number crashes in num_put.
// Messages made of strings only are safe.
#pragma once
#include <ATen/ATen.h>
#include <torch/library.h>

#include "trees.h"

namespace gprl {

enum Metric : int64_t { MSE = 0, MAE = 1, RMSE = 2 };

inline void check_population(const at::Tensor& kind, const at::Tensor& code, const at::Tensor& out,
                             const at::Tensor& value, const at::Tensor& size) {
  TORCH_CHECK(kind.dim() == 2, "gprl: kind must be [P, max_len]");
  TORCH_CHECK(kind.scalar_type() == at::kByte && out.scalar_type() == at::kByte, "gprl: kind/out must be uint8");
  TORCH_CHECK(code.scalar_type() == at::kShort && size.scalar_type() == at::kShort, "gprl: code/size must be int16");
  TORCH_CHECK(value.scalar_type() == at::kFloat, "gprl: value must be float32");
  for (const at::Tensor* t : {&code, &out, &value, &size}) {
    TORCH_CHECK(t->sizes() == kind.sizes(), "gprl: population tensors must share one shape");
    TORCH_CHECK(t->device() == kind.device(), "gprl: population tensors must share one device");
  }
  TORCH_CHECK(kind.is_contiguous() && code.is_contiguous() && out.is_contiguous() && value.is_contiguous() &&
              size.is_contiguous(), "gprl: population tensors must be contiguous");
}

inline void check_data(const at::Tensor& t, const at::Tensor& like, const char* name) {
  TORCH_CHECK(t.scalar_type() == at::kFloat, "gprl: ", name, " must be float32");
  TORCH_CHECK(t.device() == like.device(), "gprl: ", name, " must be on the population's device");
}

// Element offsets into the inputs are 32-bit inside the CUDA kernels.
inline void check_input_size(const at::Tensor& Xt) {
  TORCH_CHECK(Xt.numel() < (int64_t(1) << 31), "gprl: at most 2^31 - 1 input values per call (got ",
              std::to_string(Xt.size(0)), " inputs x ", std::to_string(Xt.size(1)),
              " rows); split the rows into chunks");
}

// The arguments of `fitness`, checked; returns the row weights (undefined when none were given).
inline at::Tensor check_fitness_args(const at::Tensor& kind, const at::Tensor& code, const at::Tensor& out,
                                     const at::Tensor& value, const at::Tensor& size, const at::Tensor& Xt,
                                     const at::Tensor& yt, const std::optional<at::Tensor>& weight, int64_t metric) {
  check_population(kind, code, out, value, size);
  check_data(Xt, kind, "Xt");
  check_data(yt, kind, "yt");
  TORCH_CHECK(Xt.dim() == 2 && yt.dim() == 2 && yt.size(1) == Xt.size(1), "gprl: Xt must be [n_in, D], yt [n_out, D]");
  TORCH_CHECK(metric >= MSE && metric <= RMSE, "gprl: metric must be 0 (MSE), 1 (MAE) or 2 (RMSE)");
  if (!weight.has_value()) return at::Tensor();
  check_data(*weight, kind, "weight");
  TORCH_CHECK(weight->numel() == Xt.size(1), "gprl: weight must be [D]");
  return weight->contiguous();
}

// The arguments of `generate`, checked and packed for the per-tree generator.
inline GenParams generate_params(const at::Tensor& weights, int64_t max_len, int64_t n_in, int64_t n_out,
                                 int64_t method, int64_t min_depth, int64_t max_depth, double leaf_prob,
                                 double const_prob, double const_low, double const_high, double output_prob,
                                 int64_t seed) {
  TORCH_CHECK(weights.numel() == NUM_FUNCTIONS && weights.scalar_type() == at::kFloat,
              "gprl: function weights must be float32 [", std::to_string(NUM_FUNCTIONS), "]");
  TORCH_CHECK(max_depth <= MAX_GEN_DEPTH, "gprl: max_depth must be <= ", std::to_string(MAX_GEN_DEPTH));
  return {int(max_len), int(n_in), int(n_out), int(method), int(min_depth), int(max_depth), float(leaf_prob),
          float(const_prob), float(const_low), float(const_high), float(output_prob), uint64_t(seed)};
}

using Pop5 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// Uninitialised population tensors (kind, code, out, value, size) of shape [P, L].
inline Pop5 empty_population(const at::TensorOptions& o, int64_t P, int64_t L) {
  return {at::empty({P, L}, o.dtype(at::kByte)), at::empty({P, L}, o.dtype(at::kShort)),
          at::empty({P, L}, o.dtype(at::kByte)), at::empty({P, L}, o.dtype(at::kFloat)),
          at::empty({P, L}, o.dtype(at::kShort))};
}

}  // namespace gprl
