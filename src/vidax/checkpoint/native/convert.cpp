// Host-side tensor conversion for checkpoint translation: transpose + dtype cast in one pass.
//
// A PyTorch nn.Linear weight is (out, in); our kernels are (in, out). NumPy transposes
// with a large-stride inner loop and converts bf16 element by element (~0.6 GB/s here);
// this kernel walks 32x32 tiles so reads and writes stay in cache, converting each
// element as it moves (fp32 -> bf16 rounds to nearest even, as ml_dtypes does).
// It releases the GIL, so callers parallelise over row ranges with Python threads.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace nb = nanobind;

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

enum class Kind { F32, F16, BF16 };

template <typename In, typename Load, typename Out, typename Store>
void transpose_tiles(const In* src, Load load, Out* dst, Store store, size_t rows, size_t cols, size_t lo, size_t hi) {
  constexpr size_t T = 32;
  for (size_t r0 = lo; r0 < hi; r0 += T) {
    const size_t r1 = r0 + T < hi ? r0 + T : hi;
    for (size_t c0 = 0; c0 < cols; c0 += T) {
      const size_t c1 = c0 + T < cols ? c0 + T : cols;
      for (size_t c = c0; c < c1; ++c)
        for (size_t r = r0; r < r1; ++r) dst[c * rows + r] = store(load(src[r * cols + c]));
    }
  }
}

template <typename Out, typename Store>
void dispatch_source(const void* s, Kind sk, Out* d, Store store, size_t rows, size_t cols, size_t lo, size_t hi) {
  switch (sk) {
    case Kind::F32:
      transpose_tiles(static_cast<const float*>(s), [](float v) { return v; }, d, store, rows, cols, lo, hi);
      break;
    case Kind::F16:
      transpose_tiles(static_cast<const uint16_t*>(s), f16_to_f32, d, store, rows, cols, lo, hi);
      break;
    case Kind::BF16:
      transpose_tiles(static_cast<const uint16_t*>(s), bf16_to_f32, d, store, rows, cols, lo, hi);
      break;
  }
}

Kind kind_of(const nb::dlpack::dtype& dt, const char* what) {
  if (dt == nb::dtype<float>()) return Kind::F32;
  if (dt.code == uint8_t(nb::dlpack::dtype_code::Float) && dt.bits == 16) return Kind::F16;
  if (dt.code == uint8_t(nb::dlpack::dtype_code::Bfloat) && dt.bits == 16) return Kind::BF16;
  if (dt.code == uint8_t(nb::dlpack::dtype_code::UInt) && dt.bits == 16) return Kind::BF16;  // bf16 passed as raw bits
  throw std::invalid_argument(std::string(what) + ": unsupported dtype (float32, float16, bfloat16 only)");
}

// dst[c, r] = cast(src[r, c]) for rows lo..hi of src.
void transpose_cast(nb::ndarray<nb::ro, nb::ndim<2>, nb::c_contig, nb::device::cpu> src, nb::ndarray<nb::ndim<2>, nb::c_contig, nb::device::cpu> dst,
                    size_t lo, size_t hi, bool dst_bf16) {
  const size_t rows = src.shape(0), cols = src.shape(1);
  if (dst.shape(0) != cols || dst.shape(1) != rows) throw std::invalid_argument("transpose_cast: dst must have shape (src.shape[1], src.shape[0])");
  if (hi > rows || lo > hi) throw std::invalid_argument("transpose_cast: row range out of bounds");
  const Kind sk = kind_of(src.dtype(), "transpose_cast source");
  const void* s = src.data();
  void* d = dst.data();
  const bool dst_f32 = dst.dtype() == nb::dtype<float>();
  if (!dst_f32 && !dst_bf16) throw std::invalid_argument("transpose_cast: destination must be float32 or bfloat16");
  nb::gil_scoped_release release;
  if (dst_f32)
    dispatch_source(s, sk, static_cast<float*>(d), [](float v) { return v; }, rows, cols, lo, hi);
  else
    dispatch_source(s, sk, static_cast<uint16_t*>(d), f32_to_bf16, rows, cols, lo, hi);
}

}  // namespace

NB_MODULE(_convert, m) {
  m.doc() = "Native host conversion for checkpoint translation (transpose + cast).";
  m.def("transpose_cast", &transpose_cast, nb::arg("src"), nb::arg("dst"), nb::arg("lo"), nb::arg("hi"), nb::arg("dst_bf16"),
        "dst[c, r] = cast(src[r, c]) for source rows lo..hi. src: (R, C) float32/float16/bfloat16(as uint16); "
        "dst: (C, R) float32, or uint16 holding bfloat16 bits when dst_bf16. Releases the GIL.");
}
