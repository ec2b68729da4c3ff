#pragma once
// Internal: the streaming metrics (optim/streaming_metrics.cpp), registered with the built-ins by
// metric_registry() on its first use.
#include <kiln/core/registry.hpp>
#include <kiln/optim/metrics.hpp>

namespace kiln::detail {

/// Precision, Recall, AUC, F1Score, FBetaScore, R2Score and RootMeanSquaredError.
void register_streaming_metrics(Registry<MetricClass>& registry);

}  // namespace kiln::detail
