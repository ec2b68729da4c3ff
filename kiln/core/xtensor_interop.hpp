#pragma once
// Opt-in bridge between kiln::Array and xtensor. No other kiln header includes this one, so xtensor's
// compile cost is paid only by the files that ask for it.
#include <vector>

#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>

#include <kiln/core/array.hpp>

namespace kiln {

// A view of the array's memory as an xtensor expression (no copy). The array must outlive the view.
template <class T>
auto as_xarray(Array& array) {
  std::vector<std::size_t> shape(array.shape().dims().begin(), array.shape().dims().end());
  return xt::adapt(array.data<T>(), array.size(), xt::no_ownership(), shape);
}

// A copy of any xtensor expression as an Array of T's dtype.
template <class T, class Expression>
Array from_xtensor(const Expression& expression) {
  xt::xarray<T> values = expression;
  std::vector<std::int64_t> dims(values.shape().begin(), values.shape().end());
  Array array(Shape(dims), dtype_of<T>::value);
  std::copy(values.begin(), values.end(), array.data<T>());
  return array;
}

}  // namespace kiln
