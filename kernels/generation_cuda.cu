// CUDA implementations of the per-generation ops (generation.h): a thread per tournament; the archive
// update as one pass of 64-bit atomicMin over packed (loss, index) keys (order-independent, so
// deterministic) and a block per improved length copying its tree.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

#include "generation.h"
#include "ops.h"

namespace gprl {

void check_tournament(const at::Tensor& loss, int64_t n, int64_t size);
void check_archive(const at::Tensor& akind, const at::Tensor& acode, const at::Tensor& aout,
                   const at::Tensor& avalue, const at::Tensor& asize, const at::Tensor& aloss, const at::Tensor& kind,
                   const at::Tensor& code, const at::Tensor& out, const at::Tensor& value, const at::Tensor& size,
                   const at::Tensor& loss);

namespace {

constexpr int THREADS = 256;
int blocks(int64_t n) { return int((n + THREADS - 1) / THREADS); }
cudaStream_t stream() { return c10::cuda::getCurrentCUDAStream(); }

__global__ void tournament_kernel(const float* loss, int64_t P, int64_t n, int size, uint64_t seed,
                                  int64_t* winner) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) winner[i] = tournament_winner(loss, P, i, size, seed);
}

// Minimum key per length: first within the block in shared memory, then one global atomic per block and
// length. (One global atomic per tree serialised ~P atomics on the ~100 lengths in use: ~0.8 ms at P=1e5.)
__global__ void archive_keys_kernel(const int16_t* size, const float* loss, int64_t P, int L,
                                    unsigned long long* key) {
  extern __shared__ unsigned long long block_key[];  // L + 1 lengths
  for (int b = threadIdx.x; b <= L; b += blockDim.x) block_key[b] = NO_KEY;
  __syncthreads();
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < P; p += int64_t(gridDim.x) * blockDim.x) {
    const int b = archive_bin(size, p, L, loss[p]);
    if (b >= 0) atomicMin(block_key + b, static_cast<unsigned long long>(archive_key(loss[p], p)));
  }
  __syncthreads();
  for (int b = threadIdx.x; b <= L; b += blockDim.x)
    if (block_key[b] != NO_KEY) atomicMin(key + b, block_key[b]);
}

__global__ void archive_copy_kernel(const unsigned long long* key, int L, const uint8_t* kind, const int16_t* code,
                                    const uint8_t* out, const float* value, const int16_t* size, uint8_t* akind,
                                    int16_t* acode, uint8_t* aout, float* avalue, int16_t* asize, float* aloss) {
  const int b = blockIdx.x;
  const uint64_t k = key[b];
  if (k == NO_KEY) return;
  const float l = archive_key_loss(k);
  if (!(l < aloss[b])) return;
  const int64_t src = archive_key_index(k) * L, dst = int64_t(b) * L;
  for (int i = threadIdx.x; i < L; i += blockDim.x) {
    akind[dst + i] = kind[src + i];
    acode[dst + i] = code[src + i];
    aout[dst + i] = out[src + i];
    avalue[dst + i] = value[src + i];
    asize[dst + i] = size[src + i];
  }
  __syncthreads();  // every thread has read aloss[b] before it changes
  if (threadIdx.x == 0) aloss[b] = l;
}

at::Tensor tournament_cuda(const at::Tensor& loss, int64_t n, int64_t size, int64_t seed) {
  check_tournament(loss, n, size);
  c10::cuda::CUDAGuard guard(loss.device());
  at::Tensor winner = at::empty({n}, loss.options().dtype(at::kLong));
  if (n == 0) return winner;
  tournament_kernel<<<blocks(n), THREADS, 0, stream()>>>(loss.data_ptr<float>(), loss.numel(), n, int(size),
                                                          uint64_t(seed), winner.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return winner;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> archive_update_cuda(
    const at::Tensor& akind, const at::Tensor& acode, const at::Tensor& aout, const at::Tensor& avalue,
    const at::Tensor& asize, const at::Tensor& aloss, const at::Tensor& kind, const at::Tensor& code,
    const at::Tensor& out, const at::Tensor& value, const at::Tensor& size, const at::Tensor& loss) {
  check_archive(akind, acode, aout, avalue, asize, aloss, kind, code, out, value, size, loss);
  c10::cuda::CUDAGuard guard(kind.device());
  at::Tensor k2 = akind.clone(), c2 = acode.clone(), o2 = aout.clone(), v2 = avalue.clone(), s2 = asize.clone(),
             l2 = aloss.clone();
  const int64_t P = kind.size(0), L = kind.size(1), bins = L + 1;
  if (P == 0 || L == 0) return {k2, c2, o2, v2, s2, l2};
  at::Tensor key = at::full({bins}, -1, kind.options().dtype(at::kLong));  // all ones: NO_KEY
  auto* kp = reinterpret_cast<unsigned long long*>(key.data_ptr<int64_t>());
  constexpr int KEY_THREADS = 512, MAX_KEY_BLOCKS = 256;  // grid-stride: few blocks, few global atomics
  const int key_blocks = int(std::min<int64_t>((P + KEY_THREADS - 1) / KEY_THREADS, MAX_KEY_BLOCKS));
  archive_keys_kernel<<<key_blocks, KEY_THREADS, size_t(bins) * sizeof(uint64_t), stream()>>>(
      size.data_ptr<int16_t>(), loss.data_ptr<float>(), P, int(L), kp);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  archive_copy_kernel<<<int(bins), 128, 0, stream()>>>(
      kp, int(L), kind.data_ptr<uint8_t>(), code.data_ptr<int16_t>(), out.data_ptr<uint8_t>(),
      value.data_ptr<float>(), size.data_ptr<int16_t>(), k2.data_ptr<uint8_t>(), c2.data_ptr<int16_t>(),
      o2.data_ptr<uint8_t>(), v2.data_ptr<float>(), s2.data_ptr<int16_t>(), l2.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {k2, c2, o2, v2, s2, l2};
}

}  // namespace
}  // namespace gprl

TORCH_LIBRARY_IMPL(gprl, CUDA, m) {
  m.impl("tournament", &gprl::tournament_cuda);
  m.impl("archive_update", &gprl::archive_update_cuda);
}
