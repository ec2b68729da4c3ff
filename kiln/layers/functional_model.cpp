#include <kiln/layers/model_base.hpp>

namespace kiln {

// ---- FunctionalModel ----------------------------------------------------------------------------------------

FunctionalModel::FunctionalModel(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                                 const std::string& name)
    : ModelBase(name.empty() ? Config() : Config{{"name", name}}, "Functional") {
  record(inputs, outputs);
  build_for(input_shapes());
}

FunctionalModel::FunctionalModel(const Config& config) : ModelBase(config, "Functional") {
  ConfigReader args = config_reader(config);
  restore_graph({{"layers", args.value("layers")},
                 {"input_layers", args.value("input_layers")},
                 {"output_layers", args.value("output_layers")}});
  args.finish();
  build_for(input_shapes());
}

Config FunctionalModel::get_config() const {
  Config config = base_config();
  const Config graph = graph_config();  // named: a range-for over graph_config().items() would dangle
  for (const auto& [key, value] : graph.items()) config.set(key, value);
  return config;
}

KILN_REGISTER_LAYER("kiln>Functional", FunctionalModel);

}  // namespace kiln
