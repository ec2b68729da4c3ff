#include <kiln/core/shape.hpp>

#include <algorithm>
#include <sstream>

#include <kiln/core/error.hpp>

namespace kiln {

ShapeError::ShapeError(const std::string& who, const std::string& what,
                       const std::vector<std::pair<std::string, Shape>>& shapes)
    : Error([&] {
        std::string message = who + ": " + what;
        if (!shapes.empty()) {
          message += " (";
          for (std::size_t i = 0; i < shapes.size(); ++i) {
            if (i > 0) message += ", ";
            message += shapes[i].first + "=" + shapes[i].second.to_string();
          }
          message += ")";
        }
        return message;
      }()) {}

std::int64_t Shape::dim(int axis) const { return dims_[static_cast<std::size_t>(normalize_axis(axis, "Shape::dim"))]; }

int Shape::normalize_axis(int axis, const std::string& who) const {
  const int normalized = axis < 0 ? axis + rank() : axis;
  if (normalized < 0 || normalized >= rank()) {
    throw ShapeError(who + ": axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank()) +
                     " shape " + to_string());
  }
  return normalized;
}

bool Shape::is_fully_defined() const {
  for (std::int64_t d : dims_)
    if (d == unknown) return false;
  return true;
}

std::int64_t Shape::num_elements() const {
  std::int64_t count = 1;
  for (std::int64_t d : dims_) {
    if (d == unknown) throw ShapeError("shape " + to_string() + " has an unknown dimension");
    if (d < 0 || __builtin_mul_overflow(count, d, &count) || count > (std::int64_t{1} << 60))
      throw ShapeError("shape " + to_string() + " has more elements than any array can hold");
  }
  return count;
}

bool Shape::accepts(const Shape& given, int from_axis) const {
  if (given.rank() != rank()) return false;
  for (int axis = from_axis; axis < rank(); ++axis)
    if ((*this)[axis] != unknown && (*this)[axis] != given[axis]) return false;
  return true;
}

Shape Shape::with_batch(std::int64_t batch_size) const {
  Shape result = *this;
  for (std::int64_t& d : result.dims_)
    if (d == unknown) d = batch_size;
  return result;
}

std::string Shape::to_string() const {
  std::ostringstream out;
  out << '(';
  for (std::size_t i = 0; i < dims_.size(); ++i) {
    if (i > 0) out << ", ";
    if (dims_[i] == unknown)
      out << "None";
    else
      out << dims_[i];
  }
  if (dims_.size() == 1) out << ',';
  out << ')';
  return out.str();
}

std::optional<Shape> try_broadcast_shapes(const Shape& a, const Shape& b) {
  const int rank = std::max(a.rank(), b.rank());
  std::vector<std::int64_t> dims(static_cast<std::size_t>(rank));
  for (int i = 0; i < rank; ++i) {
    const int ia = a.rank() - rank + i;
    const int ib = b.rank() - rank + i;
    const std::int64_t da = ia >= 0 ? a[ia] : 1;
    const std::int64_t db = ib >= 0 ? b[ib] : 1;
    std::int64_t d;
    if (da == db || db == 1)
      d = da;
    else if (da == 1)
      d = db;
    else
      return std::nullopt;  // an unknown (batch) dimension matches only itself or 1
    dims[static_cast<std::size_t>(i)] = d;
  }
  return Shape(std::move(dims));
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const std::string& who) {
  if (auto shape = try_broadcast_shapes(a, b)) return *shape;
  throw ShapeError(who, "shapes cannot be broadcast together: " + a.to_string() + " and " + b.to_string(), {});
}

}  // namespace kiln
