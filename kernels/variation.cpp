// Schemas and CPU implementations of the variation ops: `vary` (every tree operator, one per child, whole
// population per call) and `uniform` (Philox uniforms that match the CUDA ones, for selection).
#include <ATen/Parallel.h>

#include "variation_ops.h"

namespace gprl {

Pop5 vary_cpu(const at::Tensor& kind, const at::Tensor& code, const at::Tensor& out, const at::Tensor& value,
              const at::Tensor& size, const at::Tensor& dkind, const at::Tensor& dcode, const at::Tensor& dout,
              const at::Tensor& dvalue, const at::Tensor& dsize, const at::Tensor& parent, const at::Tensor& donor,
              const at::Tensor& op, const at::Tensor& node, const at::Tensor& dnode, const at::Tensor& weights,
              int64_t n_in, int64_t n_out, int64_t max_depth, int64_t subtree_depth, double xo_leaf_prob,
              double multi_prob, double const_sigma, double const_prob, double const_low, double const_high,
              double output_prob, double leaf_prob, int64_t seed) {
  check_population(kind, code, out, value, size);
  check_population(dkind, dcode, dout, dvalue, dsize);
  check_vary_args(kind, dkind, parent, donor, op, node, dnode, weights);
  const int64_t N = parent.numel(), P = kind.size(0), L = kind.size(1), Q = dkind.size(0), LD = dkind.size(1);
  VaryParams p = vary_params(L, n_in, n_out, max_depth, subtree_depth, xo_leaf_prob, multi_prob, const_sigma,
                             const_prob, const_low, const_high, output_prob, leaf_prob, seed);
  Pop5 children = empty_children(kind, N);
  // plain names, not structured bindings: C++17 lambdas cannot capture those
  at::Tensor ck = std::get<0>(children), cc = std::get<1>(children), co = std::get<2>(children),
             cv = std::get<3>(children), cs = std::get<4>(children);
  at::Tensor w = weights.contiguous(), pa = parent.contiguous(), da = donor.contiguous(), oa = op.contiguous(),
             na = node.contiguous(), dna = dnode.contiguous();
  const float* wp = w.data_ptr<float>();
  at::parallel_for(0, N, 64, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      int64_t ia = clamp_index(pa.data_ptr<int64_t>()[t], P) * L;
      int64_t ib = Q > 0 ? clamp_index(da.data_ptr<int64_t>()[t], Q) * LD : 0;
      TreeRef a{kind.data_ptr<uint8_t>() + ia, code.data_ptr<int16_t>() + ia, out.data_ptr<uint8_t>() + ia,
                value.data_ptr<float>() + ia, size.data_ptr<int16_t>() + ia};
      TreeRef b{dkind.data_ptr<uint8_t>() + ib, dcode.data_ptr<int16_t>() + ib, dout.data_ptr<uint8_t>() + ib,
                dvalue.data_ptr<float>() + ib, dsize.data_ptr<int16_t>() + ib};
      int64_t o = t * L;
      TreeOut d{ck.data_ptr<uint8_t>() + o, cc.data_ptr<int16_t>() + o, co.data_ptr<uint8_t>() + o,
                cv.data_ptr<float>() + o, cs.data_ptr<int16_t>() + o};
      vary_tree(t, oa.data_ptr<int>()[t], a, b, Q > 0 && LD > 0, na.data_ptr<int>()[t], dna.data_ptr<int>()[t], wp,
                p, d, 0, 1, nullptr);
    }
  });
  return children;
}

at::Tensor uniform_cpu(const at::Tensor& like, int64_t n, int64_t seed) {
  TORCH_CHECK(n >= 0, "gprl: n must be >= 0");
  at::Tensor u = at::empty({n}, like.options().dtype(at::kFloat));
  float* up = u.data_ptr<float>();
  at::parallel_for(0, n, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) up[i] = Philox(uint64_t(seed), uint64_t(i)).uniform();
  });
  return u;
}

}  // namespace gprl

TORCH_LIBRARY_FRAGMENT(gprl, m) {
  // Children [N, max_len]: child t is parent[t] varied by op[t] (VaryOp in variation.h), with donor[t] of the
  // donor population for exchange/crossover and node[t]/donor_node[t] as the exchange points of OP_EXCHANGE.
  m.def("vary(Tensor kind, Tensor code, Tensor out, Tensor value, Tensor size, Tensor donor_kind, "
        "Tensor donor_code, Tensor donor_out, Tensor donor_value, Tensor donor_size, Tensor parent, Tensor donor, "
        "Tensor op, Tensor node, Tensor donor_node, Tensor func_weights, int n_in, int n_out, int max_depth, "
        "int subtree_depth, float xo_leaf_prob, float multi_prob, float const_sigma, float const_prob, "
        "float const_low, float const_high, float output_prob, float leaf_prob, int seed) "
        "-> (Tensor, Tensor, Tensor, Tensor, Tensor)");
  // n uniforms in [0, 1) on like's device: element i is the first draw of Philox(seed, i) on every backend.
  m.def("uniform(Tensor like, int n, int seed) -> Tensor");
}

TORCH_LIBRARY_IMPL(gprl, CPU, m) {
  m.impl("vary", &gprl::vary_cpu);
  m.impl("uniform", &gprl::uniform_cpu);
}
