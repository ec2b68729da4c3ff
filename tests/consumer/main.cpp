// An outside project: builds against the installed kiln package and trains one step of y = x·w. It has
// headers of its own named core/shape.hpp, layers/layer.hpp and ops/ops.hpp, first on its include path.
#include <kiln/kiln.hpp>

#include <cstdio>

#include "core/shape.hpp"
#include "layers/layer.hpp"
#include "ops/ops.hpp"

int main() {
  kiln::Graph graph;
  const kiln::Tensor x = graph.placeholder({kiln::Shape::unknown, 3}, kiln::DType::float32, "x");
  const kiln::Tensor w = graph.variable("w", kiln::Array::full({3, 1}, 0.5));
  const kiln::Tensor loss = kiln::ops::mean(kiln::ops::square(kiln::ops::matmul(x, w)));
  const kiln::Tensor grad = kiln::gradients(loss, {w}).front();
  kiln::Program program(graph, {loss}, {{w, w - grad * 0.1}});
  const kiln::Array batch = kiln::Array::full({4, 3}, 1.0);
  program.feed(x, batch);
  program.run();
  const double before = program.scalar(loss);
  program.run();
  const double after = program.scalar(loss);
  const consumer::Shape own_shape{4, 3};
  const consumer::Layer own_layer;
  std::printf("consumer: loss %.4f -> %.4f; its own %s and a %dx%d shape\n", before, after, own_layer.name,
              consumer::ops::twice(own_shape.rows) / 2, own_shape.columns);
  return after < before ? 0 : 1;
}
