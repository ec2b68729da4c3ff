#include <kiln/serialize/detail/sharded_weights.hpp>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <kiln/core/error.hpp>
#include <kiln/core/names.hpp>
#include <kiln/layers/config.hpp>
#include <kiln/serialize/json.hpp>

namespace kiln::detail {

namespace {

bool ends_with(const std::string& text, const std::string& end) {
  return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
}

std::string parent_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

}  // namespace

ShardedHdf5Builder::ShardedHdf5Builder(const std::string& index_path, double max_shard_bytes,
                                       std::uint64_t expected_bytes)
    : index_path_(index_path), max_bytes_(max_shard_bytes), expected_bytes_(expected_bytes) {
  if (!ends_with(index_path, ".json"))
    throw ValueError(index_path + ": sharded weights are written to an index ending in \".json\"");
  if (!(max_shard_bytes > 0))
    throw ValueError(index_path + ": the largest shard must be more than 0 bytes, not " +
                     std::to_string(max_shard_bytes));
  const std::size_t slash = index_path.rfind('/');
  folder_ = slash == std::string::npos ? std::string() : index_path.substr(0, slash + 1);
  std::string name = index_path.substr(folder_.size());
  name = name.substr(0, name.size() - 5);  // Keras: path.stem.replace(".weights", "")
  for (std::size_t at; (at = name.find(".weights")) != std::string::npos;) name.erase(at, 8);
  base_ = name;
  begin_shard();
}

ShardedHdf5Builder::~ShardedHdf5Builder() = default;

void ShardedHdf5Builder::begin_shard() {
  if (current_) {
    current_->close();
    current_.reset();  // a builder holds libhdf5's lock while it lives: one at a time
  }
  const std::string shard = shard_path(shards_.size());
  const double room = std::min<double>(static_cast<double>(expected_bytes_), max_bytes_);
  shards_.push_back(std::make_unique<StagedFile>(shard, static_cast<std::uint64_t>(room) + (1u << 20)));
  current_ = std::make_unique<Hdf5Builder>(shards_.back()->temporary());
  current_bytes_ = 0;
}

std::string ShardedHdf5Builder::shard_path(std::size_t index) const {
  char number[16];
  std::snprintf(number, sizeof number, "_%05zu", index);  // Keras's f"{base_name}_{index:05}.weights.h5"
  return folder_ + base_ + number + ".weights.h5";
}

void ShardedHdf5Builder::group(const std::string& path) { current_->group(path); }

void ShardedHdf5Builder::string_attribute(const std::string& path, const std::string& name, const std::string& value) {
  current_->string_attribute(path, name, value);
}

void ShardedHdf5Builder::before_dataset(const std::string& path, double bytes) {
  total_bytes_ += bytes;
  if (bytes > max_bytes_)
    throw ValueError(index_path_ + ": the size of " + path + " is " + readable_size(bytes) +
                     ", which exceeds the maximum shard size " + readable_size(max_bytes_) +
                     "; increase max_shard_size to make room for it");
  current_bytes_ += bytes;
  if (current_bytes_ > max_bytes_) {
    begin_shard();
    current_bytes_ = bytes;
  }
}

void ShardedHdf5Builder::after_dataset(const std::string& path) {
  const std::string group = "/" + parent_of(path);
  const std::string shard = shards_.back()->path().substr(folder_.size());
  const auto [found, added] = weight_map_index_.emplace(group, weight_map_.size());
  if (added) {
    weight_map_.push_back({group, {shard}, false});
    return;
  }
  Entry& entry = weight_map_[found->second];
  entry.listed = true;
  if (std::find(entry.shards.begin(), entry.shards.end(), shard) == entry.shards.end()) entry.shards.push_back(shard);
}

void ShardedHdf5Builder::dataset(const std::string& path, const Array& value) {
  before_dataset(path, static_cast<double>(value.nbytes()));
  current_->dataset(path, value);
  after_dataset(path);
}

void ShardedHdf5Builder::bfloat16_dataset(const std::string& path, const Array& value) {
  before_dataset(path, static_cast<double>(value.size() * 2));
  current_->bfloat16_dataset(path, value);
  after_dataset(path);
}

void ShardedHdf5Builder::int64_dataset(const std::string& path, std::int64_t value) {
  before_dataset(path, 8);
  current_->int64_dataset(path, value);
  after_dataset(path);
}

void ShardedHdf5Builder::close() {
  current_->close();
  current_.reset();
  Config weight_map = Config::map();
  for (const Entry& entry : weight_map_) {
    if (!entry.listed) {
      weight_map.set(entry.group, entry.shards.front());
      continue;
    }
    Config list = Config::list();
    for (const std::string& shard : entry.shards) list.push_back(shard);
    weight_map.set(entry.group, list);
  }
  const Config index = {{"metadata", {{"total_size", total_bytes_}}}, {"weight_map", weight_map}};
  for (const auto& shard : shards_) shard->sync();
  // From here an interrupted save leaves no index: never an earlier index over a mix of shards.
  if (::unlink(index_path_.c_str()) != 0 && errno != ENOENT)
    throw SerializationError(index_path_ + ": an earlier index cannot be removed (" + std::strerror(errno) +
                             "); nothing was replaced");
  for (const auto& shard : shards_) shard->commit();
  write_file_atomically(index_path_, to_json(index, 4));
  // An earlier save's shards past this one's count: named as Keras names shards, beside this index.
  for (std::size_t k = shards_.size(); ::unlink(shard_path(k).c_str()) == 0;) ++k;
}

}  // namespace kiln::detail
