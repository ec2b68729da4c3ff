// kiln: inspect model files (kiln's own, Keras 3 .keras and legacy Keras .h5), convert between them, and run
// them on CSV data.
//
//   kiln summary model.kiln                 the layer table
//   kiln config model.keras                 the architecture as JSON
//   kiln verify model.h5                    every section and checksum (every entry and dataset of a Keras file)
//   kiln predict model.kiln rows.csv        one CSV row of outputs per input row
//   kiln convert model.h5 model.keras       to .kiln, .keras or .h5, by the output's extension
//   kiln quantize model.keras small.keras   Keras's model.quantize("int8") (--mode int4, int4/<block>)
//
// Exit status: 0 on success; 1 when the command failed on its files or data (one `kiln: error: ...` line on
// stderr); 2 on a usage error: an unknown command or option, a missing argument, a bad option value.
#include <algorithm>
#include <charconv>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <kiln/core/error.hpp>
#include "commands.hpp"

#ifndef KILN_VERSION_STRING
#define KILN_VERSION_STRING "unknown"
#endif

namespace {

constexpr int kFailure = 1;
constexpr int kUsage = 2;

struct Arguments {
  std::string command;  // the subcommand given
  std::string file;
  std::string output;  // convert's
  std::string mode = "int8";  // quantize's
  kiln::cli::PredictOptions predict;
  kiln::cli::PlotModelOptions plot;
  std::string gradchecks;  // ops's
};

constexpr const char* kModelFile = "a model file: kiln's (model.save), a Keras 3 .keras or a legacy Keras .h5";

void add_file_command(CLI::App& app, const std::string& name, const std::string& description, std::string& file) {
  app.add_subcommand(name, description)->add_option("FILE", file, kModelFile)->required();
}

std::int64_t positive_integer(const std::string& option, const std::string& text) {
  std::int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end || value <= 0)
    throw CLI::ValidationError(option + " must be a positive integer, got '" + text + "'");
  return value;
}

void add_predict_command(CLI::App& app, kiln::cli::PredictOptions& options) {
  CLI::App* command = app.add_subcommand(
      "predict", "Run a model on the rows of a CSV file (one sample per row) and print its outputs as CSV");
  command->add_option("FILE", options.model_file, kModelFile)->required();
  command->add_option("INPUT", options.input_csv, "a CSV file of numbers, one flattened sample per row")->required();
  // Read as text and checked here: CLI11's own check says "Value 0 not in range 0.000000 to 1797..." (a
  // 309-digit number), and its conversion error does not say what would do.
  command
      ->add_option_function<std::string>(
          "--batch-size",
          [&options](const std::string& text) { options.batch_size = positive_integer("--batch-size", text); },
          "samples run at once (default " + std::to_string(options.batch_size) + ")")
      ->type_name("INT");
  command->add_flag("--header", options.header, "the CSV's first line names the columns (it is skipped)");
  command
      ->add_option_function<std::string>(
          "--skip-rows",
          [&options](const std::string& text) {
            options.skip_rows = text == "0" ? 0 : positive_integer("--skip-rows", text);
          },
          "lines to skip at the start of the file, before any header (a title, scikit-learn's first line)")
      ->type_name("INT");
  command
      ->add_option_function<std::string>(
          "--columns",
          [&options](const std::string& text) {
            options.columns.clear();
            std::string item;
            for (std::size_t i = 0; i <= text.size(); ++i) {
              if (i < text.size() && text[i] != ',') {
                item += text[i];
                continue;
              }
              if (item.empty()) throw CLI::ValidationError("--columns has an empty entry: '" + text + "'");
              options.columns.push_back(item);
              item.clear();
            }
          },
          "the columns that hold the sample, comma-separated: indices (0 the first, -1 the last) or, with "
          "--header, names; by default every column")
      ->type_name("LIST");
  command->add_flag("--classes", options.classes_only,
                    "print each row's class (the largest output's index), named by the model's attached "
                    "StringLookup when it has one");
}

// The formats `kiln convert` writes, by the output's extension.
std::string check_output_format(const std::string& output) {
  for (const char* extension : {".kiln", ".keras", ".h5"}) {
    const std::string tail = extension;
    if (output.size() > tail.size() && output.compare(output.size() - tail.size(), tail.size(), tail) == 0) return "";
  }
  return "OUTPUT '" + output +
         "' has no extension kiln writes: .kiln (kiln's own file), .keras (Keras 3) or .h5 (Keras's legacy HDF5)";
}

// quantize's --mode: Keras's modes kiln runs (kiln::quantize says why for the others it knows).
std::string check_quantize_mode(const std::string& mode) {
  if (mode == "int8" || mode == "int4") return "";
  const std::string size = mode.rfind("int4/", 0) == 0 ? mode.substr(5) : "";
  if (!size.empty() && size.size() <= 9 && size.find_first_not_of("0123456789") == std::string::npos &&
      size.find_first_not_of('0') != std::string::npos)
    return "";
  return "--mode must be int8, int4 or int4/<block size> (a positive number of input rows), got '" + mode + "'";
}

// The subcommand nearest an unknown word: "predcit" -> "predict".
std::string nearest_command(const CLI::App& app, const std::string& word) {
  std::string best;
  std::size_t best_distance = 0;
  for (const CLI::App* command : app.get_subcommands({})) {
    const std::string& name = command->get_name();
    std::size_t previous_row = 0;  // Levenshtein distance, two rows
    std::vector<std::size_t> row(name.size() + 1);
    for (std::size_t j = 0; j <= name.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= word.size(); ++i) {
      previous_row = row[0];
      row[0] = i;
      for (std::size_t j = 1; j <= name.size(); ++j) {
        const std::size_t replaced = previous_row + (word[i - 1] == name[j - 1] ? 0 : 1);
        previous_row = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, replaced});
      }
    }
    if (best.empty() || row[name.size()] < best_distance) {
      best = name;
      best_distance = row[name.size()];
    }
  }
  return best_distance <= std::max<std::size_t>(2, word.size() / 3) ? best : "";
}

void declare(CLI::App& app, Arguments& arguments) {
  app.set_version_flag("--version", KILN_VERSION_STRING);
  // At most one; "none" is reported after parsing, so that an unknown word is reported as such
  // ("The following argument was not expected: frob") rather than as a missing subcommand.
  app.require_subcommand(0, 1);
  add_file_command(app, "summary", "Print a model file's summary table", arguments.file);
  add_file_command(app, "config", "Print a model file's config as JSON", arguments.file);
  add_file_command(app, "verify", "Check a model file: format, version, checksums, config and weights", arguments.file);
  add_predict_command(app, arguments.predict);
  CLI::App* convert = app.add_subcommand(
      "convert", "Write a model file in another format: .keras (Keras 3), .h5 (Keras's legacy HDF5) or kiln's own");
  convert->add_option("FILE", arguments.file, kModelFile)->required();
  convert
      ->add_option("OUTPUT", arguments.output,
                   "the file to write; its extension (.kiln, .keras or .h5) picks the format")
      ->required()
      ->check(CLI::Validator(check_output_format, "FILE.kiln|.keras|.h5"));
  CLI::App* quantize = app.add_subcommand(
      "quantize", "Write a model quantized as Keras's model.quantize does (int8, int4), in any of the formats");
  quantize->add_option("FILE", arguments.file, kModelFile)->required();
  quantize
      ->add_option("OUTPUT", arguments.output,
                   "the file to write; its extension (.kiln, .keras or .h5) picks the format")
      ->required()
      ->check(CLI::Validator(check_output_format, "FILE.kiln|.keras|.h5"));
  quantize->add_option("--mode", arguments.mode, "int8 (the default), int4 (by blocks of 128 input rows) or int4/<block>")
      ->check(CLI::Validator(check_quantize_mode, "int8|int4|int4/<block>"));
  CLI::App* plot = app.add_subcommand(
      "plot-model", "Draw a model's layer graph with names and shapes (Graphviz: scripts/install-graphviz.sh)");
  plot->add_option("FILE", arguments.plot.model_file, kModelFile)->required();
  plot->add_option("OUTPUT", arguments.plot.output, "the picture: .svg, .png, .pdf, or .dot for Graphviz's text")
      ->required();
  plot->add_option("--rankdir", arguments.plot.rankdir, "TB (top to bottom, the default) or LR")
      ->check(CLI::IsMember({"TB", "LR"}));
  plot->add_flag("--dtype", arguments.plot.show_dtype, "show each layer's output dtype");
  plot->add_flag("--activations", arguments.plot.show_activations, "show each layer's activation");
  plot->add_flag("--trainable", arguments.plot.show_trainable, "show whether each layer with weights is trainable");
  CLI::App* history = app.add_subcommand("plot-history", "Draw every logged metric per epoch from a CSVLogger file");
  history->add_option("FILE", arguments.file, "a CSV file with an epoch column (kiln::CSVLogger's)")->required();
  history->add_option("OUTPUT", arguments.output, "the SVG file to write")->required();
  CLI::App* ops = app.add_subcommand(
      "ops", "List every registered op with its backward rule or why it has none, as docs/ops.md's table");
  ops->add_option("--gradchecks", arguments.gradchecks,
                  "a KILN_OPS_LOG file the float64 gradient checks wrote (make ops-table): adds the ops each "
                  "backward rule makes and the test that checks it");
}

void run(const Arguments& arguments) {
  if (arguments.command == "summary") return kiln::cli::summary(arguments.file, std::cout);
  if (arguments.command == "config") return kiln::cli::config(arguments.file, std::cout);
  if (arguments.command == "verify") return kiln::cli::verify(arguments.file, std::cout);
  if (arguments.command == "predict") return kiln::cli::predict(arguments.predict, std::cout);
  if (arguments.command == "convert") return kiln::cli::convert(arguments.file, arguments.output, std::cout);
  if (arguments.command == "quantize")
    return kiln::cli::quantize(arguments.file, arguments.output, arguments.mode, std::cout);
  if (arguments.command == "plot-model") return kiln::cli::plot_model(arguments.plot, std::cout);
  if (arguments.command == "plot-history") return kiln::cli::plot_history(arguments.file, arguments.output, std::cout);
  if (arguments.command == "ops") return kiln::cli::ops_table(arguments.gradchecks, std::cout);
  throw std::logic_error("no command '" + arguments.command + "'");
}

// The message on one line: every run of white space holding a line break becomes one space.
std::string one_line(const std::string& message) {
  std::string line;
  bool breaking = false;
  for (char c : message) {
    if (c == '\n' || c == '\r') {
      breaking = true;
      while (!line.empty() && (line.back() == ' ' || line.back() == '\t')) line.pop_back();
    } else if (breaking && (c == ' ' || c == '\t')) {
      continue;
    } else {
      if (breaking && !line.empty()) line += ' ';
      breaking = false;
      line += c;
    }
  }
  return line.empty() ? "unknown error" : line;
}

int fail(const std::string& message) {
  std::cout.flush();
  std::cerr << "kiln: error: " << one_line(message) << std::endl;
  return kFailure;
}

// Runs the command; every failure becomes one line on stderr and exit status 1.
int run_guarded(const Arguments& arguments) {
  try {
    run(arguments);
    std::cout.flush();
    if (!std::cout || std::fflush(stdout) != 0) return fail("cannot write to standard output");
    return 0;
  } catch (const std::bad_alloc&) {
    return fail("out of memory");
  } catch (const std::exception& error) {
    return fail(error.what());
  } catch (...) {
    return fail("unknown error");
  }
}

}  // namespace

int main(int argc, char** argv) {
  // A closed pipe (kiln predict ... | head) makes writes fail instead of killing the tool.
  std::signal(SIGPIPE, SIG_IGN);
  try {
    CLI::App app{"Inspect, convert and run model files: kiln's, Keras 3 .keras and legacy Keras .h5.", "kiln"};
    Arguments arguments;
    declare(app, arguments);
    // An unknown first word that is near a command is most likely a typo of it.
    if (argc > 1 && argv[1][0] != '-') {
      const std::string word = argv[1];
      bool known = false;
      for (const CLI::App* command : app.get_subcommands({})) known = known || command->get_name() == word;
      if (!known) {
        const std::string nearest = nearest_command(app, word);
        std::cerr << "kiln: '" << word << "' is not a command"
                  << (nearest.empty() ? "" : "; did you mean '" + nearest + "'?")
                  << "\nRun with --help for more information.\n";
        return kUsage;
      }
    }
    try {
      app.parse(argc, argv);
      if (app.get_subcommands().empty())
        throw CLI::RequiredError("A subcommand (summary, config, verify, predict or convert)");
    } catch (const CLI::ParseError& error) {
      const int status = app.exit(error);  // prints help, the version, or the usage error
      return status == 0 ? 0 : kUsage;
    }
    arguments.command = app.get_subcommands().at(0)->get_name();
    return run_guarded(arguments);
  } catch (const std::exception& error) {
    return fail(error.what());
  } catch (...) {
    return fail("unknown error");
  }
}
