"""Keras's int8 and int4 quantization, as fixtures for kiln (run with the oracle's kpython, in this directory).

Each model is built in Keras 3.16 with seeded weights, perturbed as make_fixtures.py does, then quantized by
Keras itself (`model.quantize(mode)`) and saved; Keras reloads the file and must predict the same bits. For each
model M: M.keras, M.io.h5 (/inputs/input_<i>, /outputs/output_<k> = Keras's predictions of the quantized model,
/float_outputs/output_<k> = the float model's before quantizing) and M.float.weights.h5 (the float weights that
were quantized, so that kiln's own quantize can be checked against Keras's).

quantizer_reference.h5: Keras's AbsMaxQuantizer on arrays with ties and zeros, as the layers call it:
/rows/<case>/{x, q, scale}: quantizer(x, axis=-1) (the per-row activation quantizer of int8 layers);
/columns/<case>/{x, q, scale}: abs_max_quantize(x, axis=0, to_numpy=True) (how Dense.quantize quantizes kernels);
/int4_columns/<case>/{x, q, scale}: the same with value_range (-8, 7) (per-channel int4).

`kpython make_quantized.py NAME...` makes only the named models (and not quantizer_reference.h5).
"""
import sys
import zlib

import h5py
import numpy as np

import keras
from keras import quantizers

from oracle_support import keras_reloads_policy_maps


def perturb_weights(model, rng):
    new = []
    for w in model.get_weights():
        w = np.asarray(w)
        if w.dtype.kind != "f":
            new.append(w)
            continue
        if np.all(w == 0):
            w = rng.normal(0.0, 0.2, w.shape)
        elif np.all(w == 1):
            w = rng.uniform(0.5, 1.5, w.shape)
        else:
            w = w + rng.normal(0.0, 0.05, w.shape)
        new.append(w.astype(np.float32))
    model.set_weights(new)


ONLY = sys.argv[1:]


def make(name, build, data, mode, config=None, extra=None):
    if ONLY and name not in ONLY:
        return
    keras.utils.set_random_seed(zlib.crc32(name.encode()) % (2**31))
    model = build()
    perturb_weights(model, np.random.default_rng(zlib.crc32(name.encode())))
    float_outputs = model.predict(data, verbose=0)
    float_extra = extra(model, float_outputs) if extra else {}
    model.save_weights(name + ".float.weights.h5")
    model.quantize(mode, config=config) if config is not None else model.quantize(mode)
    outputs = model.predict(data, verbose=0)
    quantized_extra = extra(model, outputs) if extra else {}
    model.save(name + ".keras")
    again = keras.saving.load_model(name + ".keras")
    # (a dict of outputs, BERT's, in Keras's flattened order: by name)
    as_list = lambda o: [o[k] for k in sorted(o)] if isinstance(o, dict) else (o if isinstance(o, list) else [o])
    again_outputs = again.predict(data, verbose=0)
    for a, b in zip(as_list(outputs), as_list(again_outputs)):
        assert np.array_equal(a, b), name
    for key, array in (extra(again, again_outputs) if extra else {}).items():
        if not np.array_equal(np.asarray(array), np.asarray(quantized_extra[key])):
            # Keras 3.16's int4 ReversibleEmbedding quantizes its inputs in reverse only once reloaded (its
            # quantize() passes Int4QuantizationConfig(), activation_quantizer None; the file's layer has no
            # quantization_config, and _int4_build defaults to AbsMaxQuantizer): the file's meaning is the
            # reloaded model's, which is what is kept.
            assert mode.startswith("int4") and key == "logits", name + " " + key
            print(name, key, "differs once reloaded by", float(np.max(np.abs(np.asarray(array) - quantized_extra[key]))),
                  "(keeping the reloaded model's)")
            quantized_extra[key] = np.asarray(array)
    with h5py.File(name + ".io.h5", "w") as f:
        inputs = [data[key] for key in sorted(data)] if isinstance(data, dict) else as_list(data)
        for i, array in enumerate(inputs):  # a dict by name, as Keras flattens it
            f.create_dataset("inputs/input_%d" % i, data=array)
        for k, array in enumerate(as_list(outputs)):
            f.create_dataset("outputs/output_%d" % k, data=np.asarray(array, dtype=np.float32))
        for k, array in enumerate(as_list(float_outputs)):
            f.create_dataset("float_outputs/output_%d" % k, data=np.asarray(array, dtype=np.float32))
        for key, array in quantized_extra.items():
            f.create_dataset("outputs/" + key, data=np.asarray(array, dtype=np.float32))
        for key, array in float_extra.items():
            f.create_dataset("float_outputs/" + key, data=np.asarray(array, dtype=np.float32))
    worst = max(float(np.max(np.abs(a - b))) for a, b in zip(as_list(outputs), as_list(float_outputs)))
    print(name, mode, "largest difference from the float model", worst)


def dense_mlp():
    x = keras.Input((40,), name="x")
    h = keras.layers.Dense(33, activation="relu", name="hidden")(x)
    h = keras.layers.Dense(17, activation="gelu", use_bias=False, name="no_bias")(h)
    return keras.Model(x, keras.layers.Dense(7, name="head")(h), name="dense_mlp")


def dense_sequence():
    # Dense on a (batch, steps, features) input: the activations are quantized per row of the last axis.
    x = keras.Input((5, 24), name="x")
    h = keras.layers.Dense(19, activation="tanh", name="project")(x)
    return keras.Model(x, keras.layers.Dense(4, name="out")(h), name="dense_sequence")


def embedding_classifier():
    # Embedding in int8: int8 rows and one scale per row (embeddings_scale (input_dim,)); the Dense after it too.
    tokens = keras.Input((6,), dtype="int32", name="tokens")
    h = keras.layers.Embedding(50, 8, name="embed")(tokens)
    h = keras.layers.GlobalAveragePooling1D(name="pool")(h)
    return keras.Model(tokens, keras.layers.Dense(3, name="out")(h), name="embedding_classifier")


def embedding_int4_classifier():
    # Embedding(50, 10): int4 rows, by blocks of 4 features (groups of 4, 4 and 2) or per row; the Dense after it too.
    tokens = keras.Input((6,), dtype="int32", name="tokens")
    h = keras.layers.Embedding(50, 10, name="embed")(tokens)
    h = keras.layers.GlobalAveragePooling1D(name="pool")(h)
    return keras.Model(tokens, keras.layers.Dense(3, name="out")(h), name="embedding_int4_classifier")


def gpt2_backbone():
    # keras-hub's GPT2Backbone, small: quantize("int8") makes its token embedding (a ReversibleEmbedding, tied), the
    # attention's EinsumDense projections and the feed-forward Dense layers int8, and its config records them in one
    # DTypePolicyMap keyed by layer path ("transformer_layer_0/self_attention/query").
    import keras_hub

    return keras_hub.models.GPT2Backbone(vocabulary_size=50, num_layers=2, num_heads=2, hidden_dim=8,
                                         intermediate_dim=16, max_sequence_length=12, name="gpt2_backbone")


def llama_backbone():
    # keras-hub's LlamaBackbone, small, grouped-query (4 query heads, 2 key/value heads), its token embedding untied:
    # int8 table and int8 reverse_embeddings (8, 50) with their scales; the attention's four EinsumDense projections
    # (no biases) and the gated feed-forward's three Dense layers int8.
    import keras_hub

    return keras_hub.models.LlamaBackbone(vocabulary_size=50, num_layers=2, num_query_heads=4, num_key_value_heads=2,
                                          hidden_dim=8, intermediate_dim=16, name="llama_backbone")


def falcon_backbone():
    # keras-hub's FalconBackbone, small: its attention's query/key/value EinsumDense and output Dense, the
    # feed-forward's dense_h_to_4h and dense_4h_to_h, and the tied token embedding int8.
    import keras_hub

    return keras_hub.models.FalconBackbone(vocabulary_size=50, num_layers=2, num_attention_heads=2, hidden_dim=8,
                                           intermediate_dim=16, name="falcon_backbone")


def bert_backbone():
    # keras-hub's BertBackbone, small: the encoder blocks' MultiHeadAttention projections and feed-forward Dense
    # layers, the pooler's Dense, and the token and segment embeddings int8 (its position embedding stays float).
    import keras_hub

    return keras_hub.models.BertBackbone(vocabulary_size=50, num_layers=2, num_heads=2, hidden_dim=8,
                                         intermediate_dim=16, max_sequence_length=12, name="bert_backbone")


def gpt2_logits(model, outputs):
    # A CausalLM's logits: the sequence output through the token embedding in reverse (int8 when quantized).
    return {"logits": model.token_embedding(outputs, reverse=True)}


keras_reloads_policy_maps()
rng = np.random.default_rng(11)
mlp_data = rng.normal(0.0, 1.5, (6, 40)).astype(np.float32)
mlp_data[2] = 0.0  # a row of zeros: its scale is 127 / epsilon
seq_data = rng.uniform(-3.0, 3.0, (3, 5, 24)).astype(np.float32)
make("dense_mlp_int8", dense_mlp, mlp_data, "int8")
make("dense_sequence_int8", dense_sequence, seq_data, "int8")
make("dense_mlp_int4", dense_mlp, mlp_data, "int4")
# Per-channel int4 (Keras's escape hatch, block_size -1): symmetric, one scale per unit, no zero point nor g_idx.
make("dense_mlp_int4_channel", dense_mlp, mlp_data, "int4", config=quantizers.Int4QuantizationConfig(block_size=-1))
token_data = np.random.default_rng(13).integers(0, 50, (5, 6)).astype(np.int32)
make("embedding_int8", embedding_classifier, token_data, "int8")
make("embedding_int4", embedding_int4_classifier, token_data, "int4",
     config=quantizers.Int4QuantizationConfig(block_size=4))
make("embedding_int4_channel", embedding_int4_classifier, token_data, "int4",
     config=quantizers.Int4QuantizationConfig(block_size=-1))
gpt2_tokens = np.random.default_rng(17).integers(0, 50, (2, 7)).astype(np.int32)
gpt2_mask = np.ones((2, 7), np.int32)
gpt2_mask[1, 5:] = 0  # the second row padded
make("gpt2_backbone_int8", gpt2_backbone, {"padding_mask": gpt2_mask, "token_ids": gpt2_tokens}, "int8",
     extra=gpt2_logits)
make("llama_backbone_int8", llama_backbone, {"padding_mask": gpt2_mask, "token_ids": gpt2_tokens}, "int8",
     extra=gpt2_logits)
# int4 backbones: GPT-2 by blocks of 4 (its tied token embedding, the attention's EinsumDense projections and the
# feed-forward Dense layers, all with zero points and g_idx), Llama per-channel (its untied token embedding both ways,
# grouped-query attention, the gated feed-forward).
make("gpt2_backbone_int4", gpt2_backbone, {"padding_mask": gpt2_mask, "token_ids": gpt2_tokens}, "int4",
     config=quantizers.Int4QuantizationConfig(block_size=4), extra=gpt2_logits)
make("llama_backbone_int4_channel", llama_backbone, {"padding_mask": gpt2_mask, "token_ids": gpt2_tokens}, "int4",
     config=quantizers.Int4QuantizationConfig(block_size=-1), extra=gpt2_logits)
bert_segments = np.zeros((2, 7), np.int32)
bert_segments[:, 4:] = 1
make("bert_backbone_int8", bert_backbone,
     {"padding_mask": gpt2_mask, "segment_ids": bert_segments, "token_ids": gpt2_tokens}, "int8")
make("falcon_backbone_int8", falcon_backbone, {"padding_mask": gpt2_mask, "token_ids": gpt2_tokens}, "int8",
     extra=gpt2_logits)

# The quantizer itself, on arrays with ties (x * scale exactly k + 0.5), zeros and a row of zeros.
if ONLY:
    sys.exit(0)
with h5py.File("quantizer_reference.h5", "w") as f:
    cases = {
        "normal": rng.normal(0.0, 2.0, (9, 37)).astype(np.float32),
        "ties": (np.array([[127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 63.5, -63.5, 0.0]], np.float32) / 127.0),
        "zeros": np.zeros((2, 5), np.float32),
        "wide": rng.uniform(-1e4, 1e4, (3, 300)).astype(np.float32),
        "tiny": rng.uniform(-1e-6, 1e-6, (4, 16)).astype(np.float32),
    }
    for key, x in cases.items():
        q, scale = quantizers.AbsMaxQuantizer()(x, axis=-1)
        g = f.create_group("rows/" + key)
        g["x"], g["q"], g["scale"] = x, np.asarray(q), np.asarray(scale)
        q, scale = quantizers.abs_max_quantize(x, axis=0, to_numpy=True)
        g = f.create_group("columns/" + key)
        g["x"], g["q"], g["scale"] = x, np.asarray(q), np.asarray(scale)
        q, scale = quantizers.abs_max_quantize(x, axis=0, value_range=(-8, 7), to_numpy=True)
        g = f.create_group("int4_columns/" + key)
        g["x"], g["q"], g["scale"] = x, np.asarray(q), np.asarray(scale)
print("quantizer_reference.h5 written")
