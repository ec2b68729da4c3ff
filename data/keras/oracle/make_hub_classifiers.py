#!/usr/bin/python3
"""keras-hub's TextClassifier tasks over three backbone fixtures (../hub/bert.keras, distil_bert.keras,
roberta.keras), with 3 classes and the heads' weights perturbed, saved by keras-hub as
../hub_tasks/<name>_text_classifier.keras with the backbone fixture's inputs and keras-hub's logits in
<name>_text_classifier.io.h5 (the fixture IO format of make_fixtures.py); then keras-hub's preset of the BERT one
in ../hub_presets/bert_text_classifier.

    shared/tools/keras-oracle/kpython make_hub_classifiers.py
"""
import os, sys
import numpy as np
os.environ.setdefault("KERAS_BACKEND", "numpy")
sys.path.insert(0, "/work/shared/tools/keras-oracle")
import h5py, keras, keras_hub
import make_fixtures as mf

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "hub_tasks")
tasks = {
    "bert": lambda b: keras_hub.models.BertTextClassifier(backbone=b, num_classes=3, preprocessor=None),
    "distil_bert": lambda b: keras_hub.models.DistilBertTextClassifier(backbone=b, num_classes=3, preprocessor=None,
                                                                      hidden_dim=12),
    "roberta": lambda b: keras_hub.models.RobertaTextClassifier(backbone=b, num_classes=3, preprocessor=None,
                                                               activation="softmax", dropout=0.1),
}
for name, make in tasks.items():
    backbone = keras.saving.load_model(os.path.join(HERE, "..", "hub", name + ".keras"))
    keras.utils.set_random_seed(mf.seed_of(name + "_text_classifier"))
    task = make(backbone)
    rng = np.random.default_rng(mf.seed_of(name + "_text_classifier"))
    for layer in task.layers:
        if layer is not backbone:
            for v in layer.weights:
                v.assign(v.numpy() + rng.normal(0, 0.1, v.shape).astype(np.float32))
    with h5py.File(os.path.join(HERE, "..", "hub", name + ".io.h5")) as f:
        feeds = {f["inputs"][k].attrs["name"]: f["inputs"][k][()] for k in f["inputs"]}
    xs = [feeds[i.name.split(":")[0]] for i in task.inputs]
    y = keras.ops.convert_to_numpy(task({i.name.split(":")[0]: feeds[i.name.split(":")[0]] for i in task.inputs}))
    path = os.path.join(OUT, name + "_text_classifier.keras")
    task.save(path)
    mf.write_io(os.path.join(OUT, name + "_text_classifier.io.h5"), task, xs, [y])
    print(name, y.shape, float(np.abs(y).max()))

# keras-hub's preset of the BERT classifier (no preprocessor): config.json, model.weights.h5, task.json,
# task.weights.h5 (the head alone), metadata.json, in ../hub_presets/bert_text_classifier.
import shutil
preset = os.path.join(HERE, "..", "hub_presets", "bert_text_classifier")
shutil.rmtree(preset, ignore_errors=True)
keras.saving.load_model(os.path.join(OUT, "bert_text_classifier.keras")).save_to_preset(preset)
print(sorted(os.listdir(preset)))
