// The fused CPU attention's problem description and per-worker scratch layout, shared by the
// per-instruction-set kernels (attention_kernel.h) and the XLA FFI handler (attention_ffi.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace vidax_attention {

constexpr int64_t kQueryBlock = 48;  // query rows per block (a multiple of every kernel's MR)
constexpr int64_t kKeyBlock = 256;   // keys per online-softmax step: 48 x 256 scores stay in L1/L2
constexpr int64_t kTileCols = 16;    // keys (QK^T) or output columns (PV) per register tile

// softmax(q k^T * scale) v for q (B, Sq, H, D), k and v (B, Sk, H, D), out (B, Sq, H, D), all float32
// and contiguous; keys at or past kv_lengths[b] (if given) are ignored, a sample with none gives zeros.
struct Problem {
  const float* q;
  const float* k;
  const float* v;
  float* out;
  const int32_t* kv_lengths;  // (B,) or nullptr
  int64_t batch, q_len, kv_len, heads, head_dim;
  float scale;
};

inline int64_t padded_dim(int64_t d) { return (d + kTileCols - 1) / kTileCols * kTileCols; }

struct Scratch {
  float *k, *v, *q, *o, *s, *m, *l;
};

// Floats of scratch one worker needs (packed K and V of one head, one query block's Q, O and scores).
inline size_t scratch_floats(const Problem& p) {
  const int64_t dp = padded_dim(p.head_dim);
  const int64_t keys = (p.kv_len + kTileCols - 1) / kTileCols * kTileCols;
  return size_t(2 * keys * dp + 2 * kQueryBlock * dp + kQueryBlock * kKeyBlock + 2 * kQueryBlock) + 64;
}

inline Scratch carve(float* base, const Problem& p) {
  const int64_t dp = padded_dim(p.head_dim);
  const int64_t keys = (p.kv_len + kTileCols - 1) / kTileCols * kTileCols;
  Scratch s;
  s.k = base;
  s.v = s.k + keys * dp;
  s.q = s.v + keys * dp;
  s.o = s.q + kQueryBlock * dp;
  s.s = s.o + kQueryBlock * dp;
  s.m = s.s + kQueryBlock * kKeyBlock;
  s.l = s.m + kQueryBlock;
  return s;
}

// One (batch, head) of the problem, per instruction set (each defined in its own translation unit).
namespace avx512 { void attention_head(const Problem& p, int64_t b, int64_t h, float* scratch); }
namespace avx2 { void attention_head(const Problem& p, int64_t b, int64_t h, float* scratch); }
namespace generic { void attention_head(const Problem& p, int64_t b, int64_t h, float* scratch); }

}  // namespace vidax_attention
