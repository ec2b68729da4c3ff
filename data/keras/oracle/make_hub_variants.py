#!/usr/bin/python3
"""keras-hub backbones with the options the default fixtures (../hub/) leave at rest, saved by the real Keras 3
and keras-hub with Keras's outputs, in the fixture IO format of ../hub/:

- llama3_scaled: Llama3Backbone with Llama 3.1's rope frequency adjustment (factors chosen so that, at head
  depth 8, one frequency is kept, one blended and two divided), 4 query heads over 2 key/value heads, tied.
- mistral_window: MistralBackbone with a sliding window of 3 and head_dim 4 (not hidden / heads).
- qwen_window: QwenBackbone with use_sliding_window_attention and a window of 3, untied.
- qwen3: Qwen3Backbone (per-head query and key norms, no biases) with head_dim 6 (not hidden / heads), 4 query
  heads over 2 key/value heads, tied, keras-hub's default window (32768).
- qwen3_window: Qwen3Backbone with a sliding window of 3, rope_scaling_factor 2, untied.
- phi3: Phi3Backbone, 4 query heads over 2, keras-hub's plain rotary embedding.
- phi3_su: Phi3Backbone with Phi-3's "su" rotary scaling, a pretraining length of 4 and a maximum of 16 (so the
  7-token inputs take the long factors and the rotation is scaled by sqrt(2)).
- falcon: FalconBackbone (ALiBi, LayerNormalizations, biased projections), 4 heads, layer_norm_epsilon 1e-3 (the
  final norm's; keras-hub's blocks keep 1e-5).
- falcon_3heads: FalconBackbone with 3 heads (ALiBi's slopes for a head count that is not a power of 2), its second
  row's padding mask with a hole at step 2 (ALiBi places a key by the unpadded keys before it, not by its index).
- gemma2: GemmaBackbone with Gemma 2's options: attention logit soft cap 0.5, post-attention and post-ffw
  norms, sliding window 3 in every other block, head_dim 4, 3 layers.

    shared/tools/keras-oracle/kpython make_hub_variants.py OUTDIR
"""
import json, os, sys
import numpy as np
os.environ.setdefault("KERAS_BACKEND", "numpy")
sys.path.insert(0, os.environ.get("KERAS_ORACLE_HOME", ""))
import keras
import keras_hub
import make_fixtures as mf

H = keras_hub.models
V, D, SEQ = 61, 16, 7


def variants():
    return {
        "llama3_scaled": lambda: H.Llama3Backbone(
            vocabulary_size=V, num_layers=2, num_query_heads=2, num_key_value_heads=1, hidden_dim=D,
            intermediate_dim=2 * D, rope_frequency_adjustment_factor=8.0, rope_low_freq_factor=1.0,
            rope_high_freq_factor=4.0, rope_pretraining_sequence_length=64, tie_word_embeddings=True),
        "mistral_window": lambda: H.MistralBackbone(
            vocabulary_size=V, num_layers=2, num_query_heads=4, num_key_value_heads=2, hidden_dim=D,
            intermediate_dim=2 * D, sliding_window=3, head_dim=4),
        "qwen_window": lambda: H.QwenBackbone(
            vocabulary_size=V, num_layers=2, num_query_heads=2, num_key_value_heads=1, hidden_dim=D,
            intermediate_dim=2 * D, use_sliding_window_attention=True, sliding_window_size=3,
            tie_word_embeddings=False),
        "qwen3": lambda: H.Qwen3Backbone(
            vocabulary_size=V, num_layers=2, num_query_heads=4, num_key_value_heads=2, hidden_dim=D, head_dim=6,
            intermediate_dim=2 * D),
        "qwen3_window": lambda: H.Qwen3Backbone(
            vocabulary_size=V, num_layers=2, num_query_heads=2, num_key_value_heads=1, hidden_dim=D, head_dim=8,
            intermediate_dim=2 * D, sliding_window_size=3, tie_word_embeddings=False, rope_scaling_factor=2.0),
        "phi3": lambda: H.Phi3Backbone(
            vocabulary_size=V, num_layers=2, num_query_heads=4, num_key_value_heads=2, hidden_dim=D,
            intermediate_dim=2 * D),
        "phi3_su": lambda: H.Phi3Backbone(
            vocabulary_size=V, num_layers=2, num_query_heads=2, num_key_value_heads=1, hidden_dim=D,
            intermediate_dim=2 * D, max_sequence_length=16, pretraining_sequence_length=4,
            rope_scaling_type="su", rope_scaling_short_factor=[1.0, 1.5, 2.0, 3.0],
            rope_scaling_long_factor=[2.0, 4.0, 8.0, 16.0]),
        "falcon": lambda: H.FalconBackbone(
            vocabulary_size=V, num_layers=2, num_attention_heads=4, hidden_dim=D, intermediate_dim=2 * D,
            layer_norm_epsilon=1e-3),
        "falcon_3heads": lambda: H.FalconBackbone(
            vocabulary_size=V, num_layers=2, num_attention_heads=3, hidden_dim=18, intermediate_dim=2 * D),
        "gemma2": lambda: H.GemmaBackbone(
            vocabulary_size=V, num_layers=3, num_query_heads=2, num_key_value_heads=1, hidden_dim=D,
            intermediate_dim=2 * D, head_dim=4, attention_logit_soft_cap=0.5, final_logit_soft_cap=30.0,
            use_post_ffw_norm=True, use_post_attention_norm=True, use_sliding_window_attention=True,
            sliding_window_size=3, query_head_dim_normalize=False),
    }


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    index = {}
    for name, make in variants().items():
        keras.utils.set_random_seed(mf.seed_of(name))
        model = make()
        rng = np.random.default_rng(mf.seed_of(name))
        mf.perturb_weights(model, rng)
        feeds = {}
        for inp in model.inputs:
            n = inp.name.split(":")[0]
            if "mask" in n:
                m = np.ones((2, SEQ), np.int32); m[1, SEQ - 2:] = 0
                if name == "falcon_3heads":
                    m[1, 2] = 0  # a hole: ALiBi counts the unpadded keys before each, not its index
                feeds[n] = m
            else:
                feeds[n] = rng.integers(1, V, (2, SEQ)).astype(np.int32)
        xs = [feeds[i.name.split(":")[0]] for i in model.inputs]
        y = model.predict(feeds, verbose=0)
        model.save(os.path.join(out, name + ".keras"))
        mf.write_io(os.path.join(out, name + ".io.h5"), model, xs, [y])
        index[name] = {"class": type(model).__name__, "params": int(model.count_params())}
        print(name, index[name], flush=True)
    json.dump({"keras_version": keras.__version__, "fixtures": index}, open(os.path.join(out, "INDEX.json"), "w"),
              indent=1)


if __name__ == "__main__":
    main()
