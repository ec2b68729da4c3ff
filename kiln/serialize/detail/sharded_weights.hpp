#pragma once
// Keras's sharded weights as ShardedH5IOStore writes them (model.save_weights("model.weights.json",
// max_shard_size=...), and keras-hub's save_to_preset for a backbone over max_shard_size): the datasets go to
// model_00000.weights.h5, model_00001.weights.h5, ... beside the index, a new shard begun when the next dataset
// would take the current one past max_shard_size bytes; the index, model.weights.json, is
//   {"metadata": {"total_size": <bytes>}, "weight_map": {"/layers/dense/vars": "model_00000.weights.h5", ...}}
// with each variables group that holds a dataset and the shard (or, for a group with several datasets, the
// list of shards) holding them. A group begun in one shard and continued in the next is made again there,
// without its name attribute, as Keras makes it.
//
// Every file is staged beside its target and synced, and none replaces its target until all are written: a failure
// while writing leaves the folder as it was. Then an earlier index is removed, the shards renamed into place and the
// index written: a failure in that short step leaves no index, so the folder fails to load by name rather than mix
// an earlier save's shards with these. Shards an earlier save left beyond this one's count are removed.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/serialize/detail/container.hpp>
#include <kiln/serialize/detail/hdf5_writer.hpp>

namespace kiln::detail {

class ShardedHdf5Builder {
 public:
  /// `index_path` ends in ".json" (ValueError otherwise); the shards are named after it, its ".weights.json"
  /// or ".json" taken off ("model.weights.json": model_00000.weights.h5). `max_shard_bytes` > 0 (ValueError).
  /// `expected_bytes` is about the weights' size, checked against the process's file-size limit.
  ShardedHdf5Builder(const std::string& index_path, double max_shard_bytes, std::uint64_t expected_bytes);
  ~ShardedHdf5Builder();
  ShardedHdf5Builder(const ShardedHdf5Builder&) = delete;
  ShardedHdf5Builder& operator=(const ShardedHdf5Builder&) = delete;

  // As Hdf5Builder's, in the current shard.
  void group(const std::string& path);
  void string_attribute(const std::string& path, const std::string& name, const std::string& value);
  // In the current shard, or a new one when it would pass the maximum size. ValueError for a dataset larger
  // than the maximum by itself (naming it and both sizes, as Keras refuses it).
  void dataset(const std::string& path, const Array& value);
  void int64_dataset(const std::string& path, std::int64_t value);
  void bfloat16_dataset(const std::string& path, const Array& value);  // as Hdf5Builder's
  // Finishes the last shard, syncs every shard, removes an earlier index, renames the shards into place, writes the
  // index (atomically) and removes an earlier save's shards beyond this one's.
  void close();


 private:
  void before_dataset(const std::string& path, double bytes);
  void after_dataset(const std::string& path);
  void begin_shard();
  std::string shard_path(std::size_t index) const;  ///< the folder, then model_00000.weights.h5 for index 0

  std::string index_path_, folder_, base_;
  double max_bytes_;
  std::uint64_t expected_bytes_;
  double total_bytes_ = 0, current_bytes_ = 0;
  std::vector<std::unique_ptr<StagedFile>> shards_;
  std::unique_ptr<Hdf5Builder> current_;
  struct Entry {
    std::string group;                // "/layers/dense/vars"
    std::vector<std::string> shards;  // the shards holding its datasets
    bool listed = false;              // Keras lists the shards of a group once it is given a second dataset
  };
  std::vector<Entry> weight_map_;  // in the order written
  std::map<std::string, std::size_t> weight_map_index_;
};

}  // namespace kiln::detail
