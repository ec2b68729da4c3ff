# Keras 2's meaning of an LSTM in a Keras 2 file, computed by Keras 3.16 (numpy backend): the layers of
# ../keras2/simple_lstm_tf_keras_2_model.h5 rebuilt in Keras 3 with Keras 2's hard_sigmoid,
# clip(0.2 x + 0.5, 0, 1), as recurrent_activation, the file's weights set, and its 100 stored inputs predicted.
# Run with ../../shared/tools/keras-oracle/kpython make_keras2_lstm.py from this folder.
import h5py
import numpy as np
import keras
from keras import ops


def keras2_hard_sigmoid(x):
    return ops.clip(0.2 * x + 0.5, 0.0, 1.0)


source = h5py.File("../keras2/simple_lstm_tf_keras_2_model.h5", "r")
weights = source["model_weights"]
lstm = keras.layers.LSTM(50, activation="tanh", recurrent_activation=keras2_hard_sigmoid, unit_forget_bias=True)
dense = keras.layers.Dense(1)
model = keras.Sequential([keras.Input((1, 1)), lstm, dense])
lstm.set_weights([weights["lstm_1/lstm_1/kernel:0"][()], weights["lstm_1/lstm_1/recurrent_kernel:0"][()],
                  weights["lstm_1/lstm_1/bias:0"][()]])
dense.set_weights([weights["dense_1/dense_1/kernel:0"][()], weights["dense_1/dense_1/bias:0"][()]])
inputs = h5py.File("../keras2/simple_lstm_tf_keras_2_inputs_and_outputs.h5", "r")["inputs/lstm_1_input"][()]
predicted = model.predict(inputs, verbose=0)
# Keras 3's own hard_sigmoid gives other numbers: the file's meaning matters.
keras3 = keras.Sequential([keras.Input((1, 1)), keras.layers.LSTM(50, recurrent_activation="hard_sigmoid"),
                           keras.layers.Dense(1)])
keras3.set_weights(model.get_weights())
print("largest difference from Keras 3's hard_sigmoid:", np.abs(keras3.predict(inputs, verbose=0) - predicted).max())
with h5py.File("simple_lstm_tf_keras_2.keras2_semantics.h5", "w") as out:
    out["inputs/input_0"] = inputs
    out["outputs/output_0"] = predicted
