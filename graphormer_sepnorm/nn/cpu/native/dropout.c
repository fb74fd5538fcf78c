// Dropout, and dropout added to a residual, in one pass over memory, for x86-64 with AVX2.
// Built at first use by graphormer_sepnorm/nn/native/build.py; called through ctypes by
// graphormer_sepnorm/nn/native/fused_dropout.py. The mask is avx2_common.h's hash of each
// element's index, drawn again in backward instead of stored.
#include "avx2_common.h"

// residual[i] + x[i] * keep[i] * scale into out[i] for i in [i0, i0 + valid), valid <= 8.
static inline void masked_lanes(const float* x, const float* residual, float* out, int64_t i0,
                                int64_t valid, __m256 keep, __m256 scale) {
  if (valid == LANES) {  // plain loads: a masked one costs more (vmaskmovps)
    __m256 y = _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i0), scale), keep);
    if (residual) y = _mm256_add_ps(y, _mm256_loadu_ps(residual + i0));
    _mm256_storeu_ps(out + i0, y);
    return;
  }
  const __m256i mask = lane_mask(valid);
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(_mm256_maskload_ps(x + i0, mask), scale), keep);
  if (residual) y = _mm256_add_ps(y, _mm256_maskload_ps(residual + i0, mask));
  store_lanes(out + i0, y, valid);
}

// out[i] = residual[i] + x[i] * keep[i] * scale for i in [begin, end) (residual NULL: 0);
// begin is a multiple of 16: one hash serves 16 elements (keep_16), half the hashing cost.
void dropout_forward(const float* x, const float* residual, float* out, int64_t begin,
                     int64_t end, uint32_t drop_levels, float scale, uint64_t seed) {
  const DropKey key = drop_key(seed, drop_levels);
  const __m256 s = _mm256_set1_ps(scale);
  for (int64_t i = begin; i < end; i += 2 * LANES) {
    __m256 first, second;
    keep_16((uint32_t)(i / 2), &key, &first, &second);
    const int64_t left = end - i;
    masked_lanes(x, residual, out, i, left < LANES ? left : LANES, first, s);
    if (left > LANES)
      masked_lanes(x, residual, out, i + LANES, left < 2 * LANES ? left - LANES : LANES, second, s);
  }
}

// grad_x[i] = grad[i] * keep[i] * scale for i in [begin, end): the mask of dropout_forward.
void dropout_backward(const float* grad, float* grad_x, int64_t begin, int64_t end,
                      uint32_t drop_levels, float scale, uint64_t seed) {
  dropout_forward(grad, NULL, grad_x, begin, end, drop_levels, scale, seed);
}
