#!/usr/bin/python3
"""keras-hub's greedy generations from the decoder backbones of ../hub/ and ../hub_variants/: each backbone file
wrapped in its family's CausalLM (no preprocessor), given two prompts of token ids (lengths 5 and 3, left-aligned in
a row of 12, padding_mask marking them), generates with the greedy sampler and stop_token_ids=None up to the row's
length; then with BeamSampler(num_beams=3) from two prompts of 4 tokens ("beam"). Writes ../hub_generations.json: {model: {"token_ids": [[...], [...]], "padding_mask": [[...], [...]],
"generated": [[...], [...]]}}.

    shared/tools/keras-oracle/kpython make_hub_generations.py
"""
import json, os, zipfile
import numpy as np
os.environ.setdefault("KERAS_BACKEND", "numpy")
import keras
import keras_hub

HERE = os.path.dirname(os.path.abspath(__file__))
TASKS = {"GPT2Backbone": "GPT2CausalLM", "LlamaBackbone": "LlamaCausalLM", "Llama3Backbone": "Llama3CausalLM",
         "MistralBackbone": "MistralCausalLM", "QwenBackbone": "QwenCausalLM", "GemmaBackbone": "GemmaCausalLM",
         "Qwen3Backbone": "Qwen3CausalLM", "Phi3Backbone": "Phi3CausalLM",
         "FalconBackbone": "FalconCausalLM"}
MODELS = [("hub", "gpt2"), ("hub", "llama"), ("hub", "mistral"), ("hub", "qwen"), ("hub", "gemma"),
          ("hub_variants", "llama3_scaled"), ("hub_variants", "mistral_window"), ("hub_variants", "qwen_window"),
          ("hub_variants", "gemma2"), ("hub_variants", "qwen3"), ("hub_variants", "qwen3_window"),
          ("hub_variants", "phi3"), ("hub_variants", "phi3_su"), ("hub_variants", "falcon"),
          ("hub_variants", "falcon_3heads")]


def main():
    results = {}
    for folder, name in MODELS:
        path = os.path.join(HERE, "..", folder, name + ".keras")
        try:
            backbone = keras.saving.load_model(path)
        except ValueError:
            # keras-hub's Llama leaves tie_word_embeddings out of its config and cannot read its own tied file
            # back: build it tied from the file's config and read the weights.
            with zipfile.ZipFile(path) as archive:
                entry = json.loads(archive.read("config.json"))
            cls = getattr(keras_hub.models, entry["class_name"])
            backbone = cls.from_config(dict(entry["config"], tie_word_embeddings=True))
            backbone.load_weights(path)
        task = getattr(keras_hub.models, TASKS[type(backbone).__name__])(backbone=backbone, preprocessor=None)
        task.compile(sampler="greedy")
        greedy_task = task
        rng = np.random.default_rng(len(name))
        token_ids = np.zeros((2, 12), np.int32)
        mask = np.zeros((2, 12), bool)
        for row, length in enumerate((5, 3)):
            token_ids[row, :length] = rng.integers(1, 61, length)
            mask[row, :length] = True
        out = task.generate({"token_ids": token_ids, "padding_mask": mask}, stop_token_ids=None)
        results[name] = {"file": folder + "/" + name + ".keras", "token_ids": token_ids.tolist(),
                         "padding_mask": mask.astype(int).tolist(), "generated": np.asarray(out["token_ids"]).tolist()}
        # Beam search with 3 beams, on prompts of one length (keras-hub's beams keep adding log-probabilities
        # at prompt positions of longer rows, which only equal lengths avoid).
        task.compile(sampler=keras_hub.samplers.BeamSampler(num_beams=3))
        beam_ids = token_ids.copy()
        beam_mask = np.zeros((2, 12), bool)
        beam_mask[:, :4] = True
        beam_ids[1, 3] = 7
        beam_ids[:, 4:] = 0
        beams = task.generate({"token_ids": beam_ids, "padding_mask": beam_mask}, stop_token_ids=None)
        results[name]["beam"] = {"num_beams": 3, "token_ids": beam_ids.tolist(),
                                 "padding_mask": beam_mask.astype(int).tolist(),
                                 "generated": np.asarray(beams["token_ids"]).tolist()}
        print(name, results[name]["generated"], flush=True)
    json.dump(results, open(os.path.join(HERE, "..", "hub_generations.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
