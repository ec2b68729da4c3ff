#!/usr/bin/python3
"""keras-hub preset folders written by keras-hub's own save_to_preset: ../hub_presets/gpt2_causal_lm/ (GPT2CausalLM
over ../hub/gpt2.keras, no preprocessor: keras-hub's tokenizers need HuggingFace `tokenizers`, which the oracle
does not have) and ../hub_presets/llama_backbone/ (LlamaBackbone alone).

    shared/tools/keras-oracle/kpython make_hub_presets.py
"""
import os
import keras
import keras_hub

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "hub_presets")
gpt2 = keras.saving.load_model(os.path.join(HERE, "..", "hub", "gpt2.keras"))
keras_hub.models.GPT2CausalLM(backbone=gpt2, preprocessor=None).save_to_preset(os.path.join(OUT, "gpt2_causal_lm"))
llama = keras.saving.load_model(os.path.join(HERE, "..", "hub", "llama.keras"))
llama.save_to_preset(os.path.join(OUT, "llama_backbone"))
# The same Llama with its weights sharded (max_shard_size 20 KB, as keras-hub shards presets over 10 GB):
# model.weights.json and model_0000<i>.weights.h5.
llama.save_to_preset(os.path.join(OUT, "llama_sharded"), max_shard_size=0.00002)
