#pragma once
// What initializers, regularizers and constraints share: a registered class named as Keras names it, and
// its arguments read from a Keras object config with every default filled in (internal).
#include <string>

#include <kiln/layers/config.hpp>

namespace kiln::detail {

// The class a Keras object config names: a string ("l2"), or the map {"class_name": "L2", "config": {...}}
// whose "registered_name", when set, wins (a class of the user's own). ConfigError naming `kind`
// ("a regularizer") for anything else.
std::string configured_class(const Config& config, const std::string& kind);

// `defaults` with the arguments of the map `config["config"]` (absent or null: none) put in: each keeps its
// default's type (a number, a string, a flag; an integer default also takes a list of ints, as an axis does; a null
// default takes any value) and a null leaves the
// default. ConfigError naming `who` for an unknown argument or one of another type.
Config configured_arguments(const Config& defaults, const Config& config, const std::string& who);

// Keras's form {"class_name": ..., "config": ...}; a class outside kiln ("acme>Name") also names its key
// as "registered_name", so it is found again whatever its class name.
Config configured_object(const std::string& key, const std::string& class_name, const Config& arguments);

}  // namespace kiln::detail
