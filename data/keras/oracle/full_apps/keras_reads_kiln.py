# Part of check.sh: Keras loads the .keras file kiln wrote and predicts the same two images.
import sys, numpy as np, keras
name = sys.argv[1]
m = keras.saving.load_model(f"{name}.kiln.keras")
x = np.loadtxt(f"{name}.in.csv", delimiter=",", dtype="float32").reshape((2,) + m.input_shape[1:])
y = m.predict(x, verbose=0); ref = np.load(f"{name}.out.npy")
print(name, "keras reads kiln's file: rel diff", float(np.abs(y - ref).max() / np.abs(ref).max()))
