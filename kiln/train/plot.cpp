// plot_model writes DOT text in the form keras.utils.plot_model makes (a table per layer, HTML-like labels)
// and runs Graphviz's `dot` on it; plot_history draws its SVG itself, so that a training chart needs
// nothing installed.
#include <kiln/train/plot.hpp>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/core/dtype.hpp>
#include <kiln/data/data.hpp>

extern char** environ;

namespace kiln {

namespace {

std::string escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string extension_of(const std::string& path) {
  const std::string extension = std::filesystem::path(path).extension().string();
  std::string lower;
  for (char c : extension) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower;
}

// Writes `text` to a temporary file beside `path` and renames it over `path`: whole or not at all.
void write_whole(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".kiln-tmp-" + std::to_string(::getpid());
  {
    std::ofstream file(temporary, std::ios::binary);
    file << text;
    file.close();
    if (!file) {
      std::remove(temporary.c_str());
      throw Error("cannot write '" + path + "': " + std::strerror(errno));
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    std::remove(temporary.c_str());
    throw Error("cannot write '" + path + "': " + reason);
  }
}

std::string shapes_text(const std::vector<Shape>& shapes) {
  if (shapes.empty()) return "?";
  std::string text;
  for (std::size_t i = 0; i < shapes.size(); ++i) text += (i > 0 ? ", " : "") + shapes[i].to_string();
  return text;
}

std::string cell(const std::string& text, const std::string& background = "white", const std::string& color = "black") {
  return "<td bgcolor=\"" + background + "\"><font point-size=\"14\" color=\"" + color + "\">" + text + "</font></td>";
}

// The label of one layer call: Keras's table of a black title row and white rows of details.
std::string node_label(const ModelBase::Node& node, const std::vector<ModelBase::Node>& nodes, bool show_shapes,
                       bool show_dtype, bool show_names, bool show_activations, bool show_trainable) {
  const Layer& layer = *node.layer;
  std::vector<std::string> cells;
  if (show_shapes) {
    std::vector<Shape> inputs;
    for (const ModelBase::TensorRef& input : node.inputs)
      inputs.push_back(nodes[static_cast<std::size_t>(input.node)].output_shapes.at(static_cast<std::size_t>(input.output)));
    if (layer.class_name() != "InputLayer") cells.push_back(cell("Input shape: <b>" + escaped(shapes_text(inputs)) + "</b>"));
    cells.push_back(cell("Output shape: <b>" + escaped(shapes_text(node.output_shapes)) + "</b>"));
  }
  if (show_dtype) cells.push_back(cell("Output dtype: <b>" + std::string(dtype_name(layer.dtype())) + "</b>"));
  if (show_trainable && !layer.weights().empty())
    cells.push_back(layer.trainable() ? cell("<b>Trainable</b>", "forestgreen", "white")
                                      : cell("<b>Non-trainable</b>", "firebrick", "white"));
  const std::size_t span = std::max<std::size_t>(1, cells.size());
  std::string label = "<<table border=\"0\" cellborder=\"1\" bgcolor=\"black\" cellpadding=\"10\">";
  label += "<tr><td colspan=\"" + std::to_string(span) + "\" bgcolor=\"black\"><font point-size=\"16\" color=\"white\">";
  label += show_names ? "<b>" + escaped(layer.name()) + "</b> (" + escaped(layer.class_name()) + ")"
                      : "<b>" + escaped(layer.class_name()) + "</b>";
  label += "</font></td></tr>";
  if (show_activations) {
    const Config config = layer.get_config();
    if (const Config* activation = config.find("activation");
        activation != nullptr && activation->type() == Config::Type::string)
      label += "<tr><td bgcolor=\"white\" colspan=\"" + std::to_string(span) +
               "\"><font point-size=\"14\">Activation: <b>" + escaped(activation->as_string()) + "</b></font></td></tr>";
  }
  if (!cells.empty()) {
    label += "<tr>";
    for (const std::string& one : cells) label += one;
    label += "</tr>";
  }
  return label + "</table>>";
}

}  // namespace

std::string model_to_dot(const ModelBase& model, const PlotOptions& options) {
  if (options.rankdir_ != "TB" && options.rankdir_ != "LR")
    throw ValueError("plot_model: rankdir must be \"TB\" or \"LR\", got '" + options.rankdir_ + "'");
  if (options.dpi_ <= 0) throw ValueError("plot_model: dpi must be positive, got " + std::to_string(options.dpi_));
  if (!model.built()) throw LayerStateError(model.describe() + " is not built: there is no graph to plot yet");
  std::ostringstream dot;
  dot << "digraph \"" << escaped(model.name()) << "\" {\n";
  // dpi is given to dot for raster pictures only (plot_model): in an SVG it scales the drawing but not its
  // viewBox, which crops it.
  dot << "  graph [rankdir=\"" << options.rankdir_ << "\", concentrate=true, splines=\"ortho\"];\n";
  dot << "  node [shape=\"plaintext\", fontname=\"Helvetica\"];\n";
  const std::vector<ModelBase::Node>& nodes = model.nodes();
  for (std::size_t i = 0; i < nodes.size(); ++i)
    dot << "  node" << i << " [label="
        << node_label(nodes[i], nodes, options.show_shapes_, options.show_dtype_, options.show_layer_names_,
                      options.show_layer_activations_, options.show_trainable_)
        << "];\n";
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    std::vector<int> sources;
    for (const ModelBase::TensorRef& input : nodes[i].inputs) sources.push_back(input.node);
    for (const auto& [name, input] : nodes[i].tensor_args) sources.push_back(input.node);
    std::sort(sources.begin(), sources.end());
    sources.erase(std::unique(sources.begin(), sources.end()), sources.end());
    for (int source : sources) dot << "  node" << source << " -> node" << i << ";\n";
  }
  dot << "}\n";
  return dot.str();
}

void plot_model(const ModelBase& model, const std::string& to_file, const PlotOptions& options) {
  const std::string extension = extension_of(to_file);
  const std::string dot_text = model_to_dot(model, options);
  if (extension == ".dot") return write_whole(to_file, dot_text);
  if (extension != ".svg" && extension != ".png" && extension != ".pdf")
    throw ValueError("plot_model: '" + to_file + "' should end in .svg, .png, .pdf or .dot");
  const std::string source = to_file + ".kiln-dot-" + std::to_string(::getpid());
  const std::string rendered = to_file + ".kiln-tmp-" + std::to_string(::getpid());
  write_whole(source, dot_text);
  const std::string format = "-T" + extension.substr(1);
  const std::string output = "-o" + rendered;
  const std::string dpi = "-Gdpi=" + std::to_string(extension == ".png" ? options.dpi_ : 72);
  std::vector<char*> argv = {const_cast<char*>("dot"),           const_cast<char*>(format.c_str()),
                             const_cast<char*>(dpi.c_str()),     const_cast<char*>(output.c_str()),
                             const_cast<char*>(source.c_str()), nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, "dot", nullptr, nullptr, argv.data(), environ);
  int status = 0;
  if (spawned == 0) waitpid(pid, &status, 0);
  std::remove(source.c_str());
  if (spawned == ENOENT || (spawned == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 127))
    throw Error("plot_model: Graphviz's `dot` program is not installed; install it with scripts/install-graphviz.sh "
                "(Debian's graphviz package), or write a .dot file");
  if (spawned != 0) throw Error(std::string("plot_model: cannot run Graphviz's dot: ") + std::strerror(spawned));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::remove(rendered.c_str());
    throw Error("plot_model: Graphviz's dot failed to draw '" + to_file + "' (status " + std::to_string(status) + ")");
  }
  if (std::rename(rendered.c_str(), to_file.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    std::remove(rendered.c_str());
    throw Error("plot_model: cannot write '" + to_file + "': " + reason);
  }
}

// ---- history charts --------------------------------------------------------------------------------------------

namespace {

// A readable tick value: 3 significant digits.
std::string tick(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", value);
  return text;
}

}  // namespace

void plot_history(const History& history, const std::string& svg_path) {
  if (history.epochs.empty() || history.history.empty())
    throw ValueError("plot_history: the history has no epochs to draw");
  // One panel per name without "val_", the validation values drawn with it.
  std::vector<std::string> panels;
  for (const auto& [name, values] : history.history)
    if (name.rfind("val_", 0) != 0 || history.history.count(name.substr(4)) == 0) panels.push_back(name);
  std::stable_sort(panels.begin(), panels.end(), [](const std::string& a, const std::string& b) {
    return (a == "loss") > (b == "loss");  // the loss first
  });
  const int panel_width = 460, panel_height = 280, margin_left = 70, margin_top = 40, columns = 2;
  const int rows = static_cast<int>((panels.size() + columns - 1) / columns);
  const int width = panel_width * std::min<int>(columns, static_cast<int>(panels.size()));
  const int height = panel_height * rows;
  const double first_epoch = history.epochs.front() + 1, last_epoch = history.epochs.back() + 1;
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n";
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  const char* colors[2] = {"#1f77b4", "#ff7f0e"};
  for (std::size_t p = 0; p < panels.size(); ++p) {
    const std::string& name = panels[p];
    const int x0 = static_cast<int>(p % columns) * panel_width, y0 = static_cast<int>(p / columns) * panel_height;
    const int plot_left = x0 + margin_left, plot_top = y0 + margin_top;
    const int plot_width = panel_width - margin_left - 20, plot_height = panel_height - margin_top - 50;
    std::vector<std::pair<std::string, const std::vector<double>*>> series = {{name, &history.history.at(name)}};
    if (name.rfind("val_", 0) != 0)
      if (const auto found = history.history.find("val_" + name); found != history.history.end())
        series.emplace_back(found->first, &found->second);
    double low = INFINITY, high = -INFINITY;
    for (const auto& one : series)
      for (double value : *one.second)
        if (std::isfinite(value)) {
          low = std::min(low, value);
          high = std::max(high, value);
        }
    if (!std::isfinite(low)) low = 0, high = 1;
    if (high - low < 1e-12 * std::max(1.0, std::abs(high))) low -= 0.5, high += 0.5;
    auto x_of = [&](double epoch) {
      return plot_left + (last_epoch == first_epoch ? plot_width / 2.0
                                                    : (epoch - first_epoch) / (last_epoch - first_epoch) * plot_width);
    };
    auto y_of = [&](double value) { return plot_top + (high - value) / (high - low) * plot_height; };
    svg << "<text x=\"" << x0 + panel_width / 2 << "\" y=\"" << y0 + 22 << "\" text-anchor=\"middle\" font-size=\"15\""
        << " font-weight=\"bold\">" << escaped(name) << "</text>\n";
    svg << "<rect x=\"" << plot_left << "\" y=\"" << plot_top << "\" width=\"" << plot_width << "\" height=\""
        << plot_height << "\" fill=\"none\" stroke=\"#999\"/>\n";
    for (int t = 0; t <= 4; ++t) {
      const double value = low + (high - low) * t / 4.0;
      const double y = y_of(value);
      svg << "<line x1=\"" << plot_left << "\" x2=\"" << plot_left + plot_width << "\" y1=\"" << y << "\" y2=\"" << y
          << "\" stroke=\"#eee\"/>\n";
      svg << "<text x=\"" << plot_left - 6 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">" << tick(value) << "</text>\n";
    }
    const int epoch_ticks = static_cast<int>(std::min<double>(5, last_epoch - first_epoch));
    for (int t = 0; t <= epoch_ticks; ++t) {
      const double epoch =
          epoch_ticks == 0 ? first_epoch : std::round(first_epoch + (last_epoch - first_epoch) * t / epoch_ticks);
      svg << "<text x=\"" << x_of(epoch) << "\" y=\"" << plot_top + plot_height + 18 << "\" text-anchor=\"middle\">"
          << tick(epoch) << "</text>\n";
    }
    svg << "<text x=\"" << plot_left + plot_width / 2 << "\" y=\"" << plot_top + plot_height + 36
        << "\" text-anchor=\"middle\" fill=\"#555\">epoch</text>\n";
    for (std::size_t s = 0; s < series.size(); ++s) {
      const std::vector<double>& values = *series[s].second;
      svg << "<polyline fill=\"none\" stroke=\"" << colors[s] << "\" stroke-width=\"2\" points=\"";
      for (std::size_t e = 0; e < values.size() && e < history.epochs.size(); ++e)
        if (std::isfinite(values[e])) svg << x_of(history.epochs[e] + 1) << "," << y_of(values[e]) << " ";
      svg << "\"/>\n";
      // The legend above the plot's top right corner, clear of the lines.
      svg << "<text x=\"" << plot_left + plot_width << "\" y=\"" << y0 + 14 + 14 * static_cast<int>(s)
          << "\" text-anchor=\"end\" font-size=\"11\" fill=\"" << colors[s] << "\">"
          << escaped(s == 0 ? "training" : "validation") << "</text>\n";
    }
  }
  svg << "</svg>\n";
  write_whole(svg_path, svg.str());
}

void plot_history(const std::string& csv_path, const std::string& svg_path) {
  CsvOptions options;
  options.header = CsvHeader::present;
  options.dtype = DType::float64;
  options.allow_non_finite = true;  // a NaN loss is worth seeing as a gap
  const CsvTable table = read_csv(csv_path, options);
  const auto epoch_column = std::find(table.column_names.begin(), table.column_names.end(), "epoch");
  if (epoch_column == table.column_names.end())
    throw ValueError("plot_history: " + csv_path + " has no 'epoch' column (a CSVLogger file has one)");
  const std::size_t epoch_index = static_cast<std::size_t>(epoch_column - table.column_names.begin());
  const std::size_t width = table.column_names.size();
  History history;
  for (std::int64_t r = 0; r < table.values.shape()[0]; ++r) {
    history.epochs.push_back(static_cast<int>(table.values.flat(static_cast<std::size_t>(r) * width + epoch_index)));
    for (std::size_t c = 0; c < width; ++c)
      if (c != epoch_index)
        history.history[table.column_names[c]].push_back(table.values.flat(static_cast<std::size_t>(r) * width + c));
  }
  plot_history(history, svg_path);
}

}  // namespace kiln
