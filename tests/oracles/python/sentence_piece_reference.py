"""The reference for kiln's SentencePieceTokenizer (tests/hub/tokenizer_test.cpp): Google's SentencePiece as its
Python binding (Debian's python3-sentencepiece, installed by scripts/install-test-oracles.sh) runs it.

    python3 sentence_piece_reference.py TEXTS.json OUTDIR

TEXTS.json is {"texts": [...]}. Trains two models on the first text, as the models keras-hub's SentencePiece
tokenizers load are made: "llama" (BPE with byte fallback and identity normalization, digits split, as Llama 2's
and Gemma's) and "unigram" (SentencePiece's defaults: unigram, NFKC), each written as OUTDIR/<name>.spm, then
OUTDIR/<name>.json: {"ids": [[...] per text], "pieces": [[...] per text], "decoded": [...],
"bos_eos": [[...] per text, with add_bos and add_eos]}.
"""
import io
import json
import os
import sys

import sentencepiece as spm

texts_path, out_dir = sys.argv[1:3]
with open(texts_path, encoding="utf-8") as f:
    texts = json.load(f)["texts"]
os.makedirs(out_dir, exist_ok=True)
lines = [line for line in texts[0].split("\n") if line.strip()]

models = {
    "llama": dict(model_type="bpe", vocab_size=1000, byte_fallback=True, normalization_rule_name="identity",
                  split_digits=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1),
    "unigram": dict(model_type="unigram", vocab_size=1000),
}
for name, options in models.items():
    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=proto, num_threads=1,
                                   minloglevel=2, **options)
    with open(os.path.join(out_dir, name + ".spm"), "wb") as f:
        f.write(proto.getvalue())
    plain = spm.SentencePieceProcessor(model_proto=proto.getvalue())
    wrapped = spm.SentencePieceProcessor(model_proto=proto.getvalue(), add_bos=True, add_eos=True)
    ids = [plain.encode(text) for text in texts]
    result = {
        "ids": ids,
        "pieces": [plain.encode(text, out_type=str) for text in texts],
        "decoded": [plain.decode(row) for row in ids],
        "bos_eos": [wrapped.encode(text) for text in texts],
    }
    with open(os.path.join(out_dir, name + ".json"), "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False)
