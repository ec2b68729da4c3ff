#pragma once
// Zip archives (Keras's `.keras` files) through libzip, read from memory or from a file. Reading trusts
// nothing: the archive's consistency is checked (ZIP_CHECKCONS), entry names that could escape a folder are
// refused, every entry is read against a size limit as it decompresses (a zip bomb stops at the limit, not
// at its declared size), and its CRC is checked. Archives over 4 GiB (zip64 records) are read as any other.
//
// A large entry (a model's weights) need not come into memory: source() gives its bytes to a reader as they
// are asked for. A stored entry (Keras stores, it does not deflate) is read in place, after one pass that
// checks its CRC; a deflated one is inflated into a temporary file first.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <kiln/core/detail/files.hpp>
#include <kiln/serialize/detail/byte_source.hpp>

namespace kiln::detail {

class ZipReader {
 public:
  // Opens the archive in `bytes` (kept by reference: they must outlive the reader). SerializationError
  // naming `source` when it is not a zip archive, is inconsistent, or has an entry name with "..", a
  // leading "/" or a backslash.
  ZipReader(std::string_view bytes, std::string source);
  // A temporary's bytes would be gone before the reader reads them.
  ZipReader(std::string&& bytes, std::string source) = delete;
  // Opens the archive `file` holds (the file must outlive the reader and every source it gives).
  explicit ZipReader(const ReadOnlyFile& file);
  ~ZipReader();
  ZipReader(const ZipReader&) = delete;
  ZipReader& operator=(const ZipReader&) = delete;

  const std::vector<std::string>& names() const { return names_; }  // in archive order
  bool contains(const std::string& name) const;
  // The entry's bytes, decompressed and CRC-checked. SerializationError when it is absent, longer than
  // `limit` bytes, damaged, encrypted or compressed with a method other than store or deflate.
  std::string read(const std::string& name, std::uint64_t limit) const;
  // The entry's bytes as a source, read as they are asked for, its CRC checked first (one pass, nothing
  // kept). The errors of read().
  std::shared_ptr<const ByteSource> source(const std::string& name, std::uint64_t limit) const;
  // The entry's size, CRC-checked by reading it through (nothing kept).
  std::uint64_t check(const std::string& name, std::uint64_t limit) const;

  struct State;

 private:
  std::string source_;
  std::shared_ptr<State> state_;
  std::vector<std::string> names_;
};

// A zip archive of `entries` (name, bytes), stored uncompressed as Keras writes them, as bytes.
std::string write_zip(const std::vector<std::pair<std::string, std::string_view>>& entries);

// An entry of an archive being written: its name, and either its bytes or the file holding them.
struct ZipEntry {
  std::string name;
  std::string_view bytes;  // when `file` is empty
  std::string file;        // a file whose contents are the entry (a weights file written to disk first)
};
// The archive of `entries`, stored uncompressed as Keras writes them, written to the file `path` by libzip,
// which streams each entry from its source and adds zip64 records where sizes or offsets need them.
// SerializationError when libzip fails.
void write_zip_file(const std::string& path, const std::vector<ZipEntry>& entries);

}  // namespace kiln::detail
