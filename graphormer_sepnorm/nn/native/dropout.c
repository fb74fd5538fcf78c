// Dropout, and dropout added to a residual, in one pass over memory, for x86-64 with AVX2.
// Built at first use by graphormer_sepnorm/nn/native/build.py; called through ctypes by
// graphormer_sepnorm/nn/native/fused_dropout.py. The mask is avx2_common.h's hash of each
// element's index, drawn again in backward instead of stored.
#include "avx2_common.h"

// out[i] = residual[i] + x[i] * keep[i] * scale for i in [begin, end) (residual NULL: 0).
void dropout_forward(const float* x, const float* residual, float* out, int64_t begin,
                     int64_t end, uint32_t drop_levels, float scale, uint64_t seed) {
  const DropKey key = drop_key(seed, drop_levels);
  const __m256 s = _mm256_set1_ps(scale);
  for (int64_t i = begin; i < end; i += LANES) {
    const int64_t valid = end - i < LANES ? end - i : LANES;
    const __m256i mask = lane_mask(valid);
    __m256 y = _mm256_mul_ps(_mm256_mul_ps(_mm256_maskload_ps(x + i, mask), s),
                             keep_lanes((uint32_t)i, &key));
    if (residual) y = _mm256_add_ps(y, _mm256_maskload_ps(residual + i, mask));
    store_lanes(out + i, y, valid);
  }
}

// grad_x[i] = grad[i] * keep[i] * scale for i in [begin, end): the mask of dropout_forward.
void dropout_backward(const float* grad, float* grad_x, int64_t begin, int64_t end,
                      uint32_t drop_levels, float scale, uint64_t seed) {
  dropout_forward(grad, NULL, grad_x, begin, end, drop_levels, scale, seed);
}
