#pragma once
// Where a reader's bytes come from: a string in memory, a region of a file read as needed, or an archive's
// entry. kiln's HDF5 reader reads Keras's weights through one, so a weights file of any size is read a
// structure, or a dataset, at a time, never whole.
#include <cstdint>
#include <memory>
#include <string>

#include <kiln/core/detail/files.hpp>

namespace kiln::detail {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual std::uint64_t size() const = 0;
  // `count` bytes at `offset` (the caller checked they lie inside) into `out`. SerializationError when the
  // underlying file cannot give them. Safe to call from several threads.
  virtual void read(std::uint64_t offset, void* out, std::size_t count) const = 0;
  // The bytes, when they are all in memory; nullptr otherwise.
  virtual const char* bytes() const { return nullptr; }
};

// A source over bytes held in memory.
std::shared_ptr<const ByteSource> memory_source(std::string bytes);
// A source over `length` bytes of `file` at `offset` (an archive's stored entry, or the whole file).
// SerializationError when the region is not inside the file. The file must outlive the source and every
// reader made from it.
std::shared_ptr<const ByteSource> file_source(const ReadOnlyFile& file, std::uint64_t offset, std::uint64_t length);
// A source over a file of its own, which it keeps open and which is removed from its folder already (an
// inflated archive entry in a temporary file).
std::shared_ptr<const ByteSource> owned_file_source(std::unique_ptr<ReadOnlyFile> file);

}  // namespace kiln::detail
