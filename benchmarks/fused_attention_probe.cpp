// A fused CPU attention forward for head size 10 (AVX2 + FMA), measured by
// fused_attention_probe.py against the package's current CPU path. Not used by the package:
// it is the evidence for (or against) writing a fused kernel, forward and backward.
//
// Per (head, graph) and per block of 8 queries (the vector lanes): scores from the bias and
// q^T k, softmax and probabilities times values, the block's scores staying in a small scratch
// (L x 8 floats, in L1) instead of a [G, Lq, L] tensor written and read by four operators. The
// lanes are queries, so no horizontal sums are needed: the bias and the saved probabilities are
// transposed, [G, L, Lq]. Keys are taken 4 at a time so that the score FMAs do not wait on each
// other. No dropout (inference).
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <cmath>
#include <vector>

namespace {

// e^x for x <= 0 (scores minus their row maximum): Cephes' expf polynomial on x - n ln 2,
// scaled by 2^n through the exponent bits; exactly 0 for -inf (masked keys).
inline __m256 exp_nonpos(__m256 x) {
  const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
  const __m256 is_inf = _mm256_cmp_ps(x, neg_inf, _CMP_EQ_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f),
                                             _mm256_set1_ps(0.5f)));
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500E-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
  p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(is_inf, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

// Lanes below `valid` set: the last block of queries may be partial.
inline __m256i lane_mask(int64_t valid) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(valid)), idx);
}

template <int DH>
void attend_block(const float* Q, const float* K, const float* V, const float* BT, float* PT,
                  float* O, int64_t rs, int64_t orow, int64_t L, int64_t Lq, float scale,
                  float* scratch) {
  for (int64_t i0 = 0; i0 < Lq; i0 += 8) {
    const int64_t valid = std::min<int64_t>(8, Lq - i0);
    const __m256i mask = lane_mask(valid);
    __m256 qv[DH];
#pragma GCC unroll 16
    for (int c = 0; c < DH; ++c)
      qv[c] = _mm256_mul_ps(_mm256_maskload_ps(Q + c * rs + i0, mask), _mm256_set1_ps(scale));
    __m256 m = _mm256_set1_ps(-INFINITY);
    int64_t j = 0;
    for (; j + 4 <= L; j += 4) {
      __m256 s0 = _mm256_maskload_ps(BT + j * Lq + i0, mask);
      __m256 s1 = _mm256_maskload_ps(BT + (j + 1) * Lq + i0, mask);
      __m256 s2 = _mm256_maskload_ps(BT + (j + 2) * Lq + i0, mask);
      __m256 s3 = _mm256_maskload_ps(BT + (j + 3) * Lq + i0, mask);
#pragma GCC unroll 16
      for (int c = 0; c < DH; ++c) {
        const float* kc = K + c * rs + j;
        s0 = _mm256_fmadd_ps(_mm256_broadcast_ss(kc), qv[c], s0);
        s1 = _mm256_fmadd_ps(_mm256_broadcast_ss(kc + 1), qv[c], s1);
        s2 = _mm256_fmadd_ps(_mm256_broadcast_ss(kc + 2), qv[c], s2);
        s3 = _mm256_fmadd_ps(_mm256_broadcast_ss(kc + 3), qv[c], s3);
      }
      _mm256_storeu_ps(scratch + j * 8, s0);
      _mm256_storeu_ps(scratch + (j + 1) * 8, s1);
      _mm256_storeu_ps(scratch + (j + 2) * 8, s2);
      _mm256_storeu_ps(scratch + (j + 3) * 8, s3);
      m = _mm256_max_ps(_mm256_max_ps(m, _mm256_max_ps(s0, s1)), _mm256_max_ps(s2, s3));
    }
    for (; j < L; ++j) {
      __m256 s = _mm256_maskload_ps(BT + j * Lq + i0, mask);
#pragma GCC unroll 16
      for (int c = 0; c < DH; ++c)
        s = _mm256_fmadd_ps(_mm256_broadcast_ss(K + c * rs + j), qv[c], s);
      _mm256_storeu_ps(scratch + j * 8, s);
      m = _mm256_max_ps(m, s);
    }
    __m256 sum = _mm256_setzero_ps();
    for (int64_t j = 0; j < L; ++j) {
      __m256 e = exp_nonpos(_mm256_sub_ps(_mm256_loadu_ps(scratch + j * 8), m));
      _mm256_storeu_ps(scratch + j * 8, e);
      sum = _mm256_add_ps(sum, e);
    }
    const __m256 inv = _mm256_div_ps(_mm256_set1_ps(1.0f), sum);
    __m256 acc[DH];
#pragma GCC unroll 16
    for (int c = 0; c < DH; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t j = 0; j < L; ++j) {
      const __m256 p = _mm256_mul_ps(_mm256_loadu_ps(scratch + j * 8), inv);
      _mm256_maskstore_ps(PT + j * Lq + i0, mask, p);
#pragma GCC unroll 16
      for (int c = 0; c < DH; ++c)
        acc[c] = _mm256_fmadd_ps(_mm256_broadcast_ss(V + c * rs + j), p, acc[c]);
    }
#pragma GCC unroll 16
    for (int c = 0; c < DH; ++c) _mm256_maskstore_ps(O + c * orow + i0, mask, acc[c]);
  }
}

}  // namespace

// qkv: [3*d*H, B*L] head-minor rows; bias_t: [H*B, L, Lq] contiguous (transposed bias).
// Returns out [D, B*Lq] head-minor rows and probs_t [H*B, L, Lq].
std::vector<torch::Tensor> forward(torch::Tensor qkv, torch::Tensor bias_t, int64_t H, int64_t B,
                                   int64_t L, int64_t Lq, double scale_d) {
  const int64_t D = qkv.size(0) / 3, d = D / H, ld = qkv.stride(0);
  TORCH_CHECK(d == 10, "the probe kernel is written for head size 10");
  TORCH_CHECK(qkv.is_contiguous() && bias_t.is_contiguous(), "contiguous inputs expected");
  const int64_t G = H * B;
  auto probs = torch::empty({G, L, Lq}, qkv.options());
  auto out = torch::empty({D, B * Lq}, qkv.options());
  const float* qp = qkv.data_ptr<float>();
  const float* bp = bias_t.data_ptr<float>();
  float* pp = probs.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const float scale = static_cast<float>(scale_d);
  at::parallel_for(0, G, 1, [&](int64_t g0, int64_t g1) {
    std::vector<float> scratch(L * 8);
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t h = g / B, b = g % B;
      const float* Q = qp + h * ld + b * L;
      const float* K = qp + (D + h) * ld + b * L;
      const float* V = qp + (2 * D + h) * ld + b * L;
      const int64_t rs = H * ld;  // row stride between head-dim rows
      const float* BT = bp + g * L * Lq;
      float* PT = pp + g * L * Lq;
      float* O = op + h * (B * Lq) + b * Lq;
      attend_block<10>(Q, K, V, BT, PT, O, rs, H * (B * Lq), L, Lq, scale, scratch.data());
    }
  });
  return {out, probs};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward); }
