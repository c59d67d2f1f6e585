// CUDA fused loss (fitness) of every tree over one shared dataset, without a [P, D] prediction tensor.
// The strategy argument picks the mapping (strategy.h). Deterministic: each team sums its rows in a fixed
// order, and segments (when a plan has several per tree) are summed in order by a second kernel.
#include "eval_cuda.cuh"

namespace gprl {
namespace {

using namespace eval;

at::Tensor fitness_cuda(const at::Tensor& kind, const at::Tensor& code, const at::Tensor& out, const at::Tensor& value,
                        const at::Tensor& size, const at::Tensor& Xt, const at::Tensor& yt,
                        const std::optional<at::Tensor>& weight, int64_t metric, int64_t max_stack,
                        int64_t strategy) {
  const at::Tensor w = check_fitness_args(kind, code, out, value, size, Xt, yt, weight, metric);
  check_strategy(strategy, false);
  c10::cuda::CUDAGuard guard(kind.device());
  const int64_t P = kind.size(0), L = kind.size(1), D = Xt.size(1);
  const int n_in = int(Xt.size(0)), n_out = int(yt.size(0));
  at::Tensor result = at::empty({P}, Xt.options());
  if (P == 0) return result;
  TORCH_CHECK(D > 0 && L > 0, "gprl: fitness needs at least one row and max_len >= 1");
  const at::Tensor yc = yt.contiguous();
  at::Tensor wsum;
  if (w.defined()) wsum = w.to(at::kDouble).sum();  // stays on the device: no host sync
  const LossArgs loss{yc.data_ptr<float>(), w.defined() ? w.data_ptr<float>() : nullptr,
                      wsum.defined() ? wsum.data_ptr<double>() : nullptr, int(metric)};
  const PopView pop = pop_view(kind, code, out, value, size);
  const XView xv{Xt.data_ptr<float>(), 0, Xt.stride(1), Xt.stride(0)};
  const DeviceInfo info = device_info(c10::cuda::current_device());
  const Plan plan = make_plan(strategy, {P, D, n_in, n_out, int(L), true, false, info.sms, info.smem_optin});
  at::Tensor partial;
  if (plan.nseg > 1) partial = at::empty({P * plan.nseg * n_out}, Xt.options().dtype(at::kDouble));
  double* partial_p = plan.nseg > 1 ? partial.data_ptr<double>() : nullptr;
  with_stack(max_stack, plan.rows, [&](auto r_, auto s_) {
    constexpr int R = decltype(r_)::value, S = decltype(s_)::value;
    with_team(plan.team, [&](auto team_) {
      constexpr int TEAM = decltype(team_)::value;
      const size_t smem =
          smem_layout(TEAM, plan.threads, R, int(L), n_out, plan.x_in_smem ? int64_t(n_in) * D : 0, true).total;
      auto kernel = fitness_kernel<TEAM, R, S>;
      prepare_launch(reinterpret_cast<const void*>(kernel), smem, info);
      kernel<<<plan.blocks, plan.threads, smem, stream()>>>(pop, xv, loss, D, n_in, n_out, plan.nseg, plan.seg_rows,
                                                            plan.x_in_smem, partial_p, result.data_ptr<float>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  if (plan.nseg > 1) {
    constexpr int T = 128;
    finish_loss_kernel<<<int(ceil_div(P, T)), T, 0, stream()>>>(partial_p, P, plan.nseg, n_out, int(metric), D,
                                                                 loss.wsum, result.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return result;
}

}  // namespace
}  // namespace gprl

TORCH_LIBRARY_IMPL(gprl, CUDA, m) { m.impl("fitness", &gprl::fitness_cuda); }
