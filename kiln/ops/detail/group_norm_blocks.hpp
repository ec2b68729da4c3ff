#pragma once
// GroupNorm's kernels on a block of groups, dispatched by instruction set (internal to ops/: not installed; see
// isa.hpp). Their sums run in lanes of channels that the compiler vectorizes to the build's width.
#include <algorithm>
#include <cstdint>

#include <kiln/ops/detail/isa.hpp>

namespace kiln::detail {

// x seen as (N, pre, C, post) around the channel axis, in `groups` groups of C/G channels.
struct GroupLayout {
  std::int64_t batch = 0, pre = 1, channels = 0, post = 1, groups = 1;
  std::int64_t group_channels() const { return channels / groups; }
  std::int64_t group_size() const { return pre * group_channels() * post; }  // M: the values of one group
};

// The kernels work on blocks: a run of whole groups [g0, g1) of one sample n. For channels_last (post = 1) a block
// holds as many groups as fit in group_lanes channels, and its sums run in lanes, one per channel, over the
// positions, each group's lanes added up at the end in channel order: a sum in element order cannot vectorize (the
// compiler keeps its order), lanes can, and a block of several small groups keeps several vectors of lanes in
// flight at once. On the norms benchmark's (32, 256, 64) with 8 groups, GroupNorm took 4.7 ms a call element by
// element and 1.2 ms in one group's lanes (9f90d58); measured side by side later, one group's lanes 0.55 ms and a
// block's 0.27 (its gradients 0.96 and 0.69 ms against 0.52 and 0.40). A channel's lane and a group's order of lanes
// are the same however groups fall into blocks, so the results do not depend on the blocks (nor on the threads).
// Otherwise (a group wider than the lanes, or channels_first) a block is one group, summed element by element.
constexpr std::int64_t group_lanes = 64;

struct GroupBlock {
  std::int64_t n = 0, g0 = 0, g1 = 0;
};

// Groups in a block: as many as fit in the lanes, at most `most`.
inline std::int64_t groups_per_block(const GroupLayout& l, std::int64_t most) {
  if (l.post != 1 || l.group_channels() > group_lanes) return 1;
  return std::max<std::int64_t>(1, std::min(most, group_lanes / l.group_channels()));
}

template <class T>
struct GroupNormBlocks {
  // y = (x − mean)·rstd·gamma + beta over the block's groups.
  void (*forward)(const GroupLayout& l, const T* x, const T* gamma, const T* beta, T* y, const GroupBlock& b,
                  double epsilon);
  // dx = rstd·(g − mean(g) − x̂·mean(g·x̂)), g = dy·gamma, over the block's groups.
  void (*grad)(const GroupLayout& l, const T* x, const T* gamma, const T* dy, T* dx, const GroupBlock& b,
               double epsilon);
  // sums[c] += Σ dy·x̂ and sums[C + c] += Σ dy over the block's elements of channel c, in element order.
  void (*param_grad)(const GroupLayout& l, const T* x, const T* dy, double* sums, const GroupBlock& b,
                     double epsilon);
};

template <class T>
const GroupNormBlocks<T>& group_norm_blocks(Isa isa) {
  const IsaTables& tables = isa_tables(isa);
  return by_dtype<T>(tables.group_norm_float, tables.group_norm_double);
}
template <class T>
const GroupNormBlocks<T>& group_norm_blocks() {
  return group_norm_blocks<T>(active_isa());
}

}  // namespace kiln::detail
