#pragma once
// Kernels for the ops whose forward or backward computes one flat buffer and hands out its parts (fused
// attention, the recurrent op): the parts are views the planner aliases (Sharing::alias, at flat_part_offset),
// and these copies are the fallback.
#include <cstdint>
#include <cstring>
#include <vector>

#include <kiln/core/op.hpp>
#include <kiln/core/parallel.hpp>

namespace kiln::detail {

// The output is the head of input 0 (the planner aliases it; this copy is the fallback).
template <class T>
void head_kernel(const KernelContext& context) {
  const T* state = context.in<T>(0);
  T* out = context.out<T>();
  if (state != out) std::memcpy(out, state, context.output_size() * sizeof(T));
}

// Inputs (flat buffer, then one input per part, shaped as its part): part `part` of the flat buffer, the
// parts laid out one after another in input order. Where it starts, in elements (the op's alias_offset):
inline std::int64_t flat_part_offset(const std::vector<Shape>& inputs, const Attributes& attributes) {
  const std::int64_t part = attributes.get_int("part");
  std::int64_t offset = 0;
  for (std::int64_t i = 0; i < part; ++i) offset += inputs[static_cast<std::size_t>(1 + i)].num_elements();
  return offset;
}

template <class T>
void flat_part_kernel(const KernelContext& context) {
  const std::int64_t part = context.attributes().get_int("part");
  std::int64_t offset = 0;
  for (int i = 0; i < part; ++i) offset += context.input_shape(1 + i).num_elements();
  const T* source = context.in<T>(0) + offset;
  T* target = context.out<T>();
  const auto size = static_cast<std::int64_t>(context.output_size());
  parallel_for(size, workers_for_elements(size), [&](std::int64_t begin, std::int64_t end, int) {
    std::memcpy(target + begin, source + begin, static_cast<std::size_t>(end - begin) * sizeof(T));
  });
}

}  // namespace kiln::detail
