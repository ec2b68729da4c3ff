#pragma once
// Zip archives (Keras's `.keras` files) in memory, through libzip. Reading trusts nothing: the archive's
// consistency is checked (ZIP_CHECKCONS), entry names that could escape a folder are refused, every entry
// is read against a size limit as it decompresses (a zip bomb stops at the limit, not at its declared size),
// and its CRC is checked at the end.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::detail {

class ZipReader {
 public:
  // Opens the archive in `bytes` (kept by reference: they must outlive the reader). SerializationError
  // naming `source` when it is not a zip archive, is inconsistent, or has an entry name with "..", a
  // leading "/" or a backslash.
  ZipReader(std::string_view bytes, std::string source);
  // A temporary's bytes would be gone before the reader reads them.
  ZipReader(std::string&& bytes, std::string source) = delete;
  ~ZipReader();
  ZipReader(const ZipReader&) = delete;
  ZipReader& operator=(const ZipReader&) = delete;

  const std::vector<std::string>& names() const { return names_; }  // in archive order
  bool contains(const std::string& name) const;
  // The entry's bytes, decompressed and CRC-checked. SerializationError when it is absent, longer than
  // `limit` bytes, damaged, encrypted or compressed with a method other than store or deflate.
  std::string read(const std::string& name, std::uint64_t limit) const;

 private:
  std::string source_;
  void* archive_ = nullptr;  // zip_t
  std::vector<std::string> names_;
};

// A zip archive of `entries` (name, bytes), stored uncompressed as Keras writes them, as bytes.
std::string write_zip(const std::vector<std::pair<std::string, std::string_view>>& entries);

}  // namespace kiln::detail
