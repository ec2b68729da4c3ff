#pragma once
#include <cstddef>
#include <string>

namespace kiln {

/// float32 trains; float64 is for gradient checks and reference numerics.
enum class DType {
  float32,  ///< C++ float (4 bytes)
  float64   ///< C++ double (8 bytes)
};

/// Bytes per element: 4 or 8.
inline constexpr std::size_t dtype_size(DType dtype) { return dtype == DType::float32 ? 4 : 8; }
/// "float32" or "float64", as configs and messages spell it (dtype_from_name reads it back).
inline const char* dtype_name(DType dtype) { return dtype == DType::float32 ? "float32" : "float64"; }
DType dtype_from_name(const std::string& name);  ///< throws ConfigError on an unknown name

/// The DType of C++ type T, as `dtype_of<T>::value`; only float and double have one.
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

}  // namespace kiln
