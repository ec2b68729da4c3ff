#include <kiln/layers/detail/decoding.hpp>

namespace kiln::detail {

namespace {
thread_local const DecodingStep* current = nullptr;
}  // namespace

const DecodingStep* decoding() { return current; }

DecodingScope::DecodingScope(const DecodingStep& step) : previous_(current) { current = &step; }

DecodingScope::~DecodingScope() { current = previous_; }

}  // namespace kiln::detail
