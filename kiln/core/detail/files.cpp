#include <kiln/core/detail/files.hpp>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <vector>

#include <kiln/core/error.hpp>

namespace kiln::detail {
namespace {

std::string errno_text() { return std::strerror(errno); }

// Linux follows at most 40 links in a path (ELOOP).
constexpr int kMaxLinks = 40;

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Closes a descriptor on every path out.
class Descriptor {
 public:
  explicit Descriptor(int fd) : fd_(fd) {}
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  int get() const { return fd_; }
  // Gives the descriptor up: it is no longer closed here.
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

}  // namespace

std::string folder_of(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string write_target(const std::string& path) {
  std::string target = path;
  for (int links = 0;; ++links) {
    struct stat status {};
    if (::lstat(target.c_str(), &status) != 0) {
      if (errno == ENOENT) return target;  // a new file (or a link's missing target): created there
      throw SerializationError(path + ": cannot save here (" + errno_text() + ")");
    }
    if (S_ISREG(status.st_mode)) return target;
    if (!S_ISLNK(status.st_mode))
      throw SerializationError(path + (target == path ? "" : " (through its links, " + target + ")") + ": is " +
                               kind_of(status.st_mode) + ", not a file kiln may replace; nothing was written");
    if (links == kMaxLinks) throw SerializationError(path + ": too many levels of symbolic links");
    std::vector<char> buffer(static_cast<std::size_t>(status.st_size > 0 ? status.st_size : 255) + 1);
    const ssize_t length = ::readlink(target.c_str(), buffer.data(), buffer.size());
    if (length < 0)
      throw SerializationError(path + ": cannot read the symbolic link " + target + " (" + errno_text() + ")");
    const std::string next(buffer.data(), static_cast<std::size_t>(length));
    // A relative link is relative to the folder that holds it.
    target = next.front() == '/' ? next : folder_of(target) + "/" + next;
  }
}

void check_file_size_limit(const std::string& path, std::uint64_t bytes) {
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_FSIZE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return;
  if (bytes > static_cast<std::uint64_t>(limit.rlim_cur))
    throw SerializationError(path + ": saving needs a file of " + std::to_string(bytes) +
                             " bytes, more than this process's file-size limit of " + std::to_string(limit.rlim_cur) +
                             " bytes (ulimit -f); the previous file, if any, is unchanged");
}

std::string read_whole_file(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading would wait for a writer; it is refused below instead.
  Descriptor file(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (file.get() < 0) {
    if (errno == ENOENT || errno == ENOTDIR) throw FileNotFoundError(path + ": no such file");
    throw SerializationError(path + ": cannot open (" + errno_text() + ")");
  }
  struct stat status {};
  if (::fstat(file.get(), &status) != 0) throw SerializationError(path + ": cannot read (" + errno_text() + ")");
  if (S_ISDIR(status.st_mode)) throw SerializationError(path + ": is a folder, not a file kiln reads");
  if (!S_ISREG(status.st_mode))
    throw SerializationError(path + ": is " + std::string(kind_of(status.st_mode)) + ", not a file kiln reads");
  if (static_cast<std::uint64_t>(status.st_size) > std::numeric_limits<std::size_t>::max() / 2)
    throw SerializationError(path + ": is too large to read (" + std::to_string(status.st_size) + " bytes)");
  std::string bytes(static_cast<std::size_t>(status.st_size), '\0');
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::read(file.get(), bytes.data() + done, bytes.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw SerializationError(path + ": read failed (" + errno_text() + ")");
    if (got == 0) break;  // shorter than fstat said: someone truncated it in place
    done += static_cast<std::size_t>(got);
  }
  // Read what the descriptor holds; a file truncated in place is then refused by the frame's checks.
  bytes.resize(done);
  return bytes;
}

ReadOnlyFile::ReadOnlyFile(const std::string& path) : path_(path) {
  // O_NONBLOCK: opening a FIFO for reading would wait for a writer; it is refused below instead.
  Descriptor file(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (file.get() < 0) {
    if (errno == ENOENT || errno == ENOTDIR) throw FileNotFoundError(path + ": no such file");
    throw SerializationError(path + ": cannot open (" + errno_text() + ")");
  }
  struct stat status {};
  if (::fstat(file.get(), &status) != 0) throw SerializationError(path + ": cannot read (" + errno_text() + ")");
  if (S_ISDIR(status.st_mode)) throw SerializationError(path + ": is a folder, not a file kiln reads");
  if (!S_ISREG(status.st_mode))
    throw SerializationError(path + ": is " + std::string(kind_of(status.st_mode)) + ", not a file kiln reads");
  size_ = static_cast<std::uint64_t>(status.st_size);
  // Reads may block from here on: a regular file never makes them wait long.
  const int flags = ::fcntl(file.get(), F_GETFL);
  if (flags >= 0) ::fcntl(file.get(), F_SETFL, flags & ~O_NONBLOCK);
  fd_ = file.release();
}

std::unique_ptr<ReadOnlyFile> ReadOnlyFile::adopt(int fd, const std::string& name) {
  Descriptor owned(fd);
  struct stat status {};
  if (fd < 0 || ::fstat(fd, &status) != 0 || !S_ISREG(status.st_mode))
    throw SerializationError(name + ": cannot read it back (" + errno_text() + ")");
  std::unique_ptr<ReadOnlyFile> file(new ReadOnlyFile());
  file->path_ = name;
  file->size_ = static_cast<std::uint64_t>(status.st_size);
  file->fd_ = owned.release();
  return file;
}

ReadOnlyFile::~ReadOnlyFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ReadOnlyFile::read(std::uint64_t offset, void* out, std::size_t bytes, const char* what) const {
  if (offset > size_ || bytes > size_ - offset)
    throw SerializationError(path_ + ": " + what + " of " + std::to_string(bytes) + " bytes at byte " +
                             std::to_string(offset) + " runs past the end of the file (" + std::to_string(size_) +
                             " bytes)");
  auto* target = static_cast<char*>(out);
  std::size_t done = 0;
  while (done < bytes) {
    const std::size_t chunk = std::min<std::size_t>(bytes - done, std::size_t{1} << 30);
    const ssize_t got = ::pread(fd_, target + done, chunk, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw SerializationError(path_ + ": read failed (" + errno_text() + ")");
    if (got == 0)
      throw SerializationError(path_ + ": ended at byte " + std::to_string(offset + done) + " while reading " + what +
                               " (the file was truncated while it was read)");
    done += static_cast<std::size_t>(got);
  }
}

std::string ReadOnlyFile::read_string(std::uint64_t offset, std::size_t bytes, const char* what) const {
  if (offset > size_ || bytes > size_ - offset) read(offset, nullptr, bytes, what);  // throws, naming it
  std::string text(bytes, '\0');
  read(offset, text.data(), bytes, what);
  return text;
}

}  // namespace kiln::detail
