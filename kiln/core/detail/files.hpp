#pragma once
// Internal: what every writer of a user's file checks first (model saves, weights, checkpoints,
// CSVLogger), and how readers open a file once. Errors are SerializationError naming the path.
#include <cstdint>
#include <memory>
#include <string>

namespace kiln::detail {

// Where a write to `path` lands: `path` itself, or the file its chain of symbolic links ends at (which
// need not exist yet), so that saving through a link writes the link's target and keeps the link.
// SerializationError when that is a folder, a device, a FIFO or a socket (nothing is written to it), or
// when the links loop.
std::string write_target(const std::string& path);

// SerializationError when a file of `bytes` bytes at `path` would pass this process's file-size limit
// (ulimit -f), which the kernel enforces by killing the writer with SIGXFSZ.
void check_file_size_limit(const std::string& path, std::uint64_t bytes);

// The folder holding `path` ("." for a bare name).
std::string folder_of(const std::string& path);

// The whole file, read through one descriptor: a file renamed over `path` meanwhile (an atomic save)
// leaves this read with the old file, whole. SerializationError naming the path when it cannot be read,
// is a folder or is not a regular file (a FIFO is refused without blocking).
std::string read_whole_file(const std::string& path);

// A file opened once for reading at offsets (pread), for readers that must not hold a whole file in memory:
// a model of 150M parameters is read into its weights as they are, not through a second copy. Opening checks
// what read_whole_file checks (FileNotFoundError for a missing file; SerializationError for a folder, a FIFO,
// a device). The size is taken when it opens; a file renamed over `path` meanwhile (an atomic save) leaves
// this one reading the old file, whole, and a file truncated in place is a SerializationError at the first
// read past its new end, never a crash.
class ReadOnlyFile {
 public:
  explicit ReadOnlyFile(const std::string& path);
  // Takes over `fd`, a descriptor of a regular file open for reading, named `name` in messages.
  static std::unique_ptr<ReadOnlyFile> adopt(int fd, const std::string& name);
  ~ReadOnlyFile();
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;

  const std::string& path() const { return path_; }
  std::uint64_t size() const { return size_; }
  int descriptor() const { return fd_; }
  // `bytes` bytes at `offset` into `out`. SerializationError naming the path (and `what`) when they are not
  // all inside the file.
  void read(std::uint64_t offset, void* out, std::size_t bytes, const char* what = "data") const;
  // The same, into a new string.
  std::string read_string(std::uint64_t offset, std::size_t bytes, const char* what = "data") const;

 private:
  ReadOnlyFile() = default;
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

}  // namespace kiln::detail
