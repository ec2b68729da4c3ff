#!/usr/bin/python3
"""keras-hub reads the backbones kiln writes: for each fixture in ../hub/ and ../hub_variants/, kiln's copy (made by
`kiln convert M.keras OUT/M.keras`) is loaded by keras.saving.load_model and predicts keras-hub's stored outputs.

    for f in data/keras/hub/*.keras data/keras/hub_variants/*.keras data/keras/hub_tasks/*.keras; do
      build/cli/kiln convert $f /tmp/hubw/$(basename $f); done
    shared/tools/keras-oracle/kpython data/keras/oracle/check_hub_writes.py /tmp/hubw
"""
import sys
import glob, os, h5py, numpy as np, keras, keras_hub
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = sys.argv[1]
for folder in ["hub", "hub_variants"]:
    for path in sorted(glob.glob(os.path.join(HERE, "..", folder, "*.keras"))):
        name = os.path.basename(path)[:-6]
        io = h5py.File(path[:-6] + ".io.h5")
        xs = [io["inputs"][f"input_{i}"][:] for i in range(len(io["inputs"]))]
        stored = io["outputs/output_0"][:]
        try:
            m = keras.saving.load_model(os.path.join(OUT, name + ".keras"))
            feeds = {i.name.split(":")[0]: x for i, x in zip(m.inputs, xs)}
            y = m.predict(feeds, verbose=0)
            if isinstance(y, dict): y = y["sequence_output"]
            err = np.abs(y - stored).max() / np.abs(stored).max()
            print(f"{name}: keras-hub reads kiln's file, max rel diff from its stored outputs {err:.2e}")
        except Exception as e:
            print(f"{name}: FAILED {type(e).__name__}: {str(e)[:200]}")

# The tasks of ../hub_tasks/: kiln's copies (OUT/<name>.keras) predict the outputs of keras-hub's own files, on the
# fixture's inputs where it has an .io.h5 (the TextClassifiers, the MaskedLMs) and on token ids otherwise (CausalLMs).
for path in sorted(glob.glob(os.path.join(HERE, "..", "hub_tasks", "*.keras"))):
    name = os.path.basename(path)[:-6]
    ids = (np.arange(10).reshape(2, 5) * 7 + 3) % 61
    feeds = {"token_ids": ids.astype("int32"), "padding_mask": np.ones((2, 5), "int32")}
    try:
        ours = keras.saving.load_model(os.path.join(OUT, name + ".keras"))
        theirs = keras.saving.load_model(path)
        if os.path.exists(path[:-6] + ".io.h5"):
            io = h5py.File(path[:-6] + ".io.h5")
            xs = [io["inputs"][f"input_{i}"][:] for i in range(len(io["inputs"]))]
            feeds = {i.name.split(":")[0]: x for i, x in zip(theirs.inputs, xs)}
        diff = np.abs(keras.ops.convert_to_numpy(ours(feeds)) - keras.ops.convert_to_numpy(theirs(feeds))).max()
        print(f"{name}: keras-hub reads kiln's file, max diff from its own file's logits {diff:.2e}")
    except Exception as e:
        print(f"{name}: FAILED {type(e).__name__}: {str(e)[:200]}")
