#pragma once
// The subcommands of the `kiln` tool. Each writes its result to `out` and throws kiln::Error (or another
// std::exception) on failure; main.cpp turns a throw into one `kiln: error: ...` line and exit status 1.
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace kiln {
class Model;
}

namespace kiln::cli {

// The model of a kiln file, without its optimizer: what inspecting or running it needs.
Model load_uncompiled(const std::string& file);

// `kiln summary FILE`: the model's summary table.
void summary(const std::string& file, std::ostream& out);

// `kiln config FILE`: the config section as pretty JSON.
void config(const std::string& file, std::ostream& out);

// `kiln verify FILE`: the file's frame, sections and weights, every checksum checked; for a Keras file, its
// entries and weight datasets, every one read, and the model built from it.
void verify(const std::string& file, std::ostream& out);

// `kiln convert FILE OUTPUT`: the model (compiled, with its optimizer's state, when the file has one) written
// to OUTPUT in the format its extension names: .keras, .h5, or kiln's own for any other.
void convert(const std::string& file, const std::string& output, std::ostream& out);

// `kiln quantize FILE OUTPUT [--mode int8]`: Keras's model.quantize(mode) (kiln::quantize) of the file's model,
// written to OUTPUT by its extension as convert writes; prints which layers became which mode and which stayed as
// they were, and why.
void quantize(const std::string& file, const std::string& output, const std::string& mode, std::ostream& out);

struct PredictOptions {
  std::string model_file;
  std::string input_csv;
  std::int64_t batch_size = 32;
  bool header = false;               // the CSV's first line names the columns
  std::int64_t skip_rows = 0;        // lines skipped before the header or the first row
  std::vector<std::string> columns;  // the sample's columns, by index (negative from the end) or name; all when empty
  bool classes_only = false;         // print each row's class (named by an attached StringLookup) instead
};

// `kiln predict FILE INPUT.csv`: one CSV row of outputs per input row; a model with a StringLookup attached
// (StringLookup::attach) whose vocabulary has one name per output also gets a `class` column, the name of the
// largest output.
void predict(const PredictOptions& options, std::ostream& out);

struct PlotModelOptions {
  std::string model_file;
  std::string output;  // .svg, .png, .pdf or .dot
  std::string rankdir = "TB";
  bool show_dtype = false, show_activations = false, show_trainable = false;
};

// `kiln plot-model FILE OUT.svg`: the model's layer graph with names and shapes, through Graphviz.
void plot_model(const PlotModelOptions& options, std::ostream& out);

// `kiln plot-history HISTORY.csv OUT.svg`: every logged metric per epoch, from a CSVLogger file.
void plot_history(const std::string& csv, const std::string& output, std::ostream& out);

// `kiln ops [--gradchecks LOG]`: every registered op with its backward rule or why it has none, as a Markdown
// table (docs/ops.md); with a KILN_OPS_LOG file of the gradient checks, also the ops each backward rule makes and a
// test that checks it in float64.
void ops_table(const std::string& gradcheck_log, std::ostream& out);

}  // namespace kiln::cli
