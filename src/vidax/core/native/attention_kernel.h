// Fused flash attention for the CPU backend: the body of one (batch, head) task.
//
// This header is compiled once per instruction set (attention_avx512.cpp, attention_avx2.cpp,
// attention_generic.cpp), each with its own compiler flags, vector width L and register tile rows MR,
// inside its own namespace; attention_ffi.cpp picks one at run time from the CPU's features.
//
// Algorithm (FlashAttention, Dao et al. 2022, Alg. 1, as a CPU loop nest): for one (b, h), K and V are
// packed once (K as 16-key panels, V as contiguous rows); then for each block of kQueryBlock queries,
// for each block of kKeyBlock keys: S = (q * scale) K^T in an MR x 16 register tile, the online
// softmax (running row max m and row sum l, rescaling the output rows by exp(m_old - m_new)), and
// O += P V in the same register tile. Scores never leave the cache; accumulation is float32.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "attention_problem.h"

namespace vidax_attention {
namespace VIDAX_ISA_NAMESPACE {

// The vector types are fixed per translation unit (GCC drops vector_size on template-dependent sizes).
typedef float V __attribute__((vector_size(VIDAX_LANES * 4)));
typedef float VU __attribute__((vector_size(VIDAX_LANES * 4), aligned(4)));
typedef int32_t VI __attribute__((vector_size(VIDAX_LANES * 4)));

struct Kernel {
  static constexpr int L = VIDAX_LANES;  // float lanes per vector
  static constexpr int MR = VIDAX_ROWS;  // query rows per register tile
  static constexpr int NV = kTileCols / L;  // vectors per tile row
  static_assert(kTileCols % L == 0, "tile width must be a whole number of vectors");
  static_assert(kQueryBlock % MR == 0, "query block must be a whole number of register tiles");

  static inline V load(const float* p) { return *reinterpret_cast<const VU*>(p); }
  static inline void store(float* p, V x) { *reinterpret_cast<VU*>(p) = x; }
  static inline V splat(float x) {  // one broadcast (the generic V{} + x adds 0.0f first)
#if defined(__AVX512F__) && VIDAX_LANES == 16
    return _mm512_set1_ps(x);
#elif defined(__AVX__) && VIDAX_LANES == 8
    return _mm256_set1_ps(x);
#else
    return V{} + x;
#endif
  }

  // exp(x) for x <= 0 (Cephes expf: 2^n * p(r), |r| <= ln2/2; relative error ~2 ulp). Inputs below
  // -87 are clamped there (exp(-87) ~ 1.6e-38 is below any sum it joins, masked keys are zeroed apart).
  static inline V vexp(V x) {
    x = x < splat(-87.0f) ? splat(-87.0f) : x;
    x = x > splat(88.0f) ? splat(88.0f) : x;
    const V magic = splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
    V n = (x * splat(1.44269504088896341f) + magic) - magic;
    V r = x - n * splat(0.693359375f);
    r = r - n * splat(-2.12194440e-4f);
    V p = splat(1.9875691500E-4f);
    p = p * r + splat(1.3981999507E-3f);
    p = p * r + splat(8.3334519073E-3f);
    p = p * r + splat(4.1665795894E-2f);
    p = p * r + splat(1.6666665459E-1f);
    p = p * r + splat(5.0000001201E-1f);
    V y = p * (r * r) + r + splat(1.0f);
    VI e = (__builtin_convertvector(n, VI) + 127) << 23;
    return y * reinterpret_cast<V&>(e);
  }

  // One MR x 16 register tile of C = A B (kAccumulate: C += A B) over depth n: A[r][j] at a[r * lda + j],
  // B[j][c] at b[j * ldb + c], C[r][c] at c[r * ldc + c]. Both matmuls of the attention are this tile:
  // S = Q Kpanel (B a 16-key panel, ldb 16) and O += P V (B 16 columns of V's rows, ldb Dp).
  template <bool kAccumulate>
  static inline void tile(const float* __restrict a, int64_t lda, int64_t n, const float* __restrict b, int64_t ldb,
                          float* __restrict c, int64_t ldc) {
    V acc[MR][NV];
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[r][j] = kAccumulate ? load(c + r * ldc + j * L) : V{};
    for (int64_t k = 0; k < n; ++k) {
      V bv[NV];
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) bv[j] = load(b + k * ldb + j * L);
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) {
        const V av = splat(a[r * lda + k]);
#pragma GCC unroll 4
        for (int j = 0; j < NV; ++j) acc[r][j] += av * bv[j];
      }
    }
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) store(c + r * ldc + j * L, acc[r][j]);
  }

  static void head(const Problem& pr, int64_t b, int64_t h, float* scratch) {
    const int64_t D = pr.head_dim, Dp = padded_dim(D), Sq = pr.q_len, Sk = pr.kv_len;
    const int64_t row = pr.heads * D;  // stride between tokens in (B, S, H, D)
    int64_t len = Sk;
    if (pr.kv_lengths != nullptr) len = std::clamp<int64_t>(pr.kv_lengths[b], 0, Sk);
    float* out = pr.out + b * Sq * row + h * D;
    if (len == 0) {  // no valid key: zeros, as the einsum reference gives
      for (int64_t i = 0; i < Sq; ++i) std::memset(out + i * row, 0, D * sizeof(float));
      return;
    }
    const int64_t panels = (len + kTileCols - 1) / kTileCols, keys = panels * kTileCols;
    Scratch sc = carve(scratch, pr);
    // K as panels (panel, d, 16 keys), keys past len zero; V as rows (key, Dp), rows past len zero.
    const float* kb = pr.k + b * Sk * row + h * D;
    const float* vb = pr.v + b * Sk * row + h * D;
    std::memset(sc.k, 0, panels * Dp * kTileCols * sizeof(float));
    std::memset(sc.v, 0, keys * Dp * sizeof(float));
    for (int64_t key = 0; key < len; ++key) {
      float* panel = sc.k + (key / kTileCols) * Dp * kTileCols + key % kTileCols;
      const float* src = kb + key * row;
      for (int64_t d = 0; d < D; ++d) panel[d * kTileCols] = src[d];
      std::memcpy(sc.v + key * Dp, vb + key * row, D * sizeof(float));
    }
    const float* qb = pr.q + b * Sq * row + h * D;
    for (int64_t q0 = 0; q0 < Sq; q0 += kQueryBlock) {
      const int64_t rows = std::min<int64_t>(kQueryBlock, Sq - q0);
      const int64_t tiles = (rows + MR - 1) / MR;
      std::memset(sc.q, 0, kQueryBlock * Dp * sizeof(float));
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t d = 0; d < D; ++d) sc.q[i * Dp + d] = qb[(q0 + i) * row + d] * pr.scale;
      std::memset(sc.o, 0, kQueryBlock * Dp * sizeof(float));
      for (int64_t i = 0; i < kQueryBlock; ++i) {
        sc.m[i] = -std::numeric_limits<float>::infinity();
        sc.l[i] = 0.0f;
      }
      for (int64_t k0 = 0; k0 < len; k0 += kKeyBlock) {
        const int64_t valid = std::min<int64_t>(kKeyBlock, len - k0);
        const int64_t cols = (valid + kTileCols - 1) / kTileCols * kTileCols;
        for (int64_t t = 0; t < tiles; ++t)
          for (int64_t c = 0; c < cols; c += kTileCols)
            tile<false>(sc.q + t * MR * Dp, Dp, Dp, sc.k + ((k0 + c) / kTileCols) * Dp * kTileCols, kTileCols,
                        sc.s + t * MR * kKeyBlock + c, kKeyBlock);
        for (int64_t i = 0; i < tiles * MR; ++i) {
          float* s = sc.s + i * kKeyBlock;
          for (int64_t c = valid; c < cols; ++c) s[c] = -std::numeric_limits<float>::infinity();
          V mv = splat(-std::numeric_limits<float>::infinity());
          for (int64_t c = 0; c < cols; c += L) {
            const V x = load(s + c);
            mv = x > mv ? x : mv;
          }
          float mx = mv[0];
          for (int j = 1; j < L; ++j) mx = std::max(mx, mv[j]);
          const float m_new = std::max(sc.m[i], mx);
          const float alpha = std::exp(sc.m[i] - m_new);  // 0 on the first block (m = -inf)
          const V mn = splat(m_new);
          for (int64_t c = 0; c < cols; c += L) store(s + c, vexp(load(s + c) - mn));
          for (int64_t c = valid; c < cols; ++c) s[c] = 0.0f;  // keys past the length weigh nothing
          V sum = V{};
          for (int64_t c = 0; c < cols; c += L) sum += load(s + c);
          float total = 0.0f;
          for (int j = 0; j < L; ++j) total += sum[j];
          sc.l[i] = sc.l[i] * alpha + total;
          sc.m[i] = m_new;
          if (alpha != 1.0f) {
            const V av = splat(alpha);
            float* o = sc.o + i * Dp;
            for (int64_t c = 0; c < Dp; c += L) store(o + c, load(o + c) * av);
          }
        }
        for (int64_t t = 0; t < tiles; ++t)
          for (int64_t c = 0; c < Dp; c += kTileCols)
            tile<true>(sc.s + t * MR * kKeyBlock, kKeyBlock, valid, sc.v + k0 * Dp + c, Dp, sc.o + t * MR * Dp + c, Dp);
      }
      for (int64_t i = 0; i < rows; ++i) {
        const float inv = 1.0f / sc.l[i];
        float* dst = out + (q0 + i) * row;
        const float* o = sc.o + i * Dp;
        for (int64_t d = 0; d < D; ++d) dst[d] = o[d] * inv;
      }
    }
  }
};

void attention_head(const Problem& pr, int64_t b, int64_t h, float* scratch) {
  Kernel::head(pr, b, h, scratch);
}

}  // namespace VIDAX_ISA_NAMESPACE
}  // namespace vidax_attention
