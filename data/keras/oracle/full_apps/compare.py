# Part of check.sh: kiln predict's outputs against Keras's, relative to the largest output.
import glob, numpy as np
for f in sorted(glob.glob("*.kiln.csv")):
    n = f[:-9]
    try:
        r = np.load(n + ".out.npy").reshape(2, -1); k = np.loadtxt(f, delimiter=",", skiprows=1).reshape(2, -1)
        print(n, "kiln predict vs Keras: rel diff %.2e" % (np.abs(k - r).max() / np.abs(r).max()))
    except Exception as e:
        print(n, "no comparison:", str(e)[:100])
