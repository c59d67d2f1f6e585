// CPU implementations of the structure ops (generate, node_depth, validate): the per-tree code of trees.h,
// which structure_cuda.cu runs too, over trees in parallel.
#include <ATen/Parallel.h>

#include "ops.h"

namespace gprl {

Pop5 generate_cpu(const at::Tensor& weights, int64_t pop_size, int64_t max_len, int64_t n_in, int64_t n_out,
                  int64_t method, int64_t min_depth, int64_t max_depth, double leaf_prob, double const_prob,
                  double const_low, double const_high, double output_prob, int64_t seed) {
  GenParams g = generate_params(weights, max_len, n_in, n_out, method, min_depth, max_depth, leaf_prob,
                                const_prob, const_low, const_high, output_prob, seed);
  auto [kind, code, out, value, size] = empty_population(weights.options(), pop_size, max_len);
  at::Tensor w = weights.contiguous();
  const float* wp = w.data_ptr<float>();
  uint8_t *kp = kind.data_ptr<uint8_t>(), *op = out.data_ptr<uint8_t>();
  int16_t *cp = code.data_ptr<int16_t>(), *sp = size.data_ptr<int16_t>();
  float* vp = value.data_ptr<float>();
  at::parallel_for(0, pop_size, 64, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      int64_t o = t * max_len;
      generate_tree(t, g, wp, kp + o, cp + o, op + o, vp + o, sp + o);
    }
  });
  return {kind, code, out, value, size};
}

at::Tensor node_depth_cpu(const at::Tensor& size) {
  TORCH_CHECK(size.dim() == 2 && size.scalar_type() == at::kShort, "gprl: size must be int16 [P, max_len]");
  at::Tensor s = size.contiguous();
  int64_t P = s.size(0), L = s.size(1);
  at::Tensor depth = at::empty_like(s);
  const int16_t* sp = s.data_ptr<int16_t>();
  int16_t* dp = depth.data_ptr<int16_t>();
  at::parallel_for(0, P, 256, [&](int64_t begin, int64_t end) {
    std::vector<int16_t> ends(L > 0 ? L : 1);
    for (int64_t t = begin; t < end; ++t) node_depths(sp + t * L, int(L), dp + t * L, ends.data());
  });
  return depth;
}

at::Tensor validate_cpu(const at::Tensor& kind, const at::Tensor& code, const at::Tensor& out,
                        const at::Tensor& value, const at::Tensor& size, int64_t n_in, int64_t n_out) {
  check_population(kind, code, out, value, size);
  int64_t P = kind.size(0), L = kind.size(1);
  at::Tensor err = at::empty({P}, kind.options().dtype(at::kInt));
  int* ep = err.data_ptr<int>();
  at::parallel_for(0, P, 256, [&](int64_t begin, int64_t end) {
    std::vector<int> anc_index(L > 0 ? L : 1), anc_left(L > 0 ? L : 1);
    for (int64_t t = begin; t < end; ++t) {
      int64_t o = t * L;
      ep[t] = validate_tree(kind.data_ptr<uint8_t>() + o, code.data_ptr<int16_t>() + o,
                            out.data_ptr<uint8_t>() + o, value.data_ptr<float>() + o,
                            size.data_ptr<int16_t>() + o, int(L), int(n_in), int(n_out), anc_index.data(),
                            anc_left.data());
    }
  });
  return err;
}

}  // namespace gprl

TORCH_LIBRARY_IMPL(gprl, CPU, m) {
  m.impl("generate", &gprl::generate_cpu);
  m.impl("node_depth", &gprl::node_depth_cpu);
  m.impl("validate", &gprl::validate_cpu);
}
