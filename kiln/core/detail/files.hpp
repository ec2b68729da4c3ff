#pragma once
// Internal: what every writer of a user's file checks first (model saves, weights, checkpoints,
// CSVLogger), and how readers open a file once. Errors are SerializationError naming the path.
#include <cstdint>
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

}  // namespace kiln::detail
