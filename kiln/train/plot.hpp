#pragma once
// Pictures of a model and of its training, as Keras users look at them:
//
//   kiln::plot_model(model, "model.svg", kiln::PlotOptions().show_shapes(true));  // keras.utils.plot_model
//   kiln::plot_history(history, "training.svg");                                  // every logged metric
//
// plot_model writes Graphviz's DOT text (model_to_dot) and has Graphviz's `dot` program render it: install
// it with scripts/install-graphviz.sh (Debian's graphviz). plot_history needs nothing: it writes the SVG.
#include <string>

#include <kiln/layers/model_base.hpp>
#include <kiln/train/fit_options.hpp>

namespace kiln {

/// keras.utils.plot_model's arguments, with its defaults.
class PlotOptions {
 public:
  /// Each layer's input and output shapes.
  PlotOptions& show_shapes(bool value) {
    show_shapes_ = value;
    return *this;
  }
  /// Each layer's output dtype.
  PlotOptions& show_dtype(bool value) {
    show_dtype_ = value;
    return *this;
  }
  /// Each layer's name (else its class alone).
  PlotOptions& show_layer_names(bool value) {
    show_layer_names_ = value;
    return *this;
  }
  /// "TB" (top to bottom, the default) or "LR" (left to right); ValueError otherwise.
  PlotOptions& rankdir(std::string value) {
    rankdir_ = std::move(value);
    return *this;
  }
  /// The activation of layers that have one (Dense, Conv...).
  PlotOptions& show_layer_activations(bool value) {
    show_layer_activations_ = value;
    return *this;
  }
  /// Whether each layer with weights is trainable.
  PlotOptions& show_trainable(bool value) {
    show_trainable_ = value;
    return *this;
  }
  /// Dots per inch of a raster picture (png).
  PlotOptions& dpi(int value) {
    dpi_ = value;
    return *this;
  }

 private:
  friend std::string model_to_dot(const ModelBase& model, const PlotOptions& options);
  friend void plot_model(const ModelBase& model, const std::string& to_file, const PlotOptions& options);
  bool show_shapes_ = false, show_dtype_ = false, show_layer_names_ = false;
  std::string rankdir_ = "TB";
  bool show_layer_activations_ = false, show_trainable_ = false;
  int dpi_ = 200;
};

/// The model's layer graph as Graphviz DOT text: one box per layer call (its class, and as asked its name,
/// shapes, dtype, activation, trainability), an edge for each tensor passed.
std::string model_to_dot(const ModelBase& model, const PlotOptions& options = {});
/// Draws the model into `to_file`, in the format its extension names: .svg, .png, .pdf (rendered by
/// Graphviz's `dot`), or .dot (the text itself). ValueError for another extension; Error naming
/// scripts/install-graphviz.sh when `dot` is not installed, or with dot's message when it fails. The file is
/// written whole or not at all.
void plot_model(const ModelBase& model, const std::string& to_file = "model.png", const PlotOptions& options = {});
/// Every logged value per epoch as an SVG chart of line plots, one panel per metric: the training value,
/// and the validation one (val_<name>) in the same panel. ValueError for an empty history.
void plot_history(const History& history, const std::string& svg_path);
/// The same from a CSVLogger file (an "epoch" column, then one column per logged value).
void plot_history(const std::string& csv_path, const std::string& svg_path);

}  // namespace kiln
