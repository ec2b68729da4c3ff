#pragma once
// A fresh folder under $TMPDIR (or /tmp) for a test's files, removed with everything in it at scope exit.
#include <string>
#include <vector>

namespace kiln::testing {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  std::vector<std::string> entries() const;  // names in the folder, sorted

 private:
  std::string path_;
};

std::string read_bytes(const std::string& path);
void write_bytes(const std::string& path, const std::string& bytes);

}  // namespace kiln::testing
