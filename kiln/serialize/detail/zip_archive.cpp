#include <kiln/serialize/detail/zip_archive.hpp>

#include <unistd.h>
#include <zip.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>

#include <kiln/core/error.hpp>

namespace kiln::detail {

namespace {

std::string error_text(zip_error_t* error) {
  const char* text = zip_error_strerror(error);
  return text != nullptr ? text : "unknown zip error";
}

// Names a reader could be tricked by if it ever extracted them: absolute paths, parent references,
// Windows separators. Keras writes flat names ("config.json") and "assets/..." only.
bool hostile_name(const std::string& name) {
  if (name.empty() || name.front() == '/' || name.find('\\') != std::string::npos ||
      name.find('\0') != std::string::npos)
    return true;
  std::size_t start = 0;
  while (start <= name.size()) {
    const std::size_t slash = std::min(name.find('/', start), name.size());
    if (name.compare(start, slash - start, "..") == 0 && slash - start == 2) return true;
    start = slash + 1;
  }
  return false;
}

}  // namespace

struct ZipReader::State {
  zip_t* archive = nullptr;
  std::mutex mutex;  // libzip's archives are not thread-safe; readers of entries take turns
  ~State() {
    if (archive != nullptr) zip_discard(archive);
  }
};

namespace {

zip_t* open_archive(zip_source_t* zip_source, const std::string& source) {
  zip_error_t error;
  zip_error_init(&error);
  zip_t* archive = zip_open_from_source(zip_source, ZIP_RDONLY | ZIP_CHECKCONS, &error);
  if (archive == nullptr) {
    zip_source_free(zip_source);
    const std::string text = error_text(&error);
    zip_error_fini(&error);
    throw SerializationError(source + ": not a readable zip archive: " + text);
  }
  zip_error_fini(&error);
  return archive;
}

std::vector<std::string> entry_names(zip_t* archive, const std::string& source) {
  std::vector<std::string> names;
  const zip_int64_t count = zip_get_num_entries(archive, 0);
  for (zip_int64_t i = 0; i < count; ++i) {
    const char* name = zip_get_name(archive, static_cast<zip_uint64_t>(i), ZIP_FL_ENC_RAW);
    if (name == nullptr) continue;
    names.emplace_back(name);
    if (hostile_name(names.back()))
      throw SerializationError(source + ": the archive has an entry named '" + names.back() +
                               "', which could point outside a folder; refused");
  }
  return names;
}

// An entry found and checked: its index and its size (stored or deflated, not encrypted, within `limit`).
struct EntryInfo {
  zip_uint64_t index = 0;
  std::uint64_t size = 0;
  bool stored = false;
};

EntryInfo entry_info(zip_t* archive, const std::string& source, const std::string& name, std::uint64_t limit) {
  const std::string where = source + ": " + name;
  const zip_int64_t index = zip_name_locate(archive, name.c_str(), ZIP_FL_ENC_RAW);
  if (index < 0) throw SerializationError(source + ": the archive has no '" + name + "'");
  zip_stat_t stat;
  zip_stat_init(&stat);
  if (zip_stat_index(archive, static_cast<zip_uint64_t>(index), 0, &stat) != 0)
    throw SerializationError(where + ": " + error_text(zip_get_error(archive)));
  if ((stat.valid & ZIP_STAT_ENCRYPTION_METHOD) && stat.encryption_method != ZIP_EM_NONE)
    throw SerializationError(where + ": the entry is encrypted");
  if ((stat.valid & ZIP_STAT_COMP_METHOD) && stat.comp_method != ZIP_CM_STORE && stat.comp_method != ZIP_CM_DEFLATE)
    throw SerializationError(where + ": compression method " + std::to_string(stat.comp_method) +
                             " (kiln reads stored and deflated entries)");
  if ((stat.valid & ZIP_STAT_SIZE) && stat.size > limit)
    throw SerializationError(where + ": declares " + std::to_string(stat.size) + " bytes, more than the limit of " +
                             std::to_string(limit));
  EntryInfo info;
  info.index = static_cast<zip_uint64_t>(index);
  info.size = (stat.valid & ZIP_STAT_SIZE) ? stat.size : 0;
  info.stored = (stat.valid & ZIP_STAT_COMP_METHOD) && stat.comp_method == ZIP_CM_STORE &&
                (stat.valid & ZIP_STAT_SIZE);
  return info;
}

using EntryFile = std::unique_ptr<zip_file_t, int (*)(zip_file_t*)>;

EntryFile open_entry(zip_t* archive, zip_uint64_t index, const std::string& where) {
  EntryFile file(zip_fopen_index(archive, index, 0), zip_fclose);
  if (!file) throw SerializationError(where + ": " + error_text(zip_get_error(archive)));
  return file;
}

// Reads the entry through, decompressing and checking its CRC, handing each piece to `consume`. Reads in
// pieces rather than trusting the declared size: a zip bomb stops at `limit`.
template <class Consume>
std::uint64_t read_through(zip_t* archive, const EntryInfo& info, const std::string& where, std::uint64_t limit,
                           Consume&& consume) {
  EntryFile file = open_entry(archive, info.index, where);
  std::vector<char> piece(1 << 16);
  std::uint64_t total = 0;
  for (;;) {
    const zip_int64_t got = zip_fread(file.get(), piece.data(), piece.size());
    if (got < 0) throw SerializationError(where + ": damaged: " + error_text(zip_file_get_error(file.get())));
    if (got == 0) break;
    if (static_cast<std::uint64_t>(got) > limit - total)
      throw SerializationError(where + ": decompresses to more than the limit of " + std::to_string(limit) + " bytes");
    consume(piece.data(), static_cast<std::size_t>(got));
    total += static_cast<std::uint64_t>(got);
  }
  if (info.size != 0 && total != info.size)
    throw SerializationError(where + ": holds " + std::to_string(total) + " bytes, not the " +
                             std::to_string(info.size) + " it declares");
  return total;
}

// A stored entry read in place: libzip seeks within it, the archive's lock held.
class StoredEntrySource : public ByteSource {
 public:
  StoredEntrySource(std::shared_ptr<ZipReader::State> state, zip_uint64_t index, std::uint64_t size, std::string where)
      : state_(std::move(state)), size_(size), where_(std::move(where)), file_(nullptr, zip_fclose) {
    file_ = open_entry(state_->archive, index, where_);
  }
  std::uint64_t size() const override { return size_; }
  void read(std::uint64_t offset, void* out, std::size_t count) const override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (zip_fseek(file_.get(), static_cast<zip_int64_t>(offset), SEEK_SET) != 0)
      throw SerializationError(where_ + ": cannot seek to byte " + std::to_string(offset) + ": " +
                               error_text(zip_file_get_error(file_.get())));
    auto* target = static_cast<char*>(out);
    for (std::size_t done = 0; done < count;) {
      const zip_int64_t got = zip_fread(file_.get(), target + done, count - done);
      if (got <= 0)
        throw SerializationError(where_ + ": cannot read " + std::to_string(count) + " bytes at byte " +
                                 std::to_string(offset));
      done += static_cast<std::size_t>(got);
    }
  }

 private:
  std::shared_ptr<ZipReader::State> state_;
  std::uint64_t size_;
  std::string where_;
  EntryFile file_;
};

}  // namespace

ZipReader::ZipReader(std::string_view bytes, std::string source)
    : source_(std::move(source)), state_(std::make_shared<State>()) {
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* zip_source = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &error);
  if (zip_source == nullptr) {
    const std::string text = error_text(&error);
    zip_error_fini(&error);
    throw SerializationError(source_ + ": cannot read it as a zip archive: " + text);
  }
  zip_error_fini(&error);
  state_->archive = open_archive(zip_source, source_);
  names_ = entry_names(state_->archive, source_);
}

ZipReader::ZipReader(const ReadOnlyFile& file) : source_(file.path()), state_(std::make_shared<State>()) {
  // libzip reads through a stream of its own, on a copy of the descriptor (kiln's reads use pread, which
  // the stream's position does not disturb).
  const int copy = ::dup(file.descriptor());
  FILE* stream = copy >= 0 ? ::fdopen(copy, "rb") : nullptr;
  if (stream == nullptr) {
    if (copy >= 0) ::close(copy);
    throw SerializationError(source_ + ": cannot read it as a zip archive (" + std::strerror(errno) + ")");
  }
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* zip_source = zip_source_filep_create(stream, 0, -1, &error);
  if (zip_source == nullptr) {
    std::fclose(stream);
    const std::string text = error_text(&error);
    zip_error_fini(&error);
    throw SerializationError(source_ + ": cannot read it as a zip archive: " + text);
  }
  zip_error_fini(&error);
  state_->archive = open_archive(zip_source, source_);
  names_ = entry_names(state_->archive, source_);
}

ZipReader::~ZipReader() = default;

bool ZipReader::contains(const std::string& name) const {
  return std::find(names_.begin(), names_.end(), name) != names_.end();
}

std::string ZipReader::read(const std::string& name, std::uint64_t limit) const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  const EntryInfo info = entry_info(state_->archive, source_, name, limit);
  std::string bytes;
  read_through(state_->archive, info, source_ + ": " + name, limit,
               [&](const char* piece, std::size_t size) { bytes.append(piece, size); });
  return bytes;
}

std::uint64_t ZipReader::check(const std::string& name, std::uint64_t limit) const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  const EntryInfo info = entry_info(state_->archive, source_, name, limit);
  return read_through(state_->archive, info, source_ + ": " + name, limit, [](const char*, std::size_t) {});
}

std::shared_ptr<const ByteSource> ZipReader::source(const std::string& name, std::uint64_t limit) const {
  const std::string where = source_ + ": " + name;
  std::lock_guard<std::mutex> lock(state_->mutex);
  const EntryInfo info = entry_info(state_->archive, source_, name, limit);
  if (info.stored) {
    read_through(state_->archive, info, where, limit, [](const char*, std::size_t) {});  // the CRC, once
    return std::make_shared<StoredEntrySource>(state_, info.index, info.size, where);
  }
  // A deflated entry cannot be read in place: inflated into a temporary file, gone from its folder already.
  std::unique_ptr<FILE, int (*)(FILE*)> temporary(std::tmpfile(), std::fclose);
  if (!temporary) throw SerializationError(where + ": cannot make a temporary file to inflate it into");
  read_through(state_->archive, info, where, limit, [&](const char* piece, std::size_t size) {
    if (std::fwrite(piece, 1, size, temporary.get()) != size)
      throw SerializationError(where + ": cannot write the inflated entry to a temporary file");
  });
  if (std::fflush(temporary.get()) != 0)
    throw SerializationError(where + ": cannot write the inflated entry to a temporary file");
  return owned_file_source(ReadOnlyFile::adopt(::dup(::fileno(temporary.get())), where));
}

std::string write_zip(const std::vector<std::pair<std::string, std::string_view>>& entries) {
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* buffer = zip_source_buffer_create(nullptr, 0, 0, &error);
  if (buffer == nullptr) throw SerializationError("cannot make a zip archive: " + error_text(&error));
  zip_t* archive = zip_open_from_source(buffer, ZIP_TRUNCATE, &error);
  if (archive == nullptr) {
    zip_source_free(buffer);
    throw SerializationError("cannot make a zip archive: " + error_text(&error));
  }
  zip_source_keep(buffer);  // the bytes outlive zip_close
  auto fail = [&](const std::string& what) {
    const std::string text = error_text(zip_get_error(archive));
    zip_discard(archive);
    zip_source_free(buffer);
    throw SerializationError("cannot make a zip archive: " + what + ": " + text);
  };
  // Keras's zipfile writes 1980-01-01 00:00 for entries it makes from memory.
  std::tm stamp{};
  stamp.tm_year = 80, stamp.tm_mon = 0, stamp.tm_mday = 1, stamp.tm_isdst = -1;
  const std::time_t mtime = std::mktime(&stamp);
  for (const auto& [name, bytes] : entries) {
    zip_source_t* data = zip_source_buffer(archive, bytes.data(), bytes.size(), 0);
    if (data == nullptr) fail(name);
    const zip_int64_t index = zip_file_add(archive, name.c_str(), data, ZIP_FL_ENC_UTF_8);
    if (index < 0) {
      zip_source_free(data);
      fail(name);
    }
    if (zip_set_file_compression(archive, static_cast<zip_uint64_t>(index), ZIP_CM_STORE, 0) != 0 ||
        zip_file_set_mtime(archive, static_cast<zip_uint64_t>(index), mtime, 0) != 0)
      fail(name);
  }
  if (zip_close(archive) != 0) fail("closing");
  std::string out;
  if (zip_source_open(buffer) != 0 || zip_source_seek(buffer, 0, SEEK_END) != 0) {
    zip_source_free(buffer);
    throw SerializationError("cannot read back the zip archive made in memory");
  }
  const zip_int64_t size = zip_source_tell(buffer);
  out.resize(static_cast<std::size_t>(size > 0 ? size : 0));
  zip_source_seek(buffer, 0, SEEK_SET);
  const zip_int64_t got = out.empty() ? 0 : zip_source_read(buffer, out.data(), out.size());
  zip_source_close(buffer);
  zip_source_free(buffer);
  if (got != static_cast<zip_int64_t>(out.size()))
    throw SerializationError("cannot read back the zip archive made in memory");
  return out;
}

void write_zip_file(const std::string& path, const std::vector<ZipEntry>& entries) {
  int code = 0;
  zip_t* archive = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &code);
  if (archive == nullptr) {
    zip_error_t error;
    zip_error_init_with_code(&error, code);
    const std::string text = error_text(&error);
    zip_error_fini(&error);
    throw SerializationError(path + ": cannot make a zip archive: " + text);
  }
  auto fail = [&](const std::string& what) {
    const std::string text = error_text(zip_get_error(archive));
    zip_discard(archive);
    throw SerializationError(path + ": cannot make a zip archive: " + what + ": " + text);
  };
  // Keras's zipfile writes 1980-01-01 00:00 for entries it makes from memory.
  std::tm stamp{};
  stamp.tm_year = 80, stamp.tm_mon = 0, stamp.tm_mday = 1, stamp.tm_isdst = -1;
  const std::time_t mtime = std::mktime(&stamp);
  for (const ZipEntry& entry : entries) {
    zip_source_t* data = entry.file.empty() ? zip_source_buffer(archive, entry.bytes.data(), entry.bytes.size(), 0)
                                            : zip_source_file(archive, entry.file.c_str(), 0, -1);
    if (data == nullptr) fail(entry.name);
    const zip_int64_t index = zip_file_add(archive, entry.name.c_str(), data, ZIP_FL_ENC_UTF_8);
    if (index < 0) {
      zip_source_free(data);
      fail(entry.name);
    }
    if (zip_set_file_compression(archive, static_cast<zip_uint64_t>(index), ZIP_CM_STORE, 0) != 0 ||
        zip_file_set_mtime(archive, static_cast<zip_uint64_t>(index), mtime, 0) != 0)
      fail(entry.name);
  }
  if (zip_close(archive) != 0) fail("writing it");
}

}  // namespace kiln::detail
