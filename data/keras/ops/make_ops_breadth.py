"""Makes ops_recorded.keras and ops_read.keras (with their .io.h5) with Keras 3 itself.

Run with the oracle's Python (../../shared/tools/keras-oracle/kpython make_ops_breadth.py, from this folder).
Two functional models made of keras.ops calls only (no weights) on two inputs x and y of shape (None, 4, 6):
`ops_recorded` uses the calls kiln's own ops record as (tests/layers/operation_test.cpp builds the same model
in C++ and compares its nodes with these), `ops_read` the forms kiln reads but does not write (numbers as
arguments, NumPy's axis forms, classes kiln computes from several ops). Inputs: 5 rows uniform in [-2, 2]
(seed 7); /outputs/output_<k> is Keras's model.predict. Keras reloads each file and predicts the same bits
before it is kept.
"""
import h5py
import keras
import numpy as np
from keras import ops


def recorded(x, y):
    p = ops.add(ops.absolute(x), 0.5)
    return [
        ops.exp(x), ops.log(p), ops.sqrt(p), ops.rsqrt(p), ops.square(x), ops.sin(x), ops.cos(x), ops.tanh(x),
        ops.negative(x), ops.relu(x), ops.relu6(ops.multiply(x, 4.0)), ops.sigmoid(x), ops.softplus(x),
        ops.softsign(x), ops.silu(x), ops.log_sigmoid(x), ops.hard_sigmoid(x), ops.hard_silu(x), ops.hard_tanh(x),
        ops.tanh_shrink(x), ops.sparse_plus(x), ops.sparse_sigmoid(x), ops.selu(x), ops.leaky_relu(x, 0.1),
        ops.elu(x, 0.5), ops.celu(x, 0.7), ops.gelu(x, approximate=False), ops.gelu(x), ops.soft_shrink(x, 0.3),
        ops.hard_shrink(x, 0.2), ops.squareplus(x, 3.0), ops.glu(x), ops.softmax(x, axis=1), ops.log_softmax(x),
        ops.sparsemax(x),
        ops.power(p, y), ops.power(x, 2.0), ops.matmul(x, ops.transpose(y, (0, 2, 1))), ops.reshape(x, (-1, 24)),
        ops.concatenate([x, y], axis=1), ops.mean(x, axis=1), ops.sum(x, axis=(1, 2), keepdims=True),
        ops.max(x, axis=-1), ops.min(x, axis=(1, 2)), ops.squeeze(ops.expand_dims(x, 1), axis=1),
        ops.where(ops.greater(x, y), x, y), ops.where(ops.greater_equal(x, y), y, x), ops.where(ops.less(x, y), x, y),
        ops.where(ops.less_equal(x, y), y, x), ops.where(ops.equal(x, ops.maximum(x, y)), x, y),
        ops.flip(x, axis=1), ops.pad(x, ((0, 0), (1, 2), (0, 0))), ops.subtract(x, y), ops.multiply(x, y),
        ops.divide(x, p), ops.minimum(x, y),
    ]


def read(x, y):
    p = ops.add(ops.absolute(x), 0.5)
    return [
        ops.reciprocal(p), ops.clip(x, -0.5, 0.5), ops.stack([x, y], axis=1), ops.var(x, axis=1),
        ops.std(x, axis=2, keepdims=True), ops.swapaxes(x, 1, 2), ops.moveaxis(x, 1, 2), ops.threshold(x, 0.1, -1.0),
        ops.normalize(x), ops.normalize(x, axis=1, order=1), ops.add(ops.zeros_like(x), ops.ones_like(x)),
        ops.expand_dims(x, (1, 3)), ops.flip(x, axis=(1, 2)), ops.power(2.0, x), ops.where(ops.less(x, 0.5), x, 0.0),
        ops.where(ops.greater(0.0, x), 1.0, y), ops.true_divide(x, p), ops.subtract(1.5, x),
        ops.squeeze(ops.expand_dims(x, 1)), ops.pad(x, ((0, 0), (2, 0), (1, 1))), ops.sparsemax(x, axis=1),
        ops.leaky_relu(x), ops.mean(x, axis=[1]),
    ]


def make(name, build, data):
    x = keras.Input((4, 6), name="x")
    y = keras.Input((4, 6), name="y")
    model = keras.Model([x, y], build(x, y), name=name)
    outputs = model.predict(data, verbose=0)
    model.save(name + ".keras")
    again = keras.saving.load_model(name + ".keras")
    for a, b in zip(outputs, again.predict(data, verbose=0)):
        assert np.array_equal(a, b), name
    with h5py.File(name + ".io.h5", "w") as f:
        for i, array in enumerate(data):
            f.create_dataset("inputs/input_%d" % i, data=array)
        for k, array in enumerate(outputs):
            f.create_dataset("outputs/output_%d" % k, data=np.asarray(array, dtype=np.float32))
    print(name, len(outputs), "outputs")


rng = np.random.default_rng(7)
data = [rng.uniform(-2, 2, (5, 4, 6)).astype(np.float32) for _ in range(2)]
make("ops_recorded", recorded, data)
make("ops_read", read, data)
