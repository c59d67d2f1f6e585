// Per-generation bookkeeping shared by the CPU (generation.cpp) and CUDA (generation_cuda.cu) ops:
// tournament selection and the Pareto archive's best-per-length update. Each replaces a dozen small torch
// ops (a dozen launches and their host overhead) with one or two, with the same results.
#pragma once
#include <cstring>

#include "nodes.h"

namespace gprl {

// Winner of tournament i over a population of P losses (no NaN): contestant j is
// floor(u * P) for u the first uniform of Philox(seed, i * size + j) (as gprl::uniform draws them, computed
// in double as gprl.evolve.selection does); the lowest loss wins, the first drawn among equals.
GPRL_HD int64_t tournament_winner(const float* loss, int64_t P, int64_t i, int size, uint64_t seed) {
  int64_t best = 0;
  float best_loss = 0.f;
  for (int j = 0; j < size; ++j) {
    const double u = Philox(seed, uint64_t(i) * uint64_t(size) + uint64_t(j)).uniform();
    int64_t c = int64_t(u * double(P));
    c = c < 0 ? 0 : (c >= P ? P - 1 : c);
    const float l = loss[c];
    if (j == 0 || l < best_loss) {
      best = c;
      best_loss = l;
    }
  }
  return best;
}

// Archive keys: a finite loss and the tree's index packed so that the smallest key is the lowest loss and,
// among equal losses, the lowest index. -0.0 is folded into +0.0 (they compare equal).
constexpr uint64_t NO_KEY = ~uint64_t(0);

GPRL_HD uint64_t archive_key(float loss, int64_t index) {
  const float l = loss + 0.0f;  // -0 -> +0
  uint32_t bits;
  memcpy(&bits, &l, sizeof bits);
  bits = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);  // float order as unsigned order
  return (uint64_t(bits) << 32) | uint64_t(uint32_t(index));
}

GPRL_HD float archive_key_loss(uint64_t key) {
  uint32_t bits = uint32_t(key >> 32);
  bits = (bits & 0x80000000u) ? (bits & 0x7fffffffu) : ~bits;
  float l;
  memcpy(&l, &bits, sizeof l);
  return l;
}

GPRL_HD int64_t archive_key_index(uint64_t key) { return int64_t(uint32_t(key)); }

// The bin (tree length, 0..L) of tree p with loss l, or -1 when it takes no part (non-finite loss).
GPRL_HD int archive_bin(const int16_t* size, int64_t p, int L, float l) {
  const int len = L > 0 ? size[p * L] : 0;
  return (fabsf(l) <= VALUE_BOUND && len >= 0 && len <= L) ? len : -1;  // NaN/inf: none
}

}  // namespace gprl
