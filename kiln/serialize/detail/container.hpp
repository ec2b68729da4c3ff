#pragma once
// The frame of every kiln file: magic bytes, a format version and a list of sections, each with its
// length and a CRC32. Everything here is checked against the real size of the file before any section is
// handed to a parser, so a length of 2^60 or a flipped byte is refused here, not by cereal.
//
//   offset  size  field
//        0     8  magic "\x89KILN\r\n\x1a" (the high bit and CR LF catch text-mode transfers, as PNG's do)
//        8     4  format version, little-endian
//       12     4  number of sections
//       16     4  CRC32 of bytes 0..15
//       20        sections, one after another:
//                   4  tag ("CONF", "WGHT", "OPTM", "META")
//                   8  payload length
//                   4  CRC32 of the tag, the length and the payload
//                   …  payload
// Nothing may follow the last section.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/core/detail/files.hpp>

namespace kiln::detail {

inline constexpr std::uint32_t kFormatVersion = 1;

struct Section {
  std::string tag;           // four ASCII characters
  std::string_view payload;  // points into the bytes it was read from (or the caller's data when writing)
  std::uint64_t offset = 0;  // of the payload in the file, when read
  std::uint32_t crc32 = 0;   // when read
};

// "CONF" -> "config", for messages.
std::string section_name(const std::string& tag);

std::string write_container(const std::vector<Section>& sections);

// True when `bytes` start with a kiln file's magic.
bool is_kiln_container(std::string_view bytes);

struct Container {
  std::uint32_t format_version = 0;
  std::vector<Section> sections;
  const Section* find(const std::string& tag) const;  // nullptr when absent
};
// Checks the frame and every checksum. SerializationError naming `source`, the section and the byte offset.
Container read_container(std::string_view bytes, const std::string& source);

// A section of a file, located but not read.
struct SectionIndex {
  std::string tag;
  std::uint64_t offset = 0;  // of the payload in the file
  std::uint64_t length = 0;  // of the payload
  std::uint32_t crc32 = 0;
};
struct ContainerIndex {
  std::uint32_t format_version = 0;
  std::vector<SectionIndex> sections;
  const SectionIndex* find(const std::string& tag) const;  // nullptr when absent
};
// read_container's checks (the frame, every section's checksum) on a file, read a chunk at a time: memory
// bounded whatever the file's size. Nothing a section holds is parsed.
ContainerIndex index_container(const ReadOnlyFile& file);
// A section's payload, read into memory; SerializationError when it is longer than `max_bytes`.
std::string read_section(const ReadOnlyFile& file, const SectionIndex& section, std::uint64_t max_bytes);

// Where written bytes go: a file being saved, a checksum, a string.
class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual void write(std::string_view bytes) = 0;
};

// A section of a kiln file being written: its tag, its payload's length, and what writes exactly that many
// bytes of payload to a sink. It is called twice: once for the checksum, once for the file.
struct SectionWriter {
  std::string tag;
  std::uint64_t length = 0;
  std::function<void(ByteSink&)> write;
};
// A kiln file of these sections at `path`, written atomically as write_file_atomically writes, streamed: the
// payloads are not copied into one buffer first, so a save of a model of any size takes no second copy of
// its weights. Error (a bug) when a section writes another length than it declared.
void write_container_file(const std::string& path, const std::vector<SectionWriter>& sections);

// Writes `bytes` to a temporary file in the target's folder, fsyncs it, renames it over the target and
// fsyncs the folder: if anything fails, the old file is still there, whole. The target is `path`, or the
// file its symbolic links end at (core/detail/files.hpp: a folder, device, FIFO or socket is refused).
// A save that would pass the process's file-size limit fails before writing. Temporary files that saves
// killed mid-way left for this target are removed first. SerializationError naming the path.
void write_file_atomically(const std::string& path, std::string_view bytes);

// The same, for a file a library writes itself at a path (libzip, libhdf5): `make(temporary)` writes the whole
// file at `temporary`, a path in the target's folder, which is then synced and renamed over the target as
// above. `size` is about the file's size, checked against the process's file-size limit first.
void write_file_atomically_at(const std::string& path, std::uint64_t size,
                              const std::function<void(const std::string& temporary)>& make);

// A file of scratch data next to `path`'s target, named as kiln's temporary files are: removed when this goes,
// or by a later save to the same target when its writer died (a .keras archive's weights file before it is
// zipped).
class ScratchFile {
 public:
  explicit ScratchFile(const std::string& path);
  ~ScratchFile();
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A file a library writes at temporary(), a path in the target's folder, that becomes `path` only when commit()
// syncs and renames it over the target (as write_file_atomically_at does); removed if this goes uncommitted.
// For saves of several files (a sharded weights index and its shards): each is staged whole and synced, and none
// replaces its target until all are written. The size is checked against the file-size limit first.
class StagedFile {
 public:
  StagedFile(const std::string& path, std::uint64_t size);
  ~StagedFile();
  StagedFile(const StagedFile&) = delete;
  StagedFile& operator=(const StagedFile&) = delete;
  const std::string& temporary() const;
  const std::string& path() const { return path_; }
  /// Flushes the written file to the disk, so that commit() only renames it. SerializationError naming the path.
  void sync();
  void commit();  ///< SerializationError naming the path; the target is then unchanged

 private:
  struct State;
  std::string path_;
  std::unique_ptr<State> state_;
};

// For tests: the next atomic write fails after writing this many bytes of its temporary file, as a full
// disk would. Negative (the default) disables it.
void fail_next_write_after_for_testing(std::int64_t bytes);
// For tests: the process kills itself (SIGKILL) after writing this many bytes of the next atomic write,
// as a crash or a power cut would stop it.
void kill_next_write_after_for_testing(std::int64_t bytes);

}  // namespace kiln::detail
