// Host-side tensor conversion for checkpoint translation: transpose + dtype cast in one pass.
//
// A PyTorch nn.Linear weight is (out, in) and a convolution kernel (out, in, *kernel); ours are
// (in, out) and (*kernel, in, out) (convert.h). NumPy transposes with a large-stride inner loop
// and converts bf16 element by element (~0.6 GB/s here). The portable kernel below walks 32x32
// tiles so reads and writes stay in cache, converting each element as it moves (fp32 -> bf16
// rounds to nearest even, as ml_dtypes does); on x86 with AVX2 the kernel of convert_avx2.cpp
// is chosen at run time. Both release the GIL, so callers parallelise over row ranges with
// Python threads.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "convert.h"

namespace nb = nanobind;

namespace vidax_convert {
namespace {

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40u);  // NaN stays a quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  return uint16_t(bits >> 16);
}

inline float bf16_to_f32(uint16_t b) {
  uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

template <typename In, typename Out, typename Load, typename Store>
void tiles(const Transpose& t, Load load, Store store, size_t r_lo, size_t r_hi, size_t c_lo, size_t c_hi) {
  constexpr size_t T = 32;
  const In* src = static_cast<const In*>(t.src);
  Out* dst = static_cast<Out*>(t.dst);
  for (size_t r0 = r_lo; r0 < r_hi; r0 += T) {
    const size_t r1 = r0 + T < r_hi ? r0 + T : r_hi;
    for (size_t c0 = c_lo; c0 < c_hi; c0 += T) {
      const size_t c1 = c0 + T < c_hi ? c0 + T : c_hi;
      for (size_t c = c0; c < c1; ++c) {
        Out* row = dst + t.dst_row(c) * t.rows;
        for (size_t r = r0; r < r1; ++r) row[r] = store(load(src[r * t.cols + c]));
      }
    }
  }
}

template <typename Out, typename Store>
void from_source(const Transpose& t, Store store, size_t r_lo, size_t r_hi, size_t c_lo, size_t c_hi) {
  switch (t.src_kind) {
    case Kind::F32:
      tiles<float, Out>(t, [](float v) { return v; }, store, r_lo, r_hi, c_lo, c_hi);
      break;
    case Kind::F16:
      tiles<uint16_t, Out>(t, f16_to_f32, store, r_lo, r_hi, c_lo, c_hi);
      break;
    case Kind::BF16:
      tiles<uint16_t, Out>(t, bf16_to_f32, store, r_lo, r_hi, c_lo, c_hi);
      break;
  }
}

}  // namespace

void transpose_portable(const Transpose& t, size_t r_lo, size_t r_hi, size_t c_lo, size_t c_hi) {
  if (t.dst_bf16)
    from_source<uint16_t>(t, f32_to_bf16, r_lo, r_hi, c_lo, c_hi);
  else
    from_source<float>(t, [](float v) { return v; }, r_lo, r_hi, c_lo, c_hi);
}

namespace {

bool has_avx2() {
#if defined(VIDAX_X86)
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return yes;
#else
  return false;
#endif
}

Kind kind_of(const nb::dlpack::dtype& dt, const char* what) {
  if (dt == nb::dtype<float>()) return Kind::F32;
  if (dt.code == uint8_t(nb::dlpack::dtype_code::Float) && dt.bits == 16) return Kind::F16;
  if (dt.code == uint8_t(nb::dlpack::dtype_code::Bfloat) && dt.bits == 16) return Kind::BF16;
  if (dt.code == uint8_t(nb::dlpack::dtype_code::UInt) && dt.bits == 16) return Kind::BF16;  // bf16 passed as raw bits
  throw std::invalid_argument(std::string(what) + ": unsupported dtype (float32, float16, bfloat16 only)");
}

// dst[row(c), r] = cast(src[r, c]) for rows lo..hi of src (row(c) as in convert.h).
void transpose_cast(nb::ndarray<nb::ro, nb::ndim<2>, nb::c_contig, nb::device::cpu> src, nb::ndarray<nb::ndim<2>, nb::c_contig, nb::device::cpu> dst,
                    size_t lo, size_t hi, bool dst_bf16, size_t volume, bool simd) {
  const size_t rows = src.shape(0), cols = src.shape(1);
  if (dst.shape(0) != cols || dst.shape(1) != rows) throw std::invalid_argument("transpose_cast: dst must have shape (src.shape[1], src.shape[0])");
  if (hi > rows || lo > hi) throw std::invalid_argument("transpose_cast: row range out of bounds");
  if (volume == 0 || cols % volume != 0) throw std::invalid_argument("transpose_cast: volume must divide src.shape[1]");
  const bool dst_f32 = dst.dtype() == nb::dtype<float>();
  if (!dst_f32 && !dst_bf16) throw std::invalid_argument("transpose_cast: destination must be float32 or bfloat16");
  const Transpose t{src.data(), dst.data(), kind_of(src.dtype(), "transpose_cast source"), dst_bf16, rows, cols, volume, lo, hi};
  nb::gil_scoped_release release;
#if defined(VIDAX_X86)
  if (simd && has_avx2()) return transpose_avx2(t);
#endif
  transpose_portable(t, lo, hi, 0, cols);
}

}  // namespace
}  // namespace vidax_convert

NB_MODULE(_convert, m) {
  m.doc() = "Native host conversion for checkpoint translation (transpose + cast).";
  m.def("transpose_cast", &vidax_convert::transpose_cast, nb::arg("src"), nb::arg("dst"), nb::arg("lo"), nb::arg("hi"),
        nb::arg("dst_bf16"), nb::arg("volume") = 1, nb::arg("simd") = true,
        "dst[row(c), r] = cast(src[r, c]) for source rows lo..hi, row(c) = (c % volume) * (C / volume) + c // volume "
        "(volume 1: a plain transpose; a conv kernel (O, I, *K) viewed as (O, I * volume) lands as (*K, I, O)). "
        "src: (R, C) float32/float16/bfloat16(as uint16); dst: (C, R) float32, or uint16 holding bfloat16 bits when "
        "dst_bf16. simd=False forces the portable kernel. Releases the GIL.");
  m.def("isa", [] { return vidax_convert::has_avx2() ? "avx2" : "portable"; },
        "The kernel transpose_cast uses when simd is true: 'avx2' or 'portable'.");
}
