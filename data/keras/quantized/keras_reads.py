"""Keras reads a file kiln wrote: `kpython keras_reads.py COPY.keras NAME` (in this folder) loads COPY.keras with
Keras 3.16 (keras.saving.load_model, the oracle's numpy backend, with make_quantized.py's workaround for its dm-tree
fallback and keras-hub's DTypePolicyMap), predicts NAME.io.h5's inputs and compares with the outputs Keras predicted
from its own NAME.keras, to the bit ("logits" too: the token embedding in reverse). Exit 0 when equal, 1 otherwise.

    build/cli/kiln convert gpt2_backbone_int8.keras /tmp/copy.keras
    kpython keras_reads.py /tmp/copy.keras gpt2_backbone_int8
"""
import sys

import h5py
import numpy as np

import keras

from oracle_support import keras_reloads_policy_maps

keras_reloads_policy_maps()


def main(path, name):
    model = keras.saving.load_model(path)
    with h5py.File(name + ".io.h5", "r") as f:
        inputs = [f["inputs/input_%d" % i][()] for i in range(len(f["inputs"]))]
        expected = {key: f["outputs/" + key][()] for key in f["outputs"]}
    if isinstance(model.input, dict):  # a keras-hub backbone: its inputs by name, stored in sorted order
        data = dict(zip(sorted(model.input), inputs))
    else:
        data = inputs if len(inputs) > 1 else inputs[0]
    outputs = model.predict(data, verbose=0)
    if isinstance(outputs, dict):  # (BERT's pooled_output and sequence_output, by name)
        outputs = [outputs[k] for k in sorted(outputs)]
    outputs = outputs if isinstance(outputs, list) else [outputs]
    got = {"output_%d" % k: np.asarray(o, dtype=np.float32) for k, o in enumerate(outputs)}
    if "logits" in expected:
        got["logits"] = np.asarray(model.token_embedding(outputs[0], reverse=True), dtype=np.float32)
    worst = 0.0
    for key, value in expected.items():
        worst = max(worst, float(np.max(np.abs(got[key] - value))))
    print(path, "against", name, "largest difference", worst)
    return 0 if worst == 0.0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
