# A model with EfficientNet's ImageNet preprocessing, Keras 3.16 (weights=None leaves it out of the
# application fixtures): Rescaling(1/255), Normalization with per-channel mean and variance, then Rescaling by
# a per-channel list (as keras.applications.efficientnet writes it) and by a numpy array (serialized as
# "__numpy__"), with a per-channel offset. Saved as rescaling_per_channel.keras with its inputs and Keras's
# predictions in rescaling_per_channel.io.h5.
# Run with ../../shared/tools/keras-oracle/kpython make_rescaling_per_channel.py from this folder.
import h5py
import numpy as np
import keras

keras.utils.set_random_seed(7)
inputs = keras.Input((6, 6, 3))
x = keras.layers.Rescaling(1.0 / 255.0)(inputs)
x = keras.layers.Normalization(axis=-1, mean=[0.485, 0.456, 0.406], variance=[0.229**2, 0.224**2, 0.225**2])(x)
x = keras.layers.Rescaling([1.0 / np.sqrt(s) for s in [0.229, 0.224, 0.225]])(x)
x = keras.layers.Rescaling(np.array([0.5, 2.0, -1.0], dtype="float32"), offset=[0.1, -0.2, 0.3])(x)
x = keras.layers.Conv2D(4, 3, activation="relu")(x)
x = keras.layers.GlobalAveragePooling2D()(x)
outputs = keras.layers.Dense(2)(x)
model = keras.Model(inputs, outputs, name="rescaling_per_channel")
model.save("rescaling_per_channel.keras")
images = np.random.default_rng(7).uniform(0, 255, (4, 6, 6, 3)).astype("float32")
reloaded = keras.saving.load_model("rescaling_per_channel.keras")
predicted = reloaded.predict(images, verbose=0)
assert np.allclose(predicted, model.predict(images, verbose=0), rtol=0, atol=1e-6)
with h5py.File("rescaling_per_channel.io.h5", "w") as out:
    out["inputs/input_0"] = images
    out["outputs/output_0"] = predicted
