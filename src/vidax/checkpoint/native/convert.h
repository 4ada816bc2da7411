// One transpose-cast job of checkpoint translation, shared by the portable kernel (convert.cpp)
// and the AVX2 one (convert_avx2.cpp, compiled with -mavx2 -mf16c and chosen at run time).
//
// The source is a PyTorch tensor viewed as a (rows, cols) matrix: an nn.Linear weight (out, in),
// or a convolution kernel (out, in, *kernel) viewed as (out, in * volume). The destination is our
// layout, (cols, rows) as a matrix: for a linear weight (in, out), for a kernel (*kernel, in, out).
// Source column c = i * volume + k goes to destination row k * in + i (volume 1: row c), so one
// kernel moves both: every destination row is a run of `rows` contiguous elements.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vidax_convert {

enum class Kind { F32, F16, BF16 };

struct Transpose {
  const void* src;
  void* dst;
  Kind src_kind;
  bool dst_bf16;  // destination float32, or bfloat16 bits (round to nearest even)
  size_t rows, cols;
  size_t volume;  // kernel volume (1 for a linear weight); cols % volume == 0
  size_t lo, hi;  // source rows of this job

  // Destination row of source column c.
  size_t dst_row(size_t c) const { return (c % volume) * (cols / volume) + c / volume; }
};

// Scalar: source rows [r_lo, r_hi) x columns [c_lo, c_hi), in cache-sized tiles.
void transpose_portable(const Transpose& t, size_t r_lo, size_t r_hi, size_t c_lo, size_t c_hi);

// The whole job with AVX2 (8 x 8 register transposes, non-temporal stores where aligned),
// the ragged edges through transpose_portable. Only call where the CPU has AVX2 and F16C.
void transpose_avx2(const Transpose& t);

}  // namespace vidax_convert
