#pragma once
#include <cstddef>
#include <string>

namespace kiln {

/// float32 trains; float64 is for gradient checks and reference numerics.
enum class DType { float32, float64 };

inline constexpr std::size_t dtype_size(DType dtype) { return dtype == DType::float32 ? 4 : 8; }
inline const char* dtype_name(DType dtype) { return dtype == DType::float32 ? "float32" : "float64"; }
DType dtype_from_name(const std::string& name);  ///< throws ConfigError on an unknown name

template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::float32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::float64;
};

}  // namespace kiln
