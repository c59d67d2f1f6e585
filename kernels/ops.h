// Declarations shared by the op implementations: argument checks and the loss metrics.
// Python validates user input first (gprl/population.py); these checks guard direct torch.ops calls.
#pragma once
#include <ATen/ATen.h>
#include <torch/library.h>

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

}  // namespace gprl
