// Zip archives through libzip: what Keras's .keras files are. Reading refuses names that could escape a
// folder, entries past a size limit (a zip bomb stops at the limit, not at its declared size) and damage.
#include <catch2/catch.hpp>

#include <zip.h>

#include <string>
#include <utility>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/serialize/detail/zip_archive.hpp>

using kiln::detail::write_zip;
using kiln::detail::ZipReader;

namespace {

// An archive made by libzip directly: entries named freely, deflated or stored.
std::string make_archive(const std::vector<std::pair<std::string, std::string>>& entries, bool deflate) {
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* buffer = zip_source_buffer_create(nullptr, 0, 0, &error);
  zip_t* archive = zip_open_from_source(buffer, ZIP_TRUNCATE, &error);
  REQUIRE(archive != nullptr);
  zip_source_keep(buffer);
  for (const auto& [name, bytes] : entries) {
    zip_source_t* data = zip_source_buffer(archive, bytes.data(), bytes.size(), 0);
    const zip_int64_t index = zip_file_add(archive, name.c_str(), data, ZIP_FL_ENC_UTF_8);
    REQUIRE(index >= 0);
    REQUIRE(zip_set_file_compression(archive, static_cast<zip_uint64_t>(index), deflate ? ZIP_CM_DEFLATE : ZIP_CM_STORE,
                                     9) == 0);
  }
  REQUIRE(zip_close(archive) == 0);
  REQUIRE(zip_source_open(buffer) == 0);
  zip_source_seek(buffer, 0, SEEK_END);
  std::string out(static_cast<std::size_t>(zip_source_tell(buffer)), '\0');
  zip_source_seek(buffer, 0, SEEK_SET);
  REQUIRE(zip_source_read(buffer, out.data(), out.size()) == static_cast<zip_int64_t>(out.size()));
  zip_source_close(buffer);
  zip_source_free(buffer);
  zip_error_fini(&error);
  return out;
}

}  // namespace

TEST_CASE("zip: write_zip's stored entries read back whole, as Keras's .keras layout", "[serialize][zip]") {
  const std::string weights(100000, '\x42');
  const std::string archive =
      write_zip({{"metadata.json", "{}"}, {"config.json", "{\"a\": 1}"}, {"model.weights.h5", weights}});
  CHECK(archive.compare(0, 4, "PK\x03\x04") == 0);
  const ZipReader reader(archive, "m.keras");
  CHECK(reader.names() == std::vector<std::string>{"metadata.json", "config.json", "model.weights.h5"});
  CHECK(reader.contains("config.json"));
  CHECK_FALSE(reader.contains("assets"));
  CHECK(reader.read("config.json", 100) == "{\"a\": 1}");
  CHECK(reader.read("model.weights.h5", 1 << 20) == weights);
  // Stored, as Keras writes them: the archive is barely larger than its entries.
  CHECK(archive.size() < weights.size() + 400);
  CHECK_THROWS_WITH(reader.read("absent.json", 100), Catch::Contains("m.keras: the archive has no 'absent.json'"));
  // Deflated entries (what a zip tool repacking the file makes) read the same.
  const std::string deflated_archive =
      make_archive({{"config.json", "{\"a\": 1}"}, {"model.weights.h5", weights}}, true);
  const ZipReader deflated(deflated_archive, "deflated.keras");
  CHECK(deflated.read("model.weights.h5", 1 << 20) == weights);
}

TEST_CASE("zip: names that could escape a folder are refused", "[serialize][zip]") {
  for (const char* name : {"../config.json", "assets/../../x", "/etc/passwd", "a\\b", ".."}) {
    INFO(name);
    const std::string archive = make_archive({{"config.json", "{}"}, {name, "x"}}, false);
    CHECK_THROWS_AS(ZipReader(archive, "evil.keras"), kiln::SerializationError);
    CHECK_THROWS_WITH(ZipReader(archive, "evil.keras"), Catch::Contains("could point outside a folder"));
  }
  const std::string fine = make_archive({{"assets/..x/y", "x"}, {"a..b", "y"}}, false);
  CHECK_NOTHROW(ZipReader(fine, "fine.keras"));
}

TEST_CASE("zip: a zip bomb stops at the limit, damaged archives are refused, never a crash", "[serialize][zip]") {
  // 64 MiB of zeros deflate to about 64 KiB: read with a 1 MiB limit, at most 1 MiB (plus one piece) is made.
  const std::string bomb = make_archive({{"model.weights.h5", std::string(64u << 20, '\0')}}, true);
  CHECK(bomb.size() < (1u << 20));
  const ZipReader reader(bomb, "bomb.keras");
  CHECK_THROWS_WITH(reader.read("model.weights.h5", 1u << 20), Catch::Contains("more than the limit"));
  CHECK(reader.read("model.weights.h5", 64u << 20).size() == (64u << 20));

  const std::string text = "not a zip at all";
  CHECK_THROWS_WITH(ZipReader(text, "x.keras"), Catch::Contains("x.keras: not a readable zip archive"));
  const std::string archive = make_archive({{"config.json", std::string(3000, 'c')}, {"b", "bb"}}, true);
  kiln::Rng rng(9);
  std::size_t refused = 0;
  for (int trial = 0; trial < 600; ++trial) {
    std::string damaged = archive;
    if (trial % 3 == 0) {
      damaged.resize(static_cast<std::size_t>(rng.uniform(0.0, static_cast<double>(archive.size()))));
    } else {
      const auto at = static_cast<std::size_t>(rng.uniform(0.0, static_cast<double>(damaged.size())));
      damaged[at] = static_cast<char>(damaged[at] ^ (1 << static_cast<int>(rng.uniform(0.0, 8.0))));
    }
    try {
      const ZipReader damaged_reader(damaged, "damaged.keras");
      for (const std::string& name : damaged_reader.names()) damaged_reader.read(name, 1 << 20);
    } catch (const kiln::SerializationError&) {
      ++refused;
    }
  }
  CHECK(refused > 300);
}
