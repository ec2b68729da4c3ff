#include "serialize/detail/container.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

#include "core/error.hpp"

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
    crc = static_cast<std::uint32_t>(::crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(piece)));
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

std::int64_t& write_fault() {
  static std::int64_t bytes = -1;
  return bytes;
}

}  // namespace

std::string section_name(const std::string& tag) {
  if (tag == "CONF") return "config";
  if (tag == "WGHT") return "weights";
  if (tag == "OPTM") return "optimizer state";
  if (tag == "META") return "metadata";
  return "'" + tag + "'";
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

Container read_container(std::string_view bytes, const std::string& source) {
  if (bytes.size() < kHeaderSize) {
    if (bytes.size() >= sizeof kMagic && std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
      corrupt(source, "not a kiln file (wrong magic bytes)");
    corrupt(source, "truncated: " + std::to_string(bytes.size()) + " bytes, shorter than kiln's " +
                        std::to_string(kHeaderSize) + "-byte header");
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) corrupt(source, "not a kiln file (wrong magic bytes)");
  if (crc_of(bytes.substr(0, 16)) != get_le(bytes, 16, 4)) corrupt(source, "damaged header (checksum mismatch at byte 16)");

  Container container;
  container.format_version = static_cast<std::uint32_t>(get_le(bytes, 8, 4));
  if (container.format_version > kFormatVersion)
    corrupt(source, "written by a newer kiln (file format " + std::to_string(container.format_version) +
                        "; this kiln reads formats up to " + std::to_string(kFormatVersion) + "): upgrade kiln to load it");
  if (container.format_version == 0) corrupt(source, "damaged header (file format 0)");
  const std::uint64_t count = get_le(bytes, 12, 4);
  if (count > kMaxSections) corrupt(source, "damaged header: " + std::to_string(count) + " sections");

  std::size_t offset = kHeaderSize;
  for (std::uint64_t index = 0; index < count; ++index) {
    const std::size_t remaining = bytes.size() - offset;
    const std::string where = "section " + std::to_string(index + 1) + " of " + std::to_string(count) + " (byte " +
                              std::to_string(offset) + ")";
    if (remaining < kSectionHeaderSize) corrupt(source, "truncated at " + where);
    Section section;
    section.tag = std::string(bytes.substr(offset, 4));
    const std::uint64_t length = get_le(bytes, offset + 4, 8);
    section.crc32 = static_cast<std::uint32_t>(get_le(bytes, offset + 12, 4));
    if (length > remaining - kSectionHeaderSize)
      corrupt(source, where + " claims " + std::to_string(length) + " bytes but only " +
                          std::to_string(remaining - kSectionHeaderSize) + " remain (truncated or damaged)");
    section.offset = offset + kSectionHeaderSize;
    section.payload = bytes.substr(section.offset, static_cast<std::size_t>(length));
    const std::uint32_t crc = crc_of(section.payload, crc_of(bytes.substr(offset, 12)));
    if (crc != section.crc32 || !printable_tag(section.tag))
      corrupt(source, where + " is damaged (checksum mismatch" +
                          (printable_tag(section.tag) ? " in the " + section_name(section.tag) + " section)" : ")"));
    if (container.find(section.tag)) corrupt(source, where + " repeats the " + section_name(section.tag) + " section");
    container.sections.push_back(section);
    offset = section.offset + section.payload.size();
  }
  if (offset != bytes.size())
    corrupt(source, std::to_string(bytes.size() - offset) + " unexpected bytes after the last section (byte " +
                        std::to_string(offset) + ")");
  return container;
}

std::string read_file(const std::string& path) {
  struct stat status {};
  if (::stat(path.c_str(), &status) != 0) throw SerializationError(path + ": cannot open (" + errno_text() + ")");
  if (S_ISDIR(status.st_mode)) throw SerializationError(path + ": is a folder, not a kiln file");
  if (!S_ISREG(status.st_mode)) throw SerializationError(path + ": is not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SerializationError(path + ": cannot open for reading (" + errno_text() + ")");
  std::string bytes(static_cast<std::size_t>(status.st_size), '\0');
  if (!in.read(bytes.data(), static_cast<std::streamsize>(bytes.size())) || in.peek() != std::char_traits<char>::eof())
    throw SerializationError(path + ": read failed (the file changed while it was read?)");
  return bytes;
}

void fail_next_write_after_for_testing(std::int64_t bytes) { write_fault() = bytes; }

namespace {

// The replaced file's permissions, or 0666 less the umask for a new one.
mode_t mode_for(const std::string& target) {
  struct stat existing {};
  if (::stat(target.c_str(), &existing) == 0) return existing.st_mode & 07777;
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return 0666 & ~mask;
}

// Owns the temporary file until it is renamed: on any failure the destructor removes it.
class TemporaryFile {
 public:
  explicit TemporaryFile(const std::string& target) : path_(target + ".tmp-XXXXXX") {
    fd_ = ::mkstemp(path_.data());
    if (fd_ < 0) throw SerializationError(target + ": cannot create a temporary file next to it (" + errno_text() + ")");
    ::fchmod(fd_, mode_for(target));  // mkstemp makes 0600; a saved model gets the usual permissions
  }
  ~TemporaryFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!renamed_) ::unlink(path_.c_str());
  }
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;

  void write_all(std::string_view bytes, const std::string& target) {
    std::int64_t& fault = write_fault();
    while (!bytes.empty()) {
      std::size_t piece = std::min<std::size_t>(bytes.size(), 1u << 24);
      if (fault >= 0 && static_cast<std::int64_t>(piece) > fault) piece = static_cast<std::size_t>(fault);
      if (fault == 0) {
        fault = -1;
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
  void commit(const std::string& target) {
    if (::fsync(fd_) != 0) fail(target, "fsync");
    if (::close(fd_) != 0) {
      fd_ = -1;
      fail(target, "close");
    }
    fd_ = -1;
    if (::rename(path_.c_str(), target.c_str()) != 0) fail(target, "rename");
    renamed_ = true;
  }

 private:
  [[noreturn]] void fail(const std::string& target, const char* step) {
    throw SerializationError(target + ": saving failed at " + step + " (" + errno_text() +
                             "); the previous file, if any, is unchanged");
  }
  std::string path_;
  int fd_ = -1;
  bool renamed_ = false;
};

std::string folder_of(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

void write_file_atomically(const std::string& path, std::string_view bytes) {
  TemporaryFile temporary(path);
  temporary.write_all(bytes, path);
  temporary.commit(path);
  // The rename is durable once the folder's entry is on disk too.
  const int folder = ::open(folder_of(path).c_str(), O_RDONLY | O_DIRECTORY);
  if (folder >= 0) {
    ::fsync(folder);
    ::close(folder);
  }
}

}  // namespace kiln::detail
