// `kiln plot-model` and `kiln plot-history`: kiln::plot_model and kiln::plot_history on files.
#include <ostream>

#include <kiln/kiln.hpp>

#include "commands.hpp"

namespace kiln::cli {

void plot_model(const PlotModelOptions& options, std::ostream& out) {
  const Model model = load_uncompiled(options.model_file);
  kiln::plot_model(model, options.output,
                   PlotOptions()
                       .show_shapes(true)
                       .show_layer_names(true)
                       .rankdir(options.rankdir)
                       .show_dtype(options.show_dtype)
                       .show_layer_activations(options.show_activations)
                       .show_trainable(options.show_trainable));
  out << "wrote " << options.output << "\n";
}

void plot_history(const std::string& csv, const std::string& output, std::ostream& out) {
  kiln::plot_history(csv, output);
  out << "wrote " << output << "\n";
}

}  // namespace kiln::cli
