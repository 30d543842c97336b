// dtype.h: the element types the ops take, and bfloat16 <-> float on the host.
// Plain C++ (no nanobind, no CUDA), so .cpp and .cu files can both include it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace gs {

enum class DType { f32, f64, bf16, i64 };

inline const char* dtype_name(DType d) {
  switch (d) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::bf16: return "bfloat16";
    case DType::i64: return "int64";
  }
  return "?";
}

// bfloat16 as its bit pattern: the top 16 bits of a float32.
struct bf16_t {
  uint16_t bits;
};

inline float bf16_to_float(bf16_t v) {
  uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Round to nearest, ties to even (what torch and __float2bfloat16 do); NaN stays a quiet NaN.
inline bf16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if (std::isnan(f)) return bf16_t{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16_t{static_cast<uint16_t>(u >> 16)};
}

// Load/store one element in its accumulation type: float for float32/bfloat16, double for
// float64 (float64 exists for gradcheck, so it must be computed in double).
template <typename T> struct acc_type { using type = float; };
template <> struct acc_type<double> { using type = double; };
template <typename T> using acc_t = typename acc_type<T>::type;

inline float load(const float* p) { return *p; }
inline double load(const double* p) { return *p; }
inline float load(const bf16_t* p) { return bf16_to_float(*p); }
inline void store(float* p, float v) { *p = v; }
inline void store(double* p, double v) { *p = v; }
inline void store(bf16_t* p, float v) { *p = float_to_bf16(v); }

}  // namespace gs
