// Pieces shared by the AVX2 kernels: partial vectors and the dropout keep mask.
//
// The keep mask is a hash of each element's index (a 32-bit counter) and a 64-bit seed, so a
// kernel draws it again in backward instead of storing it, and the same seed gives the same
// mask whatever the threads or the blocking. An element is kept where 16 bits of its hash are
// at least drop_levels (the drop probability in 65,536ths): both 16-bit halves of a hash, one
// per element (keep_16), so one hash serves two elements.
#ifndef GRAPHORMER_SEPNORM_AVX2_COMMON_H
#define GRAPHORMER_SEPNORM_AVX2_COMMON_H

#include <immintrin.h>
#include <stdint.h>

#define LANES 8

// Lanes below `valid` set: the last block of queries may be partial.
static inline __m256i lane_mask(int64_t valid) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)valid),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Stores the first `valid` lanes of v at p: a full block as one plain store, since AMD's masked
// stores (vmaskmovps) are microcoded and cost more than a block's arithmetic (measured); only
// the partial last block of a row pays for one.
static inline void store_lanes(float* p, __m256 v, int64_t valid) {
  if (valid == LANES)
    _mm256_storeu_ps(p, v);
  else
    _mm256_maskstore_ps(p, lane_mask(valid), v);
}

// A bijective 32-bit mixer (Wellons' lowbias32): consecutive counters give independent bits.
static inline __m256i mix32(__m256i x) {
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x21f0aaad));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x735a2d97));
  return _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
}

typedef struct {
  uint32_t key0, key1;
  __m256i threshold;  // drop_levels - 1: keep where the top 16 hash bits exceed it
} DropKey;

static DropKey drop_key(uint64_t seed, uint32_t drop_levels) {
  DropKey k = {(uint32_t)seed, (uint32_t)(seed >> 32), _mm256_set1_epi32((int)drop_levels - 1)};
  return k;
}

// The hashes of counters counter .. counter + 7, one lane each.
static inline __m256i hash_lanes(uint32_t counter, const DropKey* k) {
  __m256i c = _mm256_add_epi32(_mm256_set1_epi32((int)(counter + k->key0)),
                               _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  return mix32(_mm256_xor_si256(mix32(c), _mm256_set1_epi32((int)k->key1)));
}

// 1.0 in the lanes whose 16 random bits (in 0 .. 65535) clear the drop threshold, else 0.0.
static inline __m256 kept(__m256i bits, const DropKey* k) {
  return _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(bits, k->threshold)),
                       _mm256_set1_ps(1.0f));
}

// Keep masks of 16 elements from one hash vector (counters counter .. counter + 7): the top 16
// bits of lane n decide element n of *first, the low 16 bits element n of *second.
static inline void keep_16(uint32_t counter, const DropKey* k, __m256* first, __m256* second) {
  const __m256i h = hash_lanes(counter, k);
  *first = kept(_mm256_srli_epi32(h, 16), k);
  *second = kept(_mm256_and_si256(h, _mm256_set1_epi32(0xffff)), k);
}

#endif
