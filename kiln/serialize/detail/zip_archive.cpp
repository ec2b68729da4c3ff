#include <kiln/serialize/detail/zip_archive.hpp>

#include <zip.h>

#include <algorithm>
#include <ctime>
#include <memory>

#include <kiln/core/error.hpp>

namespace kiln::detail {

namespace {

std::string error_text(zip_error_t* error) {
  const char* text = zip_error_strerror(error);
  return text != nullptr ? text : "unknown zip error";
}

zip_t* archive_of(void* archive) { return static_cast<zip_t*>(archive); }

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

ZipReader::ZipReader(std::string_view bytes, std::string source) : source_(std::move(source)) {
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* zip_source = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &error);
  if (zip_source == nullptr) {
    const std::string text = error_text(&error);
    zip_error_fini(&error);
    throw SerializationError(source_ + ": cannot read it as a zip archive: " + text);
  }
  zip_t* archive = zip_open_from_source(zip_source, ZIP_RDONLY | ZIP_CHECKCONS, &error);
  if (archive == nullptr) {
    zip_source_free(zip_source);
    const std::string text = error_text(&error);
    zip_error_fini(&error);
    throw SerializationError(source_ + ": not a readable zip archive: " + text);
  }
  zip_error_fini(&error);
  archive_ = archive;
  const zip_int64_t count = zip_get_num_entries(archive, 0);
  for (zip_int64_t i = 0; i < count; ++i) {
    const char* name = zip_get_name(archive, static_cast<zip_uint64_t>(i), ZIP_FL_ENC_RAW);
    if (name == nullptr) continue;
    names_.emplace_back(name);
    if (hostile_name(names_.back())) {
      const std::string bad = names_.back();
      zip_discard(archive);
      archive_ = nullptr;
      throw SerializationError(source_ + ": the archive has an entry named '" + bad +
                               "', which could point outside a folder; refused");
    }
  }
}

ZipReader::~ZipReader() {
  if (archive_ != nullptr) zip_discard(archive_of(archive_));
}

bool ZipReader::contains(const std::string& name) const {
  return std::find(names_.begin(), names_.end(), name) != names_.end();
}

std::string ZipReader::read(const std::string& name, std::uint64_t limit) const {
  zip_t* archive = archive_of(archive_);
  const std::string where = source_ + ": " + name;
  const zip_int64_t index = zip_name_locate(archive, name.c_str(), ZIP_FL_ENC_RAW);
  if (index < 0) throw SerializationError(source_ + ": the archive has no '" + name + "'");
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
  std::unique_ptr<zip_file_t, int (*)(zip_file_t*)> file(zip_fopen_index(archive, static_cast<zip_uint64_t>(index), 0),
                                                         zip_fclose);
  if (!file) throw SerializationError(where + ": " + error_text(zip_get_error(archive)));
  // Read in pieces rather than trusting the declared size: the buffer grows only with real data.
  std::string bytes;
  char piece[1 << 16];
  for (;;) {
    const zip_int64_t got = zip_fread(file.get(), piece, sizeof piece);
    if (got < 0) throw SerializationError(where + ": damaged: " + error_text(zip_file_get_error(file.get())));
    if (got == 0) break;
    if (static_cast<std::uint64_t>(got) > limit - bytes.size())
      throw SerializationError(where + ": decompresses to more than the limit of " + std::to_string(limit) + " bytes");
    bytes.append(piece, static_cast<std::size_t>(got));
  }
  if ((stat.valid & ZIP_STAT_SIZE) && bytes.size() != stat.size)
    throw SerializationError(where + ": holds " + std::to_string(bytes.size()) + " bytes, not the " +
                             std::to_string(stat.size) + " it declares");
  return bytes;
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

}  // namespace kiln::detail
