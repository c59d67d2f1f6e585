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

// The scaled metrics are MSE / RMSE of each output after its least-squares linear scaling a + b * f
// (Keijzer 2003), from sums gathered in the same pass as the outputs (scaled_mse).
enum Metric : int64_t { MSE = 0, MAE = 1, RMSE = 2, SCALED_MSE = 3, SCALED_RMSE = 4 };

// Sums a fused loss gathers per tree and output: the loss sum, or for a scaled metric
// (sum w f, sum w f^2, sum w f yc), yc the target less its weighted mean.
constexpr int MAX_TERMS = 3;
GPRL_HD int metric_terms(int64_t metric) { return metric >= SCALED_MSE ? 3 : 1; }

// Adds one row's terms (prediction f, target y or centred target yc, row weight w) to s.
GPRL_HD void add_row_terms(double* s, float pred, float y, double w, int64_t metric) {
  const double f = pred;
  if (metric >= SCALED_MSE) {
    const double wf = w * f;
    s[0] += wf;
    s[1] += wf * f;
    s[2] += wf * double(y);
    return;
  }
  const double e = f - double(y);
  s[0] += w * (metric == MAE ? fabs(e) : e * e);
}

// Least-squares MSE of a + b * f against y from the sums of add_row_terms and the target's sums
// ystat = (W, sum w yc, sum w yc^2): var(y) - cov(f, y)^2 / var(f). A flat output (its variance within
// float32 rounding of its mean) is fitted by the mean alone, var(y); non-finite sums give NaN.
constexpr double SCALING_FLAT = 1e-12;
GPRL_HD double scaled_mse(const double* s, const double* ystat) {
  if (!(s[0] - s[0] == 0.0 && s[1] - s[1] == 0.0 && s[2] - s[2] == 0.0)) return NAN;  // inf - inf is NaN
  const double W = ystat[0], mf = s[0] / W, my = ystat[1] / W;
  const double vy = fmax(ystat[2] / W - my * my, 0.0), vf = s[1] / W - mf * mf, cov = s[2] / W - mf * my;
  if (!(vf > 0.0 && vf > SCALING_FLAT * mf * mf)) return vy;
  return fmax(vy - cov * cov / vf, 0.0);
}

// The loss of one output from its summed terms: the mean over `denom` (D or the weight sum), or the
// scaled MSE; the square root for RMSE.
GPRL_HD double finish_terms(const double* s, double denom, const double* ystat, int64_t metric) {
  const double m = metric >= SCALED_MSE ? scaled_mse(s, ystat) : s[0] / denom;
  return metric == RMSE || metric == SCALED_RMSE ? sqrt(m) : m;
}

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
  TORCH_CHECK(metric >= MSE && metric <= SCALED_RMSE,
              "gprl: metric must be 0 (MSE), 1 (MAE), 2 (RMSE), 3 (scaled MSE) or 4 (scaled RMSE)");
  if (!weight.has_value()) return at::Tensor();
  check_data(*weight, kind, "weight");
  TORCH_CHECK(weight->numel() == Xt.size(1), "gprl: weight must be [D]");
  return weight->contiguous();
}

// The scaled metrics' targets: yt less each output's weighted mean (float32 [n_out, D], what the kernels
// read as y) and, per output, (W, sum w yc, sum w yc^2) in double [n_out, 3], all on yt's device.
inline std::pair<at::Tensor, at::Tensor> scaled_targets(const at::Tensor& yt, const at::Tensor& w) {
  const at::Tensor y = yt.to(at::kDouble);
  const at::Tensor wd = w.defined() ? w.to(at::kDouble) : at::ones({yt.size(1)}, y.options());
  const at::Tensor W = wd.sum();
  const at::Tensor yc = (y - (y * wd).sum(1, true) / W).to(at::kFloat).contiguous();
  const at::Tensor ycd = yc.to(at::kDouble);  // the sums of the rounded values the kernels read
  const at::Tensor stats = at::stack({W.expand({yt.size(0)}), (ycd * wd).sum(1), (ycd * ycd * wd).sum(1)}, 1);
  return {yc, stats.contiguous()};
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
