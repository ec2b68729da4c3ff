#include <catch2/catch.hpp>

#include <algorithm>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/ops/ops.hpp>

using namespace kiln;

TEST_CASE("nodes get unique, scoped, Keras-like names", "[core][graph]") {
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 4}, DType::float32, "x");
  const Tensor w = graph.variable("kernel", Array({4, 2}));
  {
    Graph::NameScope scope(graph, "dense");
    CHECK(ops::matmul(x, w).name() == "dense/matmul");
    CHECK(ops::matmul(x, w).name() == "dense/matmul_1");
  }
  CHECK(ops::add(x, x).name() == "add");
  CHECK(ops::add(x, x).name() == "add_1");
  CHECK(graph.placeholder({2}, DType::float32, "x").name() == "x_1");
  CHECK(graph.trainable_variables().size() == 1);
  CHECK(graph.placeholders().size() == 2);
}

TEST_CASE("a shape mismatch throws ShapeError naming the op, the node and every input shape", "[core][graph]") {
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 150, 512}, DType::float32, "x");
  const Tensor w = graph.variable("w", Array({256, 64}));
  Graph::NameScope scope(graph, "dense_1");
  CHECK_THROWS_AS(ops::matmul(x, w), ShapeError);
  CHECK_THROWS_WITH(ops::matmul(x, w),
                    "matmul 'dense_1/matmul': inner dimensions differ: (None, 150, 512) @ (256, 64)");
  CHECK_THROWS_WITH(ops::add(graph.placeholder({2, 3}), graph.placeholder({4, 3})),
                    Catch::Contains("add 'dense_1/add'") && Catch::Contains("(2, 3), (4, 3)"));
}

TEST_CASE("unknown ops, unknown attributes, wrong input counts and mixed dtypes are typed errors", "[core][graph]") {
  Graph graph;
  const Tensor x = graph.placeholder({2, 3});
  const Tensor y = graph.placeholder({2, 3}, DType::float64);
  CHECK_THROWS_AS(graph.add_op("kiln>Nope", {x}), ConfigError);
  CHECK_THROWS_WITH(graph.add_op("kiln>Sofmax", {x}), Catch::Contains("kiln>Softmax"));
  CHECK_THROWS_WITH(graph.add_op("kiln>Add", {x, x}, Attributes().set("axis", 1)),
                    Catch::Contains("unknown attribute 'axis'"));
  CHECK_THROWS_WITH(graph.add_op("kiln>Add", {x}), Catch::Contains("takes 2 inputs, got 1"));
  CHECK_THROWS_AS(ops::add(x, y), DTypeError);
  CHECK_THROWS_WITH(ops::add(x, y), Catch::Contains("float32(2, 3), float64(2, 3)"));
  CHECK_THROWS_AS(Tensor().shape(), Error);
  Graph other;
  CHECK_THROWS_AS(ops::add(x, other.placeholder({2, 3})), Error);
}

TEST_CASE("attribute getters name the key and the expected type", "[core][attributes]") {
  Attributes attributes;
  attributes.set("axis", -1).set("epsilon", 1e-3).set("name", "x").set("perm", std::vector<std::int64_t>{1, 0});
  CHECK(attributes.get_int("axis") == -1);
  CHECK(attributes.get_double("axis") == -1.0);
  CHECK(attributes.get_ints("perm").size() == 2);
  CHECK_THROWS_WITH(attributes.get_bool("axis"), "attribute 'axis' should be a bool, but is int");
  CHECK_THROWS_WITH(attributes.get_int("missing"), "missing attribute 'missing'");
  CHECK(attributes.to_string() == "{axis=-1, epsilon=0.001, name=x, perm=[1, 0]}");
}

TEST_CASE("attributes take sizes and other unsigned ints, refusing those past int64", "[core][attributes]") {
  const std::vector<int> values(5);
  Attributes attributes;
  attributes.set("units", values.size()).set("count", 7u).set("big", 9ull);
  CHECK(attributes.get_int("units") == 5);
  CHECK(attributes.get_int("count") == 7);
  CHECK(attributes.get_int("big") == 9);
  CHECK_THROWS_AS(attributes.set("huge", ~0ull), ConfigError);
}

TEST_CASE("every op has a gradient rule or says why not, and the registry is consistent", "[core][registry]") {
  REQUIRE_NOTHROW(op_registry().check());
  for (const OpDef* op : op_registry().all()) {
    INFO(op->name());
    bool any_differentiable_input = false;
    for (int i = 0; i < std::min(op->max_inputs(), 8); ++i)
      any_differentiable_input = any_differentiable_input || op->input_is_differentiable(i);
    CHECK((op->has_backward() || !op->not_differentiable_reason().empty() || !any_differentiable_input));
    // kiln's own ops, and ops the tests register to exercise the op interface (test>...).
    CHECK((op->name().rfind("kiln>", 0) == 0 || op->name().rfind("test>", 0) == 0));
  }
}

TEST_CASE("assigning a variable checks shape and dtype", "[core][graph]") {
  Graph graph;
  const Tensor w = graph.variable("w", Array({2, 2}));
  graph.assign(w, Array::full({2, 2}, 3.0));
  CHECK(graph.value(w).flat(3) == 3.0);
  CHECK_THROWS_AS(graph.assign(w, Array({3})), ShapeError);
  CHECK_THROWS_AS(graph.assign(w, Array({2, 2}, DType::float64)), DTypeError);
  CHECK_THROWS_AS(graph.placeholder({-3}), ShapeError);
}

TEST_CASE("values are read and assigned only through their own graph, and only variables are assigned",
          "[core][graph]") {
  Graph first, second;
  const Tensor a = first.variable("a", Array::full({2}, 1.0));
  const Tensor b = second.variable("b", Array::full({3}, 2.0));  // the same node id, in another graph
  CHECK_THROWS_WITH(first.value(b), Catch::Contains("'b' belongs to another graph"));
  CHECK_THROWS_AS(first.assign(b, Array::full({3}, 0.0)), Error);
  CHECK(second.value(b).flat(0) == 2.0);  // untouched
  const Tensor c = first.constant(Array::full({2}, 3.0), "c");
  CHECK_THROWS_WITH(first.assign(c, Array::full({2}, 0.0)), Catch::Contains("only a variable can be assigned"));
  first.assign(a, Array::full({2}, 5.0));
  CHECK(first.value(a).flat(1) == 5.0);
}
