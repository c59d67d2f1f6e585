// CUDA predictions: forward (one dataset shared by every tree) and forward_batched (each tree its own
// rows, the policy case). The strategy argument picks the mapping (strategy.h); inputs are read in place
// through their strides, so no transposed copy is made per call.
#include "eval_cuda.cuh"

namespace gprl {
namespace {

using namespace eval;

void run_forward(const PopView& pop, const XView& xv, int64_t D, int n_in, int n_out, int64_t max_stack,
                 int64_t strategy, bool batched, float* Y) {
  const DeviceInfo info = device_info(c10::cuda::current_device());
  const Plan plan = make_plan(strategy, {pop.P, D, n_in, n_out, pop.L, false, batched, info.sms, info.smem_optin});
  with_stack(max_stack, plan.rows, [&](auto r_, auto s_) {
    constexpr int R = decltype(r_)::value, S = decltype(s_)::value;
    with_team(plan.team, [&](auto team_) {
      constexpr int TEAM = decltype(team_)::value;
      const size_t smem =
          smem_layout(TEAM, plan.threads, R, pop.L, n_out, plan.x_in_smem ? int64_t(n_in) * D : 0, false).total;
      auto kernel = forward_kernel<TEAM, R, S>;
      prepare_launch(reinterpret_cast<const void*>(kernel), smem, info);
      kernel<<<plan.blocks, plan.threads, smem, stream()>>>(pop, xv, D, n_in, n_out, plan.nseg, plan.seg_rows,
                                                            plan.x_in_smem, Y);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
}

at::Tensor forward_cuda(const at::Tensor& kind, const at::Tensor& code, const at::Tensor& out, const at::Tensor& value,
                        const at::Tensor& size, const at::Tensor& Xt, int64_t n_out, int64_t max_stack,
                        int64_t strategy) {
  check_population(kind, code, out, value, size);
  check_data(Xt, kind, "Xt");
  TORCH_CHECK(Xt.dim() == 2, "gprl: Xt must be [n_in, D]");
  check_strategy(strategy, false);
  c10::cuda::CUDAGuard guard(kind.device());
  const int64_t P = kind.size(0), L = kind.size(1), D = Xt.size(1);
  at::Tensor Y = at::empty({P, D, n_out}, Xt.options());
  if (P == 0 || D == 0) return Y;
  if (L == 0) return Y.zero_();
  run_forward(pop_view(kind, code, out, value, size), {Xt.data_ptr<float>(), 0, Xt.stride(1), Xt.stride(0)}, D,
              int(Xt.size(0)), int(n_out), max_stack, strategy, false, Y.data_ptr<float>());
  return Y;
}

at::Tensor forward_batched_cuda(const at::Tensor& kind, const at::Tensor& code, const at::Tensor& out,
                                const at::Tensor& value, const at::Tensor& size, const at::Tensor& X,
                                int64_t n_out, int64_t max_stack, int64_t strategy) {
  check_population(kind, code, out, value, size);
  check_data(X, kind, "X");
  TORCH_CHECK(X.dim() == 3 && X.size(0) == kind.size(0), "gprl: X must be [P, B, n_in]");
  check_strategy(strategy, true);
  c10::cuda::CUDAGuard guard(kind.device());
  const int64_t P = X.size(0), B = X.size(1), L = kind.size(1);
  at::Tensor Y = at::empty({P, B, n_out}, X.options());
  if (P == 0 || B == 0) return Y;
  if (L == 0) return Y.zero_();
  run_forward(pop_view(kind, code, out, value, size), {X.data_ptr<float>(), X.stride(0), X.stride(1), X.stride(2)},
              B, int(X.size(2)), int(n_out), max_stack, strategy, true, Y.data_ptr<float>());
  return Y;
}

}  // namespace
}  // namespace gprl

TORCH_LIBRARY_IMPL(gprl, CUDA, m) {
  m.impl("forward", &gprl::forward_cuda);
  m.impl("forward_batched", &gprl::forward_batched_cuda);
}
