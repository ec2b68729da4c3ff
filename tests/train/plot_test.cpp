// plot_model's DOT text and pictures, and plot_history's SVG charts.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <kiln/core/error.hpp>
#include <kiln/layers/core/dense.hpp>
#include <kiln/layers/merging/merging.hpp>
#include <kiln/models/model.hpp>
#include <kiln/train/plot.hpp>
#include "support/temp_dir.hpp"

using namespace kiln;

namespace {

constexpr std::int64_t None = Shape::unknown;

std::size_t count_of(const std::string& text, const std::string& part) {
  std::size_t count = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++count;
  return count;
}

std::string read_text(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

// Two inputs, a Dense on one of them, joined: 5 calls (2 inputs, dense, concat, head) and 4 edges.
Model two_branch() {
  const Tensor a = Input({None, 3}, DType::float32, "left");
  const Tensor b = Input({None, 2}, DType::float32, "right");
  const Tensor h = Dense(4, "relu", {{"name", "hidden"}})(a);
  const Tensor joined = Concatenate({{"name", "joined"}})({h, b});
  return Model({a, b}, {Dense(1, "", {{"name", "head"}})(joined)}, "two_branch");
}

}  // namespace

TEST_CASE("model_to_dot draws a box per layer call and an edge per tensor passed, as plot_model does",
          "[train][plot]") {
  const Model model = two_branch();
  const std::string plain = model_to_dot(model);
  CHECK(plain.rfind("digraph \"two_branch\" {", 0) == 0);
  CHECK(count_of(plain, "[label=<") == 5);
  CHECK(count_of(plain, " -> ") == 4);
  CHECK(count_of(plain, "<b>Dense</b>") == 2);           // Keras's default: class names only
  CHECK(plain.find("hidden") == std::string::npos);
  CHECK(plain.find("Output shape") == std::string::npos);

  const std::string full = model_to_dot(model, PlotOptions()
                                                   .show_shapes(true)
                                                   .show_layer_names(true)
                                                   .show_layer_activations(true)
                                                   .show_dtype(true)
                                                   .show_trainable(true)
                                                   .rankdir("LR"));
  CHECK(full.find("<b>hidden</b> (Dense)") != std::string::npos);
  CHECK(full.find("Input shape: <b>(None, 4), (None, 2)</b>") != std::string::npos);  // the Concatenate's
  CHECK(full.find("Output shape: <b>(None, 6)</b>") != std::string::npos);
  CHECK(full.find("Activation: <b>relu</b>") != std::string::npos);
  CHECK(full.find("Output dtype: <b>float32</b>") != std::string::npos);
  CHECK(count_of(full, "<b>Trainable</b>") == 2);  // the two Dense layers, the others have no weights
  CHECK(full.find("rankdir=\"LR\"") != std::string::npos);
  CHECK_THROWS_AS(model_to_dot(model, PlotOptions().rankdir("BT")), ValueError);
}

TEST_CASE("plot_model writes DOT text, or a picture through Graphviz, whole or not at all", "[train][plot]") {
  testing::TempDir dir;
  const Model model = two_branch();
  plot_model(model, dir.file("model.dot"), PlotOptions().show_shapes(true));
  CHECK(read_text(dir.file("model.dot")) == model_to_dot(model, PlotOptions().show_shapes(true)));
  CHECK_THROWS_AS(plot_model(model, dir.file("model.txt")), ValueError);
  try {
    plot_model(model, dir.file("model.svg"), PlotOptions().show_shapes(true).show_layer_names(true));
    const std::string svg = read_text(dir.file("model.svg"));
    CHECK(svg.find("<svg") != std::string::npos);
    CHECK(svg.find("joined") != std::string::npos);
  } catch (const Error& missing) {
    // Without Graphviz: a message saying how to install it, and no file.
    CHECK(std::string(missing.what()).find("install-graphviz.sh") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(dir.file("model.svg")));
  }
  // Nothing but the pictures is left behind.
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
    CHECK(entry.path().filename().string().find("kiln-") == std::string::npos);
}

TEST_CASE("plot_history draws a panel per metric with its validation line, from a History or a CSVLogger file",
          "[train][plot]") {
  testing::TempDir dir;
  History history;
  history.epochs = {0, 1, 2, 3};
  history.history = {{"loss", {1.0, 0.5, 0.4, 0.35}},
                     {"val_loss", {1.2, 0.7, 0.6, 0.62}},
                     {"mae", {0.9, 0.6, 0.5, 0.45}},
                     {"learning_rate", {0.01, 0.01, 0.005, 0.005}}};
  plot_history(history, dir.file("history.svg"));
  const std::string svg = read_text(dir.file("history.svg"));
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(count_of(svg, "<polyline") == 4);  // loss and val_loss in one panel, mae, learning_rate
  CHECK(count_of(svg, "font-weight=\"bold\">") == 3);
  CHECK(svg.find(">loss</text>") < svg.find(">mae</text>"));  // the loss first

  std::ofstream(dir.file("log.csv")) << "epoch,loss,val_loss\n0,1.0,1.1\n1,0.5,nan\n2,0.25,0.3\n";
  plot_history(dir.file("log.csv"), dir.file("from_csv.svg"));
  CHECK(count_of(read_text(dir.file("from_csv.svg")), "<polyline") == 2);
  std::ofstream(dir.file("no_epoch.csv")) << "loss\n1.0\n";
  CHECK_THROWS_WITH(plot_history(dir.file("no_epoch.csv"), dir.file("x.svg")), Catch::Contains("'epoch'"));
  CHECK_THROWS_AS(plot_history(History(), dir.file("empty.svg")), ValueError);
}
