#include <kiln/models/model.hpp>

namespace kiln {

Model::Model(const Tensor& input, const Tensor& output, const std::string& name)
    : Model(std::vector<Tensor>{input}, std::vector<Tensor>{output}, name) {}

Model::Model(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs, const std::string& name)
    : TrainableModel(std::static_pointer_cast<ModelBase>(std::make_shared<FunctionalModel>(inputs, outputs, name))) {}

Sequential::Sequential(const std::string& name)
    : TrainableModel(std::make_shared<SequentialModel>(name.empty() ? Config() : Config{{"name", name}})) {}

void SequentialItem::add_to(SequentialModel& model) const {
  if (is_input_) return model.add_input(input_);
  if (is_shape_) return model.add_input(shape_);
  model.add(layer_);
}

Sequential::Sequential(const std::vector<SequentialItem>& items, const std::string& name) : Sequential(name) {
  for (const SequentialItem& item : items) item.add_to(*layer_);
}

}  // namespace kiln
