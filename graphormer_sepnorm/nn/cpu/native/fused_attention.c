// Fused biased softmax attention with dropout, forward and backward, for x86-64 with AVX2 + FMA.
// Built at first use by graphormer_sepnorm/nn/native/build.py with -DHEAD_DIM=d; called through
// ctypes by graphormer_sepnorm/nn/native/fused_attention.py, which documents the layouts.
//
// One (head, graph) pair g at a time, 8 queries at a time: the vector lanes are queries, so the
// softmax and the products that sum over keys need no horizontal sums, and the bias, the saved
// probabilities and the bias gradient are keys-first ([G, L keys, L queries]) so that each
// key's 8 lanes are contiguous. A block's scores stay in an L1 scratch of L x 8 floats instead
// of [G, L, L] tensors written and read by a chain of operators. The dropout mask is a hash of
// each score's index and a seed, one hash for two keys (key_keep); backward reads it from the
// sign bits of the kept probabilities, or draws it again when they are recomputed.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "avx2_common.h"

#ifndef HEAD_DIM
#error "compile with -DHEAD_DIM=<head size>"
#endif
#define HD HEAD_DIM
// The loops over the head dim are unrolled (#pragma GCC unroll) so that the per-row vectors
// stay in registers.

// e^x for x <= 0 (scores minus their row maximum): Cephes' expf polynomial on x - n ln 2,
// scaled by 2^n through the exponent bits; exactly 0 for -inf (masked keys).
static inline __m256 exp_nonpos(__m256 x) {
  const __m256 is_inf = _mm256_cmp_ps(x, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  __m256 n = _mm256_floor_ps(
      _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500E-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
  p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256i e = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(is_inf, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

// Lane sums of the 8 vectors v[0], v[stride], ..., v[7 * stride], as one vector.
static inline __m256 hsum8(const __m256* v, int64_t stride) {
  const __m256 ab = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[stride]),
                                   _mm256_hadd_ps(v[2 * stride], v[3 * stride]));
  const __m256 cd = _mm256_hadd_ps(_mm256_hadd_ps(v[4 * stride], v[5 * stride]),
                                   _mm256_hadd_ps(v[6 * stride], v[7 * stride]));
  return _mm256_add_ps(_mm256_permute2f128_ps(ab, cd, 0x20),
                       _mm256_permute2f128_ps(ab, cd, 0x31));
}

static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// A pair's [HD, L] rows (row stride cs) as [L, HD] in dst. The rows of q, k and v lie a
// multiple of 4 KiB apart, so reading element (c, j) for all c in the inner loops would map
// them to one L1 set and thrash it (measured: backward 3x slower); packed, a key's HD values
// share a cache line or two.
static void pack_keys(const float* src, int64_t cs, int64_t L, float* dst) {
  const float* rows[HD];
  for (int c = 0; c < HD; ++c) rows[c] = src + c * cs;
  for (int64_t j = 0; j < L; ++j, dst += HD)
    #pragma GCC unroll 16
    for (int c = 0; c < HD; ++c) dst[c] = rows[c][j];
}

// Softmax probabilities of queries i0 .. i0 + 7 (the lanes) over the L keys into
// scratch[j * 8 + lane]. Q: this pair's [HD, L] query rows (row stride cs); KP: its keys,
// packed [L, HD] (pack_keys); BT: its keys-first bias.
static void block_probs(const float* Q, int64_t cs, const float* KP, const float* BT, int64_t L,
                        int64_t i0, __m256i mask, float scale, float* scratch) {
  __m256 qv[HD];
  #pragma GCC unroll 16
  for (int c = 0; c < HD; ++c)
    qv[c] = _mm256_mul_ps(_mm256_maskload_ps(Q + c * cs + i0, mask), _mm256_set1_ps(scale));
  __m256 m = _mm256_set1_ps(-INFINITY);
  int64_t j = 0;
  for (; j + 4 <= L; j += 4) {  // four keys at a time: the FMAs do not wait on each other
    __m256 s0 = _mm256_maskload_ps(BT + j * L + i0, mask);
    __m256 s1 = _mm256_maskload_ps(BT + (j + 1) * L + i0, mask);
    __m256 s2 = _mm256_maskload_ps(BT + (j + 2) * L + i0, mask);
    __m256 s3 = _mm256_maskload_ps(BT + (j + 3) * L + i0, mask);
    #pragma GCC unroll 16
    for (int c = 0; c < HD; ++c) {
      const float* kc = KP + j * HD + c;
      s0 = _mm256_fmadd_ps(_mm256_broadcast_ss(kc), qv[c], s0);
      s1 = _mm256_fmadd_ps(_mm256_broadcast_ss(kc + HD), qv[c], s1);
      s2 = _mm256_fmadd_ps(_mm256_broadcast_ss(kc + 2 * HD), qv[c], s2);
      s3 = _mm256_fmadd_ps(_mm256_broadcast_ss(kc + 3 * HD), qv[c], s3);
    }
    _mm256_storeu_ps(scratch + j * LANES, s0);
    _mm256_storeu_ps(scratch + (j + 1) * LANES, s1);
    _mm256_storeu_ps(scratch + (j + 2) * LANES, s2);
    _mm256_storeu_ps(scratch + (j + 3) * LANES, s3);
    m = _mm256_max_ps(_mm256_max_ps(m, _mm256_max_ps(s0, s1)), _mm256_max_ps(s2, s3));
  }
  for (; j < L; ++j) {
    __m256 s = _mm256_maskload_ps(BT + j * L + i0, mask);
    #pragma GCC unroll 16
    for (int c = 0; c < HD; ++c)
      s = _mm256_fmadd_ps(_mm256_broadcast_ss(KP + j * HD + c), qv[c], s);
    _mm256_storeu_ps(scratch + j * LANES, s);
    m = _mm256_max_ps(m, s);
  }
  __m256 sum = _mm256_setzero_ps();
  for (j = 0; j < L; ++j) {
    __m256 e = exp_nonpos(_mm256_sub_ps(_mm256_loadu_ps(scratch + j * LANES), m));
    _mm256_storeu_ps(scratch + j * LANES, e);
    sum = _mm256_add_ps(sum, e);
  }
  const __m256 inv = _mm256_div_ps(_mm256_set1_ps(1.0f), sum);
  for (j = 0; j < L; ++j)
    _mm256_storeu_ps(scratch + j * LANES, _mm256_mul_ps(_mm256_loadu_ps(scratch + j * LANES), inv));
}

// Where pair g = h * B + b starts in a tensor whose heads and graphs have strides hs and bs.
static inline int64_t pair_offset(int64_t g, int64_t B, int64_t hs, int64_t bs) {
  return (g / B) * hs + (g % B) * bs;
}

// The keep mask of key j's 8 lanes (queries i0 .. i0 + 7; counter = (g * L) * L + i0): keys
// 2m and 2m + 1 share one hash (keep_16) at key 2m's counter, half the hashing of one each.
static inline __m256 key_keep(uint32_t counter, int64_t j, int64_t L, const DropKey* key) {
  __m256 even, odd;
  keep_16(counter + (uint32_t)((j & ~(int64_t)1) * L), key, &even, &odd);
  return (j & 1) ? odd : even;
}

// p with its sign bit set where keep is 0: the kept probabilities carry the dropout mask to
// backward (probabilities are >= 0, and -0.0 keeps the mark on a zero).
static inline __m256 mark_dropped(__m256 p, __m256 keep) {
  const __m256 dropped = _mm256_cmp_ps(keep, _mm256_setzero_ps(), _CMP_EQ_OQ);
  return _mm256_or_ps(p, _mm256_and_ps(dropped, _mm256_set1_ps(-0.0f)));
}

// acc[c] += keep * P_j * V_jc for key j of a block of queries (P_j in scratch), and P_j into
// row j of probs_block (marked where dropped) when the probabilities are kept.
static inline __attribute__((always_inline)) void add_value(
    const float* scratch, const float* VP, int64_t j, int64_t L, __m256 keep,
    uint32_t drop_levels, float* probs_block, int64_t valid, __m256* acc) {
  __m256 p = _mm256_loadu_ps(scratch + j * LANES);
  if (probs_block) store_lanes(probs_block + j * L, drop_levels ? mark_dropped(p, keep) : p, valid);
  if (drop_levels) p = _mm256_mul_ps(p, keep);
  #pragma GCC unroll 16
  for (int c = 0; c < HD; ++c)
    acc[c] = _mm256_fmadd_ps(_mm256_broadcast_ss(VP + j * HD + c), p, acc[c]);
}

// Forward for pairs g0 .. g1 - 1. Element (g = h * B + b, c, t) of q, k, v and out is at
// base + h * hs + b * bs + c * cs + t; bias_t and probs_t are [G, L, L] keys-first, probs_t
// may be NULL (not kept); kept probabilities have their sign bit set where dropped.
// drop_levels = 0: no dropout; else keep where the score's hash clears it, and scale by
// keep_scale. Returns 0, or 1 when the scratch could not be allocated.
int attention_forward(const float* q, const float* k, const float* v, int64_t B, int64_t hs,
                      int64_t bs, int64_t cs,
                      const float* bias_t, float* probs_t, float* out, int64_t g0, int64_t g1,
                      int64_t L, float scale, uint32_t drop_levels, float keep_scale,
                      uint64_t seed) {
  float* scratch = (float*)malloc((size_t)L * (LANES + 2 * HD) * sizeof(float));
  if (!scratch) return 1;
  float *KP = scratch + L * LANES, *VP = KP + L * HD;
  const DropKey key = drop_key(seed, drop_levels);
  const __m256 ks = _mm256_set1_ps(drop_levels ? keep_scale : 1.0f);
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t at = pair_offset(g, B, hs, bs);
    const float *Q = q + at, *BT = bias_t + g * L * L;
    float* O = out + at;
    pack_keys(k + at, cs, L, KP);
    pack_keys(v + at, cs, L, VP);
    for (int64_t i0 = 0; i0 < L; i0 += LANES) {
      const int64_t valid = L - i0 < LANES ? L - i0 : LANES;
      const __m256i mask = lane_mask(valid);
      block_probs(Q, cs, KP, BT, L, i0, mask, scale, scratch);
      __m256 acc[HD];
      #pragma GCC unroll 16
      for (int c = 0; c < HD; ++c) acc[c] = _mm256_setzero_ps();
      const uint32_t counter = (uint32_t)(g * L * L + i0);
      float* probs_block = probs_t ? probs_t + g * L * L + i0 : NULL;
      for (int64_t j = 0; j < L; j += 2) {  // two keys a hash: see key_keep
        __m256 keep0 = _mm256_set1_ps(1.0f), keep1 = keep0;
        if (drop_levels) keep_16(counter + (uint32_t)(j * L), &key, &keep0, &keep1);
        add_value(scratch, VP, j, L, keep0, drop_levels, probs_block, valid, acc);
        if (j + 1 < L) add_value(scratch, VP, j + 1, L, keep1, drop_levels, probs_block, valid, acc);
      }
      #pragma GCC unroll 16
      for (int c = 0; c < HD; ++c)
        store_lanes(O + c * cs + i0, _mm256_mul_ps(acc[c], ks), valid);
    }
  }
  free(scratch);
  return 0;
}

// 8 lanes of row p (stride t between lanes): a masked load, or a gather when t != 1.
static inline __m256 load_lanes(const float* p, int64_t t, __m256i mask) {
  if (t == 1) return _mm256_maskload_ps(p, mask);
  const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                         _mm256_set1_epi32((int)t));
  return _mm256_mask_i32gather_ps(_mm256_setzero_ps(), p, idx, _mm256_castsi256_ps(mask), 4);
}

// The backward of one block of 8 queries (lanes) for keys j .. j + nk - 1: the bias gradient
// dS = P (dP - D) into grad_bias_t's rows and into ds_rows, the kept probabilities P m into
// kept_rows (both [L, L8], for key_grads), and the query gradient into dq. go: the output
// gradient times the keep scale; d: D = dO . O per query. marked: P comes from the forward,
// the mask in its sign bits; else it was recomputed and the mask is drawn again. Keys go nk at
// a time because each dP is a chain of HD dependent FMAs: one key at a time waits on their
// latency (measured).
static inline __attribute__((always_inline)) void keys_backward(
    const int nk, int64_t j, const float* P, int64_t p_stride, int marked, const float* KP,
    const float* VP,
    const __m256* go, __m256 d, __m256* dq, float* grad_bias_t, float* ds_rows,
    float* kept_rows, int64_t L, int64_t L8, int64_t valid, __m256i mask, uint32_t counter,
    const DropKey* key, uint32_t drop_levels) {
  __m256 p[4], dp[4];
  #pragma GCC unroll 4
  for (int kk = 0; kk < nk; ++kk) {
    p[kk] = _mm256_maskload_ps(P + (j + kk) * p_stride, mask);
    dp[kk] = _mm256_setzero_ps();  // d loss / d P_ij, before the mask
  }
  #pragma GCC unroll 16
  for (int c = 0; c < HD; ++c)
    #pragma GCC unroll 4
    for (int kk = 0; kk < nk; ++kk)
      dp[kk] = _mm256_fmadd_ps(_mm256_broadcast_ss(VP + (j + kk) * HD + c), go[c], dp[kk]);
  #pragma GCC unroll 4
  for (int kk = 0; kk < nk; ++kk) {
    __m256 kept = p[kk];
    if (drop_levels && marked) {
      const __m256 dropped = _mm256_castsi256_ps(_mm256_srai_epi32(_mm256_castps_si256(p[kk]), 31));
      p[kk] = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), p[kk]);  // |P|
      dp[kk] = _mm256_andnot_ps(dropped, dp[kk]);
      kept = _mm256_andnot_ps(dropped, p[kk]);
    } else if (drop_levels) {
      const __m256 keep = key_keep(counter, j + kk, L, key);
      dp[kk] = _mm256_mul_ps(dp[kk], keep);
      kept = _mm256_mul_ps(p[kk], keep);
    }
    dp[kk] = _mm256_mul_ps(p[kk], _mm256_sub_ps(dp[kk], d));  // now dS
    store_lanes(grad_bias_t + (j + kk) * L, dp[kk], valid);
    _mm256_storeu_ps(ds_rows + (j + kk) * L8, dp[kk]);
    _mm256_storeu_ps(kept_rows + (j + kk) * L8, kept);
  }
  #pragma GCC unroll 16
  for (int c = 0; c < HD; ++c)
    #pragma GCC unroll 4
    for (int kk = 0; kk < nk; ++kk)
      dq[c] = _mm256_fmadd_ps(_mm256_broadcast_ss(KP + (j + kk) * HD + c), dp[kk], dq[c]);
}

// out[c * cs + j] = factor * sum_i rows[c, i] by_key[j, i] for the HD rows ([HD, L8]) and the L
// keys ([L8, L8], rows past L zero): the key gradient (rows: queries, by_key: dS) and the value
// gradient (rows: output gradient, by_key: kept probabilities). Eight keys at a time, so that
// their sums are the lanes of one hsum8 and stay in registers (accumulating [L, HD] vectors in
// memory instead made the backward store-bound).
static void key_grads(const float* rows, const float* by_key, int64_t L, int64_t L8,
                      float factor, float* out, int64_t cs) {
  const __m256 f = _mm256_set1_ps(factor);
  for (int c = 0; c < HD; ++c) {
    const float* row = rows + c * L8;
    for (int64_t j = 0; j < L; j += LANES) {
      __m256 acc[LANES];
      #pragma GCC unroll 8
      for (int jj = 0; jj < LANES; ++jj) acc[jj] = _mm256_setzero_ps();
      for (int64_t i = 0; i < L8; i += LANES) {
        const __m256 r = _mm256_loadu_ps(row + i);
        #pragma GCC unroll 8
        for (int jj = 0; jj < LANES; ++jj)
          acc[jj] = _mm256_fmadd_ps(r, _mm256_loadu_ps(by_key + (j + jj) * L8 + i), acc[jj]);
      }
      const __m256 sums = _mm256_mul_ps(f, hsum8(acc, 1));
      store_lanes(out + c * cs + j, sums, L - j < LANES ? L - j : LANES);
    }
  }
}

// Backward for pairs g0 .. g1 - 1, same layouts as attention_forward; out is the forward's
// output. Its gradient grad_out has its own strides (go_hs, go_bs, go_cs, go_ts): autograd
// hands it over as the transpose of the output projection's input gradient. Writes
// grad_bias_t ([G, L, L] keys-first) and the q, k, v gradients, laid out like q, k and v.
// probs_t NULL: the probabilities are recomputed from q, k and bias_t.
int attention_backward(const float* q, const float* k, const float* v, int64_t B, int64_t hs,
                       int64_t bs, int64_t cs, const float* bias_t, const float* probs_t,
                       const float* out, const float* grad_out, int64_t go_hs, int64_t go_bs,
                       int64_t go_cs, int64_t go_ts, float* grad_bias_t, float* grad_q,
                       float* grad_k, float* grad_v, int64_t g0, int64_t g1, int64_t L,
                       float scale, uint32_t drop_levels, float keep_scale, uint64_t seed) {
  const int64_t L8 = (L + LANES - 1) / LANES * LANES;  // rows padded to whole vectors
  // block scores, packed keys and values, then queries and output gradient [HD, L8] and the
  // bias gradient and kept probabilities [L8, L8] of one pair, for key_grads
  float* scratch = (float*)malloc(
      (size_t)(L * LANES + 2 * L * HD + 2 * HD * L8 + 2 * L8 * L8) * sizeof(float));
  if (!scratch) return 1;
  float *KP = scratch + L * LANES, *VP = KP + L * HD, *QR = VP + L * HD, *GR = QR + HD * L8;
  float *DS = GR + HD * L8, *PK = DS + L8 * L8;
  // the padding keys' rows stay zero: key_grads then takes whole blocks of 8 keys
  memset(DS + L * L8, 0, (size_t)(L8 - L) * L8 * sizeof(float));
  memset(PK + L * L8, 0, (size_t)(L8 - L) * L8 * sizeof(float));
  const DropKey key = drop_key(seed, drop_levels);
  const __m256 ks = _mm256_set1_ps(drop_levels ? keep_scale : 1.0f);
  const __m256 scale_v = _mm256_set1_ps(scale);
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t at = pair_offset(g, B, hs, bs);
    const float *Q = q + at, *O = out + at, *BT = bias_t + g * L * L;
    pack_keys(k + at, cs, L, KP);
    pack_keys(v + at, cs, L, VP);
    const float* GO = grad_out + pair_offset(g, B, go_hs, go_bs);
    for (int64_t i0 = 0; i0 < L; i0 += LANES) {
      const int64_t valid = L - i0 < LANES ? L - i0 : LANES;
      const __m256i mask = lane_mask(valid);
      const float* P = probs_t ? probs_t + g * L * L + i0 : scratch;
      const int64_t p_stride = probs_t ? L : LANES;
      if (!probs_t) block_probs(Q, cs, KP, BT, L, i0, mask, scale, scratch);
      // D_i = sum_j P_ij dP_ij = dO_i . O_i; lanes past L are zero everywhere below
      __m256 go[HD], dq[HD], d = _mm256_setzero_ps();
      #pragma GCC unroll 16
      for (int c = 0; c < HD; ++c) {
        const __m256 g_c = load_lanes(GO + c * go_cs + i0 * go_ts, go_ts, mask);
        d = _mm256_fmadd_ps(g_c, _mm256_maskload_ps(O + c * cs + i0, mask), d);
        go[c] = _mm256_mul_ps(g_c, ks);
        _mm256_storeu_ps(GR + c * L8 + i0, go[c]);
        _mm256_storeu_ps(QR + c * L8 + i0, _mm256_maskload_ps(Q + c * cs + i0, mask));
        dq[c] = _mm256_setzero_ps();
      }
      const uint32_t counter = (uint32_t)(g * L * L + i0);
      float* grad_bias_block = grad_bias_t + g * L * L + i0;
      int64_t j = 0;
      for (; j + 4 <= L; j += 4)  // four keys at a time: see keys_backward
        keys_backward(4, j, P, p_stride, probs_t != NULL, KP, VP, go, d, dq, grad_bias_block, DS + i0, PK + i0,
                      L, L8, valid, mask, counter, &key, drop_levels);
      for (; j < L; ++j)
        keys_backward(1, j, P, p_stride, probs_t != NULL, KP, VP, go, d, dq, grad_bias_block, DS + i0, PK + i0,
                      L, L8, valid, mask, counter, &key, drop_levels);
      #pragma GCC unroll 16
      for (int c = 0; c < HD; ++c)
        store_lanes(grad_q + at + c * cs + i0, _mm256_mul_ps(dq[c], scale_v), valid);
    }
    key_grads(QR, DS, L, L8, scale, grad_k + at, cs);
    key_grads(GR, PK, L, L8, 1.0f, grad_v + at, cs);
  }
  free(scratch);
  return 0;
}

// The keep mask (1.0 kept, 0.0 dropped) of pairs 0 .. G - 1, [G, L, L] keys-first, as the two
// functions above draw it: for tests and for the reference path.
void attention_keep_mask(float* keep, int64_t G, int64_t L, uint32_t drop_levels,
                         uint64_t seed) {
  const DropKey key = drop_key(seed, drop_levels);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t j = 0; j < L; ++j)
      for (int64_t i0 = 0; i0 < L; i0 += LANES)
        store_lanes(keep + (g * L + j) * L + i0, key_keep((uint32_t)(g * L * L + i0), j, L, &key),
                    L - i0 < LANES ? L - i0 : LANES);
}
