#!/usr/bin/python3
"""keras-hub's MaskedLM tasks over three backbone fixtures (../hub/bert.keras, distil_bert.keras, roberta.keras),
the heads' weights perturbed, saved by keras-hub as ../hub_tasks/<name>_masked_lm.keras with the backbone fixture's
inputs, mask positions (4 a row, repeats and the first and last position included) and keras-hub's scores in
<name>_masked_lm.io.h5 (the fixture IO format of make_fixtures.py); then keras-hub's preset of the BERT one in
../hub_presets/bert_masked_lm.

    shared/tools/keras-oracle/kpython make_hub_masked_lms.py
"""
import os, sys, shutil
import numpy as np
os.environ.setdefault("KERAS_BACKEND", "numpy")
sys.path.insert(0, "/work/shared/tools/keras-oracle")
import h5py, keras, keras_hub
import make_fixtures as mf

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "hub_tasks")
tasks = {
    "bert": keras_hub.models.BertMaskedLM,
    "distil_bert": keras_hub.models.DistilBertMaskedLM,
    "roberta": keras_hub.models.RobertaMaskedLM,
}
for name, cls in tasks.items():
    backbone = keras.saving.load_model(os.path.join(HERE, "..", "hub", name + ".keras"))
    keras.utils.set_random_seed(mf.seed_of(name + "_masked_lm"))
    task = cls(backbone=backbone, preprocessor=None)
    rng = np.random.default_rng(mf.seed_of(name + "_masked_lm"))
    for layer in task.layers:
        if layer is not backbone:
            for v in layer.weights:
                if v.path.startswith(backbone.name + "/") or "embedding" in v.path:
                    continue  # the tied token embedding is the backbone's
                v.assign(v.numpy() + rng.normal(0, 0.1, v.shape).astype(np.float32))
    with h5py.File(os.path.join(HERE, "..", "hub", name + ".io.h5")) as f:
        feeds = {f["inputs"][k].attrs["name"]: f["inputs"][k][()] for k in f["inputs"]}
    batch, steps = feeds["token_ids"].shape
    positions = rng.integers(0, steps, size=(batch, 4)).astype(np.int32)
    positions[0, 0], positions[0, 1], positions[-1, -1] = 0, 0, steps - 1
    feeds["mask_positions"] = positions
    names = [i.name.split(":")[0] for i in task.inputs]
    xs = [feeds[n] for n in names]
    y = keras.ops.convert_to_numpy(task({n: feeds[n] for n in names}))
    path = os.path.join(OUT, name + "_masked_lm.keras")
    task.save(path)
    mf.write_io(os.path.join(OUT, name + "_masked_lm.io.h5"), task, xs, [y])
    print(name, names, y.shape, float(np.abs(y).max()))

preset = os.path.join(HERE, "..", "hub_presets", "bert_masked_lm")
shutil.rmtree(preset, ignore_errors=True)
keras.saving.load_model(os.path.join(OUT, "bert_masked_lm.keras")).save_to_preset(preset)
print(sorted(os.listdir(preset)))
