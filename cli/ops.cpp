// `kiln ops`: every registered op with its backward rule (or why it has none), the ops that rule makes, and
// the float64 gradient check that runs it: the table docs/ops.md holds.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/core/op.hpp>
#include "commands.hpp"

namespace kiln::cli {
namespace {

// What the gradient checks logged of one op (tests/support/gradcheck.cpp, KILN_OPS_LOG).
struct Checked {
  std::set<std::string> made;   // the ops its backward rule made
  // The test cases whose float64 gradient check ran that rule, by how many rules the check ran: the first
  // is the most direct (a check of this op alone, say).
  std::set<std::pair<int, std::string>> tests;
};

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string::size_type start = 0;
  for (;;) {
    const std::string::size_type end = text.find(separator, start);
    parts.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}

std::map<std::string, Checked> read_log(const std::string& path) {
  std::map<std::string, Checked> checked;
  if (path.empty()) return checked;
  std::ifstream in(path);
  if (!in) throw Error("kiln ops: cannot read the gradient check log '" + path + "'");
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    const std::vector<std::string> fields = split(line, '\t');
    int rules = 0;
    if (fields.size() == 4) rules = std::atoi(fields[3].c_str());
    if (fields.size() != 4 || fields[0].empty() || rules <= 0)
      throw Error("kiln ops: " + path + " line " + std::to_string(number) +
                  " is not op<TAB>made<TAB>test<TAB>rules checked");
    Checked& entry = checked[fields[0]];
    for (const std::string& made : split(fields[1], ','))
      if (!made.empty()) entry.made.insert(made);
    entry.tests.insert({rules, fields[2]});
  }
  return checked;
}

// A table cell: no line breaks, and | escaped.
std::string cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += "\\|";
    else if (c == '\n' || c == '\r') out += ' ';
    else out += c;
  }
  return out;
}

// Whether no input of `op` carries a gradient (non_differentiable_inputs names them all).
bool no_differentiable_input(const OpDef& op) {
  for (int i = 0; i < op.max_inputs(); ++i)
    if (op.input_is_differentiable(i)) return false;
  return true;
}

std::string backward_of(const OpDef& op) {
  std::string text;
  if (op.has_backward()) {
    text = "rule";
  } else if (!op.not_differentiable_reason().empty()) {
    text = "not differentiable: " + op.not_differentiable_reason();
  } else if (no_differentiable_input(op)) {
    text = "none needed";
  } else {
    text = "**none, and no reason given**";
  }
  std::vector<std::string> stopped;
  for (int i = 0; i < op.max_inputs(); ++i)
    if (!op.input_is_differentiable(i)) stopped.push_back(std::to_string(i));
  if (!stopped.empty()) {
    std::string inputs;
    for (const std::string& index : stopped) inputs += (inputs.empty() ? "" : ", ") + index;
    text += "; input" + std::string(stopped.size() > 1 ? "s " : " ") + inputs + " carr" +
            (stopped.size() > 1 ? "y" : "ies") + " none: " + op.non_differentiable_inputs_reason();
  }
  return cell(text);
}

std::string inputs_of(const OpDef& op) {
  if (op.min_inputs() == op.max_inputs()) return std::to_string(op.min_inputs());
  return std::to_string(op.min_inputs()) + "-" + std::to_string(op.max_inputs());
}

}  // namespace

void ops_table(const std::string& gradcheck_log, std::ostream& out) {
  const std::map<std::string, Checked> checked = read_log(gradcheck_log);
  std::vector<const OpDef*> ops = op_registry().all();
  std::sort(ops.begin(), ops.end(), [](const OpDef* a, const OpDef* b) { return a->name() < b->name(); });

  std::size_t with_rule = 0, with_reason = 0, no_input = 0, without = 0, rules_checked = 0;
  for (const OpDef* op : ops) {
    if (op->has_backward()) {
      ++with_rule;
      if (checked.count(op->name())) ++rules_checked;
    } else if (!op->not_differentiable_reason().empty()) {
      ++with_reason;
    } else if (no_differentiable_input(*op)) {
      ++no_input;
    } else {
      ++without;
    }
  }
  out << "# kiln's ops and their gradients\n\n"
      << "Every registered op (`Graph::add_op` makes nodes of them by name), with its backward rule or the reason it "
         "has none, the ops its backward rule adds to the graph (fused gradient ops among them), and a test whose "
         "float64 gradient check (`tests/support/gradcheck`) runs that rule. Made by `make ops-table`; the test "
         "`ops_table_is_current` fails when this page is out of date.\n\n"
      << ops.size() << " ops: " << with_rule << " with a backward rule (" << rules_checked
      << " of them run by a float64 gradient check), " << with_reason << " not differentiable, with the reason, "
      << no_input << " with no input that carries a gradient (random draws, shapes, comparisons), " << without
      << " with none of these.\n\n"
      << "| op | inputs | backward | its backward makes | float64 gradient check |\n"
      << "|---|---|---|---|---|\n";
  for (const OpDef* op : ops) {
    std::string made, test = "—";
    if (const auto found = checked.find(op->name()); found != checked.end()) {
      for (const std::string& name : found->second.made) made += (made.empty() ? "" : ", ") + ("`" + name + "`");
      test = cell(found->second.tests.begin()->second);
      if (found->second.tests.size() > 1) test += " (+" + std::to_string(found->second.tests.size() - 1) + " more)";
    }
    out << "| `" << op->name() << "` | " << inputs_of(*op) << " | " << backward_of(*op) << " | " << made << " | "
        << test << " |\n";
  }
  for (const auto& [name, entry] : checked)
    if (!op_registry().contains(name)) throw Error("kiln ops: the log names '" + name + "', which is not registered");
}

}  // namespace kiln::cli
