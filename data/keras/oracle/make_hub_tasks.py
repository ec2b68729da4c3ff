#!/usr/bin/python3
"""keras-hub's CausalLM tasks over two backbone fixtures, saved by keras-hub: ../hub_tasks/gpt2_causal_lm.keras and
llama_causal_lm.keras (no preprocessor).

    shared/tools/keras-oracle/kpython make_hub_tasks.py
"""
import keras, keras_hub, zipfile, json, h5py
import os
HERE = os.path.dirname(os.path.abspath(__file__))
b = keras.saving.load_model(os.path.join(HERE, "..", "hub", "gpt2.keras"))
t = keras_hub.models.GPT2CausalLM(backbone=b, preprocessor=None)
t.save(os.path.join(HERE, "..", "hub_tasks", "gpt2_causal_lm.keras"))
b2 = keras.saving.load_model(os.path.join(HERE, "..", "hub", "llama.keras"))
t2 = keras_hub.models.LlamaCausalLM(backbone=b2, preprocessor=None)
t2.save(os.path.join(HERE, "..", "hub_tasks", "llama_causal_lm.keras"))
