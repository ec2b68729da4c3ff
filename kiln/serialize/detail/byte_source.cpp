#include <kiln/serialize/detail/byte_source.hpp>

#include <cstring>
#include <utility>

#include <kiln/core/error.hpp>

namespace kiln::detail {
namespace {

class MemorySource : public ByteSource {
 public:
  explicit MemorySource(std::string bytes) : bytes_(std::move(bytes)) {}
  std::uint64_t size() const override { return bytes_.size(); }
  void read(std::uint64_t offset, void* out, std::size_t count) const override {
    if (count > 0) std::memcpy(out, bytes_.data() + offset, count);
  }
  const char* bytes() const override { return bytes_.data(); }

 private:
  std::string bytes_;
};

class FileRegionSource : public ByteSource {
 public:
  FileRegionSource(const ReadOnlyFile& file, std::uint64_t offset, std::uint64_t length)
      : file_(file), offset_(offset), length_(length) {}
  std::uint64_t size() const override { return length_; }
  void read(std::uint64_t offset, void* out, std::size_t count) const override {
    file_.read(offset_ + offset, out, count, "data");
  }

 private:
  const ReadOnlyFile& file_;
  std::uint64_t offset_, length_;
};

class OwnedFileSource : public ByteSource {
 public:
  explicit OwnedFileSource(std::unique_ptr<ReadOnlyFile> file) : file_(std::move(file)) {}
  std::uint64_t size() const override { return file_->size(); }
  void read(std::uint64_t offset, void* out, std::size_t count) const override {
    file_->read(offset, out, count, "data");
  }

 private:
  std::unique_ptr<ReadOnlyFile> file_;
};

}  // namespace

std::shared_ptr<const ByteSource> memory_source(std::string bytes) {
  return std::make_shared<MemorySource>(std::move(bytes));
}

std::shared_ptr<const ByteSource> file_source(const ReadOnlyFile& file, std::uint64_t offset, std::uint64_t length) {
  if (offset > file.size() || length > file.size() - offset)
    throw SerializationError(file.path() + ": a region of " + std::to_string(length) + " bytes at byte " +
                             std::to_string(offset) + " runs past the end of the file");
  return std::make_shared<FileRegionSource>(file, offset, length);
}

std::shared_ptr<const ByteSource> owned_file_source(std::unique_ptr<ReadOnlyFile> file) {
  return std::make_shared<OwnedFileSource>(std::move(file));
}

}  // namespace kiln::detail
