#include <kiln/layers/model_base.hpp>

#include <algorithm>
#include <iostream>
#include <map>

#include <kiln/core/names.hpp>
#include <kiln/layers/detail/model_state.hpp>

namespace kiln {

using detail::is_input_layer;

// ---- summary --------------------------------------------------------------------------------------------------

namespace {

std::string with_commas(std::int64_t value) {
  std::string digits = std::to_string(value);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(static_cast<std::size_t>(i), ",");
  return digits;
}

// Display width of UTF-8 text (the table's box characters are one column each).
std::size_t columns(const std::string& text) {
  std::size_t count = 0;
  for (unsigned char c : text) count += (c & 0xC0) != 0x80;
  return count;
}

std::string pad(const std::string& text, std::size_t width, bool right) {
  const std::size_t used = columns(text);
  const std::string fill(used < width ? width - used : 0, ' ');
  return right ? fill + text : text + fill;
}

std::string repeat(const std::string& piece, std::size_t count) {
  std::string out;
  for (std::size_t i = 0; i < count; ++i) out += piece;
  return out;
}

std::string shapes_text(const std::vector<Shape>& shapes) {
  if (shapes.size() == 1) return shapes[0].to_string();
  std::string text = "[";
  for (std::size_t i = 0; i < shapes.size(); ++i) text += (i ? ", " : "") + shapes[i].to_string();
  return text + "]";
}

}  // namespace

namespace {

struct SummaryRow {
  std::string layer, shape, params;
  std::vector<std::string> connected;  // "dense[0][0]" per input of every call of the layer
};

// One row per layer (not per call), as Keras prints it; a shared layer lists all its calls' inputs.
std::vector<SummaryRow> summary_rows(const std::vector<ModelBase::Node>& nodes, bool hide_inputs,
                                     bool show_connections) {
  std::map<const Layer*, int> calls_so_far;
  std::vector<int> call_index(nodes.size());
  for (std::size_t i = 0; i < nodes.size(); ++i) call_index[i] = calls_so_far[nodes[i].layer.get()]++;
  auto ref_text = [&](const ModelBase::TensorRef& ref) {
    const std::size_t n = static_cast<std::size_t>(ref.node);
    return nodes[n].layer->name() + "[" + std::to_string(call_index[n]) + "][" + std::to_string(ref.output) + "]";
  };
  std::vector<SummaryRow> rows;
  std::map<const Layer*, std::size_t> row_of;
  for (const ModelBase::Node& node : nodes) {
    if (hide_inputs && is_input_layer(node.layer)) continue;
    std::vector<std::string> connected;
    for (const ModelBase::TensorRef& ref : node.inputs) connected.push_back(ref_text(ref));
    for (const auto& [name, ref] : node.tensor_args) connected.push_back(ref_text(ref));
    if (const auto found = row_of.find(node.layer.get()); found != row_of.end()) {
      SummaryRow& row = rows[found->second];
      row.connected.insert(row.connected.end(), connected.begin(), connected.end());
      continue;
    }
    row_of[node.layer.get()] = rows.size();
    rows.push_back({node.layer->name() + " (" + node.layer->class_name() + ")", shapes_text(node.output_shapes),
                    with_commas(node.layer->count_params()), connected});
    if (show_connections && rows.back().connected.empty()) rows.back().connected.push_back("-");
  }
  return rows;
}

// Keras's box table: heavy rules around the header, light ones between rows, the counts right-aligned.
std::string render_table(const std::vector<SummaryRow>& rows, bool show_connections) {
  std::vector<std::string> headers = {"Layer (type)", "Output Shape", "Param #"};
  if (show_connections) headers.push_back("Connected to");
  std::vector<std::size_t> widths = {29, 22, 11, 20};
  for (const SummaryRow& row : rows) {
    widths[0] = std::max(widths[0], columns(row.layer));
    widths[1] = std::max(widths[1], columns(row.shape));
    widths[2] = std::max(widths[2], columns(row.params));
    for (const std::string& c : row.connected) widths[3] = std::max(widths[3], columns(c));
  }
  const std::size_t num_columns = headers.size();
  auto rule = [&](const char* left, const char* line, const char* middle, const char* right) {
    std::string out = left;
    for (std::size_t c = 0; c < num_columns; ++c)
      out += repeat(line, widths[c] + 2) + (c + 1 < num_columns ? middle : right);
    return out + "\n";
  };
  auto line = [&](const std::vector<std::string>& cells, const char* bar) {
    std::string out = bar;
    for (std::size_t c = 0; c < num_columns; ++c) out += " " + pad(cells[c], widths[c], c == 2) + " " + bar;
    return out + "\n";
  };
  std::string out = rule("┏", "━", "┳", "┓") + line(headers, "┃") + rule("┡", "━", "╇", "┩");
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const SummaryRow& row = rows[r];
    const std::size_t height = show_connections ? std::max<std::size_t>(1, row.connected.size()) : 1;
    for (std::size_t k = 0; k < height; ++k) {
      std::vector<std::string> cells = {k == 0 ? row.layer : "", k == 0 ? row.shape : "", k == 0 ? row.params : ""};
      if (show_connections) cells.push_back(k < row.connected.size() ? row.connected[k] : "");
      out += line(cells, "│");
    }
    out += r + 1 < rows.size() ? rule("├", "─", "┼", "┤") : rule("└", "─", "┴", "┘");
  }
  return out;
}

std::string parameter_totals(const std::vector<Weight>& weights) {
  std::int64_t trainable = 0, frozen = 0;
  double trainable_bytes = 0, frozen_bytes = 0;
  for (const Weight& weight : weights) {
    (weight.trainable ? trainable : frozen) += static_cast<std::int64_t>(weight.value.size());
    (weight.trainable ? trainable_bytes : frozen_bytes) += static_cast<double>(weight.value.nbytes());
  }
  return " Total params: " + with_commas(trainable + frozen) + " (" + readable_size(trainable_bytes + frozen_bytes) +
         ")\n" + " Trainable params: " + with_commas(trainable) + " (" + readable_size(trainable_bytes) + ")\n" +
         " Non-trainable params: " + with_commas(frozen) + " (" + readable_size(frozen_bytes) + ")\n";
}

}  // namespace

std::string ModelBase::summary_string() const {
  const std::string title = "Model: \"" + (name().empty() ? to_snake_case(class_name()) : name()) + "\"\n";
  if (!built()) {
    // As Keras prints an unbuilt Sequential: its layers, no shapes yet, and no weights. Unnamed layers are
    // shown with the names their first call will give them ("dense", "dense_1").
    std::vector<SummaryRow> rows;
    std::map<std::string, int> seen;
    for (const LayerPtr& layer : ordered_layers()) {
      std::string shown = layer->name();
      if (shown.empty()) {
        const std::string base = to_snake_case(layer->class_name());
        const int count = seen[base]++;
        shown = count == 0 ? base : base + "_" + std::to_string(count);
      }
      rows.push_back({shown + " (" + layer->class_name() + ")", "?", "0 (unbuilt)", {}});
    }
    return title + render_table(rows, false) + parameter_totals({}) +
           " (unbuilt: it builds at its first call, fit or predict)\n";
  }
  const bool show_connections = !linear();
  // Keras shows a Sequential model's input layer as no row of its own.
  const bool hide_inputs = dynamic_cast<const SequentialModel*>(this) != nullptr;
  return title + render_table(summary_rows(nodes_, hide_inputs, show_connections), show_connections) +
         parameter_totals(weights());
}

void ModelBase::summary(std::ostream& out) const { out << summary_string(); }
void ModelBase::summary() const { summary(std::cout); }

}  // namespace kiln
