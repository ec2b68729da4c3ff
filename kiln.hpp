#pragma once
// Everything a kiln user needs: #include <kiln/kiln.hpp>
#include "core/array.hpp"
#include "core/autodiff.hpp"
#include "core/error.hpp"
#include "core/graph.hpp"
#include "core/program.hpp"
#include "core/rng.hpp"
#include "core/shape.hpp"
#include "core/tensor.hpp"
#include "ops/ops.hpp"
