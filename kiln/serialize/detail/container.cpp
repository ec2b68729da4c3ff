#include <kiln/serialize/detail/container.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>

#include <kiln/core/detail/files.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/rng.hpp>

namespace kiln::detail {
namespace {

constexpr char kMagic[8] = {'\x89', 'K', 'I', 'L', 'N', '\r', '\n', '\x1a'};
constexpr std::size_t kHeaderSize = 20;
constexpr std::size_t kSectionHeaderSize = 16;
constexpr std::uint32_t kMaxSections = 64;

std::uint32_t crc_of(std::string_view bytes, std::uint32_t crc = 0) {
  // zlib's crc32 takes a uInt length: feed large payloads in pieces.
  while (!bytes.empty()) {
    const std::size_t piece = std::min<std::size_t>(bytes.size(), 1u << 30);
    crc = static_cast<std::uint32_t>(
        ::crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(piece)));
    bytes.remove_prefix(piece);
  }
  return crc;
}

void put_u32(std::string& out, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}
std::uint64_t get_le(std::string_view bytes, std::size_t offset, int width) {
  std::uint64_t value = 0;
  for (int i = 0; i < width; ++i)
    value |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[offset + i])) << (8 * i);
  return value;
}

bool printable_tag(std::string_view tag) {
  for (char c : tag)
    if (c < 'A' || c > 'Z') return false;
  return true;
}

[[noreturn]] void corrupt(const std::string& source, const std::string& message) {
  throw SerializationError(source + ": " + message);
}

std::string errno_text() { return std::strerror(errno); }

struct WriteFault {
  std::int64_t bytes = -1;  // after this many bytes of the next atomic write; -1: none
  bool kill = false;        // SIGKILL instead of ENOSPC
};

WriteFault& write_fault() {
  static WriteFault fault;
  return fault;
}

}  // namespace

std::string section_name(const std::string& tag) {
  if (tag == "CONF") return "config";
  if (tag == "WGHT") return "weights";
  if (tag == "OPTM") return "optimizer state";
  if (tag == "META") return "metadata";
  return "'" + tag + "'";
}

bool is_kiln_container(std::string_view bytes) {
  return bytes.size() >= sizeof kMagic && std::memcmp(bytes.data(), kMagic, sizeof kMagic) == 0;
}

std::string write_container(const std::vector<Section>& sections) {
  std::size_t total = kHeaderSize;
  for (const Section& section : sections) total += kSectionHeaderSize + section.payload.size();
  std::string out;
  out.reserve(total);
  out.append(kMagic, sizeof kMagic);
  put_u32(out, kFormatVersion);
  put_u32(out, static_cast<std::uint32_t>(sections.size()));
  put_u32(out, crc_of(out));
  for (const Section& section : sections) {
    if (section.tag.size() != 4 || !printable_tag(section.tag))
      throw ValueError("section tags are four capital letters, not '" + section.tag + "'");
    const std::size_t start = out.size();
    out += section.tag;
    put_u64(out, section.payload.size());
    const std::uint32_t crc = crc_of(section.payload, crc_of(std::string_view(out).substr(start, 12)));
    put_u32(out, crc);
    out.append(section.payload.data(), section.payload.size());
  }
  return out;
}

const Section* Container::find(const std::string& tag) const {
  for (const Section& section : sections)
    if (section.tag == tag) return &section;
  return nullptr;
}

namespace {
const char* const kNotAModelFile =
    "not a model file kiln reads (its first bytes are neither kiln's, a zip archive's nor HDF5's): kiln reads "
    "its own .kiln files, Keras 3's .keras archives and Keras's HDF5 files (.h5, .weights.h5)";
}  // namespace

namespace {

// The frame's checks over any source of bytes: `fetch(offset, out, count)` reads from a string or a file,
// `size` is the source's length. Each section's checksum is computed a chunk at a time, so a file of any
// size is checked in bounded memory.
ContainerIndex index_with(const std::function<void(std::uint64_t, void*, std::size_t)>& fetch, std::uint64_t size,
                          const std::string& source) {
  char header[kHeaderSize];
  if (size < kHeaderSize) {
    fetch(0, header, static_cast<std::size_t>(size));
    if (size >= sizeof kMagic && std::memcmp(header, kMagic, sizeof kMagic) != 0) corrupt(source, kNotAModelFile);
    corrupt(source, "truncated: " + std::to_string(size) + " bytes, shorter than kiln's " +
                        std::to_string(kHeaderSize) + "-byte header");
  }
  fetch(0, header, kHeaderSize);
  const std::string_view head(header, kHeaderSize);
  if (std::memcmp(header, kMagic, sizeof kMagic) != 0) corrupt(source, kNotAModelFile);
  if (crc_of(head.substr(0, 16)) != get_le(head, 16, 4)) corrupt(source, "damaged header (checksum mismatch at byte 16)");

  ContainerIndex index;
  index.format_version = static_cast<std::uint32_t>(get_le(head, 8, 4));
  if (index.format_version > kFormatVersion)
    corrupt(source, "written by a newer kiln (file format " + std::to_string(index.format_version) +
                        "; this kiln reads formats up to " + std::to_string(kFormatVersion) +
                        "): upgrade kiln to load it");
  if (index.format_version == 0) corrupt(source, "damaged header (file format 0)");
  const std::uint64_t count = get_le(head, 12, 4);
  if (count > kMaxSections) corrupt(source, "damaged header: " + std::to_string(count) + " sections");

  std::vector<char> chunk;
  std::uint64_t offset = kHeaderSize;
  for (std::uint64_t number = 0; number < count; ++number) {
    const std::uint64_t remaining = size - offset;
    const std::string where = "section " + std::to_string(number + 1) + " of " + std::to_string(count) + " (byte " +
                              std::to_string(offset) + ")";
    if (remaining < kSectionHeaderSize) corrupt(source, "truncated at " + where);
    char frame[kSectionHeaderSize];
    fetch(offset, frame, kSectionHeaderSize);
    const std::string_view framed(frame, kSectionHeaderSize);
    SectionIndex section;
    section.tag = std::string(framed.substr(0, 4));
    section.length = get_le(framed, 4, 8);
    section.crc32 = static_cast<std::uint32_t>(get_le(framed, 12, 4));
    if (section.length > remaining - kSectionHeaderSize)
      corrupt(source, where + " claims " + std::to_string(section.length) + " bytes but only " +
                          std::to_string(remaining - kSectionHeaderSize) + " remain (truncated or damaged)");
    section.offset = offset + kSectionHeaderSize;
    std::uint32_t crc = crc_of(framed.substr(0, 12));
    chunk.resize(static_cast<std::size_t>(std::min<std::uint64_t>(section.length, 1u << 20)));
    for (std::uint64_t done = 0; done < section.length;) {
      const std::size_t piece = static_cast<std::size_t>(std::min<std::uint64_t>(section.length - done, chunk.size()));
      fetch(section.offset + done, chunk.data(), piece);
      crc = crc_of(std::string_view(chunk.data(), piece), crc);
      done += piece;
    }
    if (crc != section.crc32 || !printable_tag(section.tag))
      corrupt(source, where + " is damaged (checksum mismatch" +
                          (printable_tag(section.tag) ? " in the " + section_name(section.tag) + " section)" : ")"));
    if (index.find(section.tag)) corrupt(source, where + " repeats the " + section_name(section.tag) + " section");
    index.sections.push_back(section);
    offset = section.offset + section.length;
  }
  if (offset != size)
    corrupt(source, std::to_string(size - offset) + " unexpected bytes after the last section (byte " +
                        std::to_string(offset) + ")");
  return index;
}

}  // namespace

const SectionIndex* ContainerIndex::find(const std::string& tag) const {
  for (const SectionIndex& section : sections)
    if (section.tag == tag) return &section;
  return nullptr;
}

ContainerIndex index_container(const ReadOnlyFile& file) {
  return index_with([&](std::uint64_t offset, void* out, std::size_t count) { file.read(offset, out, count, "the frame"); },
                    file.size(), file.path());
}

std::string read_section(const ReadOnlyFile& file, const SectionIndex& section, std::uint64_t max_bytes) {
  if (section.length > max_bytes)
    throw SerializationError(file.path() + ": the " + section_name(section.tag) + " section is " +
                             std::to_string(section.length) + " bytes, more than kiln's limit of " +
                             std::to_string(max_bytes));
  return file.read_string(section.offset, static_cast<std::size_t>(section.length), "a section");
}

Container read_container(std::string_view bytes, const std::string& source) {
  const ContainerIndex index = index_with(
      [bytes](std::uint64_t offset, void* out, std::size_t count) { std::memcpy(out, bytes.data() + offset, count); },
      bytes.size(), source);
  Container container;
  container.format_version = index.format_version;
  for (const SectionIndex& section : index.sections)
    container.sections.push_back(
        {section.tag, bytes.substr(static_cast<std::size_t>(section.offset), static_cast<std::size_t>(section.length)),
         section.offset, section.crc32});
  return container;
}

void fail_next_write_after_for_testing(std::int64_t bytes) { write_fault() = WriteFault{bytes, false}; }
void kill_next_write_after_for_testing(std::int64_t bytes) { write_fault() = WriteFault{bytes, true}; }

namespace {

// The process's umask. Linux shows it in /proc/self/status; setting it to read it back (umask's only
// other way) would, for a moment, let another thread of the program create files without it.
mode_t current_umask() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("Umask:", 0) == 0) return static_cast<mode_t>(std::stoul(line.substr(6), nullptr, 8));
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return mask;
}

// The replaced file's permissions, or 0666 less the umask for a new one.
mode_t mode_for(const std::string& target) {
  struct stat existing {};
  if (::stat(target.c_str(), &existing) == 0) return existing.st_mode & 07777;
  return 0666 & ~current_umask();
}

std::string file_name_of(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// kiln's temporary files for `target` are ".kiln-tmp-<hash of its name>-<writer's pid>-XXXXXX" in its
// folder: short whatever the target's name (a 250-character name still saves), and telling which
// target and which process each belongs to.
std::string temporary_prefix(const std::string& target) {
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(stable_hash(file_name_of(target))));
  return ".kiln-tmp-" + std::string(hash) + "-";
}

// A save killed mid-way (SIGKILL, a power cut) leaves its temporary file behind. The next save to the same
// target removes those whose writer is no longer running; a live writer's (another thread or process
// saving the same target now) is left alone. Best effort: a file that cannot be removed stays.
void remove_stale_temporaries(const std::string& target) {
  const std::string folder = folder_of(target), prefix = temporary_prefix(target);
  DIR* entries = ::opendir(folder.c_str());
  if (entries == nullptr) return;
  while (const dirent* entry = ::readdir(entries)) {
    const std::string name = entry->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    long long pid = 0;
    const char* digits = name.c_str() + prefix.size();
    const auto [end, error] = std::from_chars(digits, name.c_str() + name.size(), pid);
    if (error != std::errc() || end == digits || *end != '-' || pid <= 0) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to ask)
    ::unlink((folder + "/" + name).c_str());
  }
  ::closedir(entries);
}

// Owns the temporary file until it is renamed: on any failure the destructor removes it.
class TemporaryFile {
 public:
  explicit TemporaryFile(const std::string& target)
      : path_(folder_of(target) + "/" + temporary_prefix(target) + std::to_string(::getpid()) + "-XXXXXX") {
    fd_ = ::mkstemp(path_.data());
    if (fd_ < 0)
      throw SerializationError(target + ": cannot create a temporary file next to it (" + errno_text() + ")");
    ::fchmod(fd_, mode_for(target));  // mkstemp makes 0600; a saved model gets the usual permissions
  }
  ~TemporaryFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!renamed_) ::unlink(path_.c_str());
  }
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;

  void write_all(std::string_view bytes, const std::string& target) {
    std::int64_t& fault = write_fault().bytes;
    while (!bytes.empty()) {
      std::size_t piece = std::min<std::size_t>(bytes.size(), 1u << 24);
      if (fault >= 0 && static_cast<std::int64_t>(piece) > fault) piece = static_cast<std::size_t>(fault);
      if (fault == 0) {
        fault = -1;
        if (write_fault().kill) ::raise(SIGKILL);
        errno = ENOSPC;
        fail(target, "write");
      }
      const ssize_t written = ::write(fd_, bytes.data(), piece);
      if (written < 0) {
        if (errno == EINTR) continue;
        fail(target, "write");
      }
      if (fault >= 0) fault -= written;
      bytes.remove_prefix(static_cast<std::size_t>(written));
    }
  }
  const std::string& path() const { return path_; }
  // Lets go of the descriptor: a library writes the file at path() itself.
  void close_descriptor() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // commit() for a file a library wrote at path() (perhaps replacing the one made here): synced through a
  // descriptor of its own, then renamed.
  void commit_written(const std::string& target, const std::string& path) {
    close_descriptor();
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail(path, "open");
    ::fchmod(fd_, mode_for(target));
    commit(target, path);
  }
  // `target` is where the file goes (a link's target); `path` what the caller named, for messages.
  void commit(const std::string& target, const std::string& path) {
    if (::fsync(fd_) != 0) fail(path, "fsync");
    if (::close(fd_) != 0) {
      fd_ = -1;
      fail(path, "close");
    }
    fd_ = -1;
    if (::rename(path_.c_str(), target.c_str()) != 0) fail(path, "rename");
    renamed_ = true;
  }

  // The file stays when this goes (a ScratchFile removes it itself).
  void keep() { renamed_ = true; }

 private:
  [[noreturn]] void fail(const std::string& target, const char* step) {
    throw SerializationError(target + ": saving failed at " + step + " (" + errno_text() +
                             "); the previous file, if any, is unchanged");
  }

  std::string path_;
  int fd_ = -1;
  bool renamed_ = false;
};

}  // namespace

namespace {

// The bytes written to it, counted and checksummed.
class CrcSink : public ByteSink {
 public:
  void write(std::string_view bytes) override {
    crc = crc_of(bytes, crc);
    count += bytes.size();
  }
  std::uint32_t crc = 0;
  std::uint64_t count = 0;
};

// The bytes go to the temporary file, through a buffer so that small headers do not each make a write.
class TemporarySink : public ByteSink {
 public:
  TemporarySink(TemporaryFile& file, const std::string& path) : file_(file), path_(path) {}
  ~TemporarySink() override = default;
  void write(std::string_view bytes) override {
    count += bytes.size();
    if (bytes.size() >= kBuffer) {
      flush();
      file_.write_all(bytes, path_);
      return;
    }
    if (buffer_.size() + bytes.size() > kBuffer) flush();
    buffer_.append(bytes.data(), bytes.size());
  }
  void flush() {
    file_.write_all(buffer_, path_);
    buffer_.clear();
  }
  std::uint64_t count = 0;

 private:
  static constexpr std::size_t kBuffer = std::size_t{1} << 20;
  TemporaryFile& file_;
  const std::string& path_;
  std::string buffer_;
};

// The rename is durable once the folder's entry is on disk too. A folder that cannot be synced (some network
// and FUSE file systems) still holds the new file; only its survival of a power cut is unsure.
void sync_folder(const std::string& target) {
  const int folder = ::open(folder_of(target).c_str(), O_RDONLY | O_DIRECTORY);
  if (folder >= 0) {
    ::fsync(folder);
    ::close(folder);
  }
}

// Creates the temporary file, lets `write` fill it through a sink, and renames it over the target.
void write_atomically(const std::string& path, std::uint64_t size, const std::function<void(ByteSink&)>& write) {
  const std::string target = write_target(path);
  check_file_size_limit(path, size);
  remove_stale_temporaries(target);
  TemporaryFile temporary(target);
  {
    TemporarySink sink(temporary, path);
    write(sink);
    sink.flush();
    if (sink.count != size)
      throw Error(path + ": the save wrote " + std::to_string(sink.count) + " bytes where it declared " +
                  std::to_string(size));
  }
  temporary.commit(target, path);
  sync_folder(target);
}

}  // namespace

void write_file_atomically(const std::string& path, std::string_view bytes) {
  write_atomically(path, bytes.size(), [&](ByteSink& sink) { sink.write(bytes); });
}

void write_file_atomically_at(const std::string& path, std::uint64_t size,
                              const std::function<void(const std::string& temporary)>& make) {
  const std::string target = write_target(path);
  check_file_size_limit(path, size);
  remove_stale_temporaries(target);
  TemporaryFile temporary(target);
  temporary.close_descriptor();
  make(temporary.path());
  temporary.commit_written(target, path);
  sync_folder(target);
}

struct StagedFile::State {
  explicit State(const std::string& target) : target(target), file(target) {}
  std::string target;
  TemporaryFile file;
};

StagedFile::StagedFile(const std::string& path, std::uint64_t size) : path_(path) {
  const std::string target = write_target(path);
  check_file_size_limit(path, size);
  remove_stale_temporaries(target);
  state_ = std::make_unique<State>(target);
  state_->file.close_descriptor();
}

StagedFile::~StagedFile() = default;

const std::string& StagedFile::temporary() const { return state_->file.path(); }

void StagedFile::sync() {
  const int fd = ::open(temporary().c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw SerializationError(path_ + ": saving failed at open (" + errno_text() + "); nothing was replaced");
  const bool synced = ::fsync(fd) == 0;
  const std::string error = synced ? std::string() : errno_text();
  ::close(fd);
  if (!synced) throw SerializationError(path_ + ": saving failed at fsync (" + error + "); nothing was replaced");
}

void StagedFile::commit() {
  state_->file.commit_written(state_->target, path_);
  sync_folder(state_->target);
}

ScratchFile::ScratchFile(const std::string& path) {
  const std::string target = write_target(path);
  TemporaryFile file(target);
  path_ = file.path();
  file.close_descriptor();
  file.keep();
}

ScratchFile::~ScratchFile() { ::unlink(path_.c_str()); }

void write_container_file(const std::string& path, const std::vector<SectionWriter>& sections) {
  std::string header;
  header.append(kMagic, sizeof kMagic);
  put_u32(header, kFormatVersion);
  put_u32(header, static_cast<std::uint32_t>(sections.size()));
  put_u32(header, crc_of(header));
  std::uint64_t total = header.size();
  std::vector<std::string> frames;
  for (const SectionWriter& section : sections) {
    if (section.tag.size() != 4 || !printable_tag(section.tag))
      throw ValueError("section tags are four capital letters, not '" + section.tag + "'");
    std::string frame = section.tag;
    put_u64(frame, section.length);
    CrcSink payload;
    payload.crc = crc_of(frame);
    section.write(payload);
    if (payload.count != section.length)
      throw Error(path + ": the " + section_name(section.tag) + " section wrote " + std::to_string(payload.count) +
                  " bytes where it declared " + std::to_string(section.length));
    put_u32(frame, payload.crc);
    total += frame.size() + section.length;
    frames.push_back(std::move(frame));
  }
  write_atomically(path, total, [&](ByteSink& sink) {
    sink.write(header);
    for (std::size_t i = 0; i < sections.size(); ++i) {
      sink.write(frames[i]);
      sections[i].write(sink);
    }
  });
}

}  // namespace kiln::detail
