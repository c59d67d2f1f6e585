// Schemas and CPU implementations of the per-generation ops (generation.h): `tournament` and
// `archive_update`.
#include <ATen/Parallel.h>

#include "generation.h"
#include "ops.h"

namespace gprl {

void check_losses(const at::Tensor& loss, const at::Tensor& like, int64_t n, const char* name) {
  TORCH_CHECK(loss.dim() == 1 && loss.numel() == n && loss.scalar_type() == at::kFloat && loss.is_contiguous(),
              "gprl: ", name, " must be a contiguous float32 [", std::to_string(n), "]");
  TORCH_CHECK(loss.device() == like.device(), "gprl: ", name, " must be on the population's device");
}

void check_tournament(const at::Tensor& loss, int64_t n, int64_t size) {
  TORCH_CHECK(loss.dim() == 1 && loss.scalar_type() == at::kFloat && loss.is_contiguous(),
              "gprl: loss must be a contiguous float32 [P]");
  TORCH_CHECK(n >= 0 && size >= 1, "gprl: tournament needs n >= 0 and size >= 1");
  TORCH_CHECK(n == 0 || loss.numel() > 0, "gprl: tournament needs a non-empty population");
}

void check_archive(const at::Tensor& akind, const at::Tensor& acode, const at::Tensor& aout,
                   const at::Tensor& avalue, const at::Tensor& asize, const at::Tensor& aloss, const at::Tensor& kind,
                   const at::Tensor& code, const at::Tensor& out, const at::Tensor& value, const at::Tensor& size,
                   const at::Tensor& loss) {
  check_population(akind, acode, aout, avalue, asize);
  check_population(kind, code, out, value, size);
  TORCH_CHECK(akind.device() == kind.device(), "gprl: the archive and the population must share a device");
  TORCH_CHECK(akind.size(1) == kind.size(1) && akind.size(0) == kind.size(1) + 1,
              "gprl: the archive must be [max_len + 1, max_len] for a population of max_len");
  TORCH_CHECK(kind.size(0) < (int64_t(1) << 32), "gprl: archive_update takes fewer than 2^32 trees");
  check_losses(aloss, akind, akind.size(0), "archive_loss");
  check_losses(loss, kind, kind.size(0), "loss");
}

namespace {

at::Tensor tournament_cpu(const at::Tensor& loss, int64_t n, int64_t size, int64_t seed) {
  check_tournament(loss, n, size);
  at::Tensor winner = at::empty({n}, loss.options().dtype(at::kLong));
  const float* l = loss.data_ptr<float>();
  int64_t* w = winner.data_ptr<int64_t>();
  const int64_t P = loss.numel();
  at::parallel_for(0, n, 1024, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) w[i] = tournament_winner(l, P, i, int(size), uint64_t(seed));
  });
  return winner;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> archive_update_cpu(
    const at::Tensor& akind, const at::Tensor& acode, const at::Tensor& aout, const at::Tensor& avalue,
    const at::Tensor& asize, const at::Tensor& aloss, const at::Tensor& kind, const at::Tensor& code,
    const at::Tensor& out, const at::Tensor& value, const at::Tensor& size, const at::Tensor& loss) {
  check_archive(akind, acode, aout, avalue, asize, aloss, kind, code, out, value, size, loss);
  at::Tensor k2 = akind.clone(), c2 = acode.clone(), o2 = aout.clone(), v2 = avalue.clone(), s2 = asize.clone(),
             l2 = aloss.clone();
  const int64_t P = kind.size(0), L = kind.size(1), bins = L + 1;
  std::vector<uint64_t> key(bins, NO_KEY);
  const float* lp = loss.data_ptr<float>();
  const int16_t* sp = size.data_ptr<int16_t>();
  for (int64_t p = 0; p < P; ++p) {
    const int b = archive_bin(sp, p, int(L), lp[p]);
    if (b >= 0) key[b] = std::min(key[b], archive_key(lp[p], p));
  }
  float* al = l2.data_ptr<float>();
  for (int64_t b = 0; b < bins; ++b) {
    if (key[b] == NO_KEY || !(archive_key_loss(key[b]) < al[b])) continue;
    const int64_t src = archive_key_index(key[b]) * L, dst = b * L;
    std::memcpy(k2.data_ptr<uint8_t>() + dst, kind.data_ptr<uint8_t>() + src, L);
    std::memcpy(c2.data_ptr<int16_t>() + dst, code.data_ptr<int16_t>() + src, L * 2);
    std::memcpy(o2.data_ptr<uint8_t>() + dst, out.data_ptr<uint8_t>() + src, L);
    std::memcpy(v2.data_ptr<float>() + dst, value.data_ptr<float>() + src, L * 4);
    std::memcpy(s2.data_ptr<int16_t>() + dst, size.data_ptr<int16_t>() + src, L * 2);
    al[b] = archive_key_loss(key[b]);
  }
  return {k2, c2, o2, v2, s2, l2};
}

}  // namespace
}  // namespace gprl

TORCH_LIBRARY_FRAGMENT(gprl, m) {
  // n tournament winners (int64 indices) over the losses [P] (lower is better, no NaN); see generation.h.
  m.def("tournament(Tensor loss, int n, int size, int seed) -> Tensor");
  // The archive (trees [max_len + 1, max_len] and best loss per tree length) after seeing a population and
  // its losses: for each length, the lowest finite loss (lowest index among equals) replaces the archived
  // tree if strictly lower. Returns new tensors; the inputs are not modified.
  m.def("archive_update(Tensor archive_kind, Tensor archive_code, Tensor archive_out, Tensor archive_value, "
        "Tensor archive_size, Tensor archive_loss, Tensor kind, Tensor code, Tensor out, Tensor value, "
        "Tensor size, Tensor loss) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(gprl, CPU, m) {
  m.impl("tournament", &gprl::tournament_cpu);
  m.impl("archive_update", &gprl::archive_update_cpu);
}
