// An outside project: builds against the installed kiln package and trains one step of y = x·w.
#include <kiln/kiln.hpp>

#include <cstdio>

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
  std::printf("consumer: loss %.4f -> %.4f\n", before, after);
  return after < before ? 0 : 1;
}
