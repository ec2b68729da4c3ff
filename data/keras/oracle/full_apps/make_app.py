# Part of check.sh: Keras builds keras.applications.<name> (weights=None), predicts two random images, saves .keras.
import sys, numpy as np, keras
name = sys.argv[1]
keras.utils.set_random_seed(1)
ctor = getattr(keras.applications, name)
kwargs = dict(weights=None)
try:
    m = ctor(classifier_activation=None, **kwargs)
except TypeError:
    m = ctor(**kwargs)
shape = m.input_shape[1:]
if None in shape:
    m = ctor(classifier_activation=None, input_shape=(224, 224, 3), **kwargs); shape = (224, 224, 3)
x = np.random.default_rng(0).uniform(0, 255, size=(2,) + shape).astype("float32")
y = m.predict(x, verbose=0)
m.save(f"{name}.keras")
np.savetxt(f"{name}.in.csv", x.reshape(2, -1), delimiter=",", fmt="%.6f")
np.save(f"{name}.out.npy", y)
print(name, m.count_params(), shape, float(np.abs(y).max()))
