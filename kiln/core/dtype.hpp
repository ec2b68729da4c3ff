#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln {

/// float32 trains; float64 is for gradient checks and reference numerics; int8 holds quantized weights (Keras's
/// int8 and int4 quantization), which ops that declare an int8 input read (input_dtype) and nothing computes.
enum class DType {
  float32,  ///< C++ float (4 bytes)
  float64,  ///< C++ double (8 bytes)
  int8      ///< std::int8_t (1 byte): quantized weights only
};

/// Bytes per element: 4, 8 or 1.
inline constexpr std::size_t dtype_size(DType dtype) {
  return dtype == DType::float32 ? 4 : dtype == DType::float64 ? 8 : 1;
}
/// "float32", "float64" or "int8", as configs and messages spell it (dtype_from_name reads it back).
inline const char* dtype_name(DType dtype) {
  return dtype == DType::float32 ? "float32" : dtype == DType::float64 ? "float64" : "int8";
}
/// Whether ops compute in this dtype (float32, float64): the dtypes of tensors, gradients and trained variables.
inline constexpr bool is_floating(DType dtype) { return dtype == DType::float32 || dtype == DType::float64; }
DType dtype_from_name(const std::string& name);  ///< throws ConfigError on an unknown name

/// The DType of C++ type T, as `dtype_of<T>::value`: float, double and std::int8_t have one.
template <class T>
struct dtype_of;
/// float is float32.
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::float32;  ///< float's DType
};
/// double is float64.
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::float64;  ///< double's DType
};
/// std::int8_t is int8.
template <>
struct dtype_of<std::int8_t> {
  static constexpr DType value = DType::int8;  ///< std::int8_t's DType
};

}  // namespace kiln
