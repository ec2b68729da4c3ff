#pragma once
// The only way kiln includes cereal's JSON archive and rapidjson. Private: never include it from a public header.
//
// Debian's cereal uses the system rapidjson, so the macros are RAPIDJSON_*, not upstream's CEREAL_RAPIDJSON_*.
// rapidjson reads its configuration macros once, at its first inclusion: if any rapidjson header came first,
// RAPIDJSON_ASSERT stays assert(), and malformed input aborts (debug) or dereferences null (-DNDEBUG).
#if defined(RAPIDJSON_RAPIDJSON_H_) || defined(CEREAL_ARCHIVES_JSON_HPP_)
#error "serialize/detail/cereal_json.hpp must be included before any rapidjson or cereal JSON header"
#endif

#include <kiln/core/error.hpp>

// An assertion inside rapidjson becomes a kiln exception, never an abort. (rapidjson 1.1.0 only uses it as a
// statement, so the do/while form is safe.)
#define RAPIDJSON_ASSERT(x)                                                                          \
  do {                                                                                               \
    if (!(x)) throw ::kiln::SerializationError("JSON: internal assertion failed in rapidjson: " #x); \
  } while (false)
#define RAPIDJSON_ASSERT_THROWS

// cereal's json.hpp would default both to accepting and writing NaN and Infinity, which are not JSON. kiln passes
// explicit flags anyway; strict defaults keep any other use of these headers from accepting them silently.
#define RAPIDJSON_PARSE_DEFAULT_FLAGS kParseNoFlags
#define RAPIDJSON_WRITE_DEFAULT_FLAGS kWriteNoFlags

#include <rapidjson/encodings.h>
#include <rapidjson/error/en.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>
#include <cereal/archives/json.hpp>
