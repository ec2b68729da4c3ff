#pragma once
// Internal: a CSV file read one row at a time (data/csv.cpp), for Dataset::from_csv: the same options,
// header detection, column choice and error messages as read_csv, with the file never held in memory.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <kiln/data/data.hpp>

namespace kiln::detail {

class CsvStream {
 public:
  /// Opens `path` and reads its header (if any). Throws as read_csv does.
  CsvStream(const std::string& path, const CsvOptions& options);
  ~CsvStream();
  CsvStream(const CsvStream&) = delete;
  CsvStream& operator=(const CsvStream&) = delete;

  /// Values per row: the chosen columns, then the label columns.
  std::size_t width() const;
  /// Their names, in that order.
  const std::vector<std::string>& names() const;
  /// The next row's width() values into `values`; false at the end of the file. ValueError naming the
  /// file and line for a row of another field count or a field that is not a number.
  bool next(double* values);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace kiln::detail
