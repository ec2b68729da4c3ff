#pragma once
// Internal: the parts of ModelBase that its files (layers/model_*.cpp) share.
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <kiln/core/detail/program_pool.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/layers/model_base.hpp>

namespace kiln {

struct ModelBase::Inference {
  Graph graph;
  std::vector<Tensor> inputs, outputs;
  std::unique_ptr<detail::ProgramPool> programs;  // one Program per concurrent caller
};

struct ModelBase::Usage {
  std::mutex mutex;
  int inferring = 0;
  int training = 0;  // nested on the trainer's thread
  std::thread::id trainer;
};

namespace detail {
inline bool is_input_layer(const LayerPtr& layer) { return dynamic_cast<const InputLayer*>(layer.get()) != nullptr; }
}  // namespace detail

}  // namespace kiln
