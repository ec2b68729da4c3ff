#pragma once
// What keras-hub's task models (CausalLM, TextClassifier, MaskedLM) share when read from a config, and the special
// tokens their text helpers look up.
#include <cstdint>
#include <string>
#include <vector>

#include <kiln/hub/tokenizers/tokenizer.hpp>
#include <kiln/layers/config.hpp>

namespace kiln::hub::detail {

/// The class name of a task config's serialized backbone; ConfigError naming `task` ("CausalLM") without one.
std::string backbone_class_of(const Config& config, const std::string& task);

/// A task's base config: its name (the snake-cased class name unless given), and trainable and dtype when given.
Config task_base(const Config& config, const std::string& class_name);

/// The id of the first of `candidates` the tokenizer's vocabulary holds, or -1. An id counts only when it maps back
/// to the token: SentencePiece answers a missing piece with <unk>'s id.
std::int64_t find_special_token(const Tokenizer& tokenizer, const std::vector<std::string>& candidates);

}  // namespace kiln::hub::detail
