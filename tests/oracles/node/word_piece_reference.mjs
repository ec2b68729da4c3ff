// The reference for kiln's WordPieceTokenizer (tests/hub/tokenizer_test.cpp): Hugging Face's WordPiece as
// @huggingface/tokenizers (tokenizers.js) runs a BERT tokenizer.json.
//
//   node word_piece_reference.mjs TEXTS.json OUTDIR
//
// TEXTS.json is {"texts": [...]}. Writes OUTDIR/vocabulary.txt, a WordPiece vocabulary made from the texts
// (BERT's special tokens; each character the texts hold, plain and normalized, as a word start and as a "##"
// suffix, emoji and 'X' left out so that some words are unknown; the words of the first text seen 3 times or
// more, as written and lowercased; frequent word starts and "##" endings), then for the "cased" tokenizer
// (keras-hub's BertTokenizer defaults: no folding, accents kept) and the "uncased" one (lowercase and
// strip_accents) OUTDIR/<name>.json: {"ids": [[...] per text], "decoded": [...]}.
//
// The tokenizer.json follows keras-hub's pretokenize, which tokenizers.js's BERT pieces match on these texts:
// spaces around CJK ideographs, NFD with marks removed, split on whitespace and punctuation (kept), and for the
// uncased one NFKC with lowercasing (keras-hub: NFKC_Casefold after the split). Where they differ by definition
// (RE2's ASCII \s against JavaScript's Unicode \s, case folding against lowercasing: "ß", final sigma;
// NFKC-decomposed punctuation such as "…"), the texts stay clear of the difference.
import fs from "node:fs";
import path from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";

const [textsPath, outDir] = process.argv.slice(2);
const texts = JSON.parse(fs.readFileSync(textsPath, "utf8")).texts;

const vocabulary = [];
const seen = new Set();
const add = (token) => {
  if (token.length > 0 && !seen.has(token) && !/[\s]/u.test(token)) {
    seen.add(token);
    vocabulary.push(token);
  }
};
for (const token of ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]) add(token);
const stripped = (text) => text.normalize("NFD").replace(/\p{Mn}/gu, "");
const chars = new Set();
for (const text of texts)
  for (const form of [text, stripped(text), text.normalize("NFKC").toLowerCase(), stripped(text).normalize("NFKC").toLowerCase()])
    for (const char of form) chars.add(char);
for (const char of [...chars].sort()) {
  if (/\p{Extended_Pictographic}/u.test(char) || char === "X") continue;
  add(char);
  add("##" + char);
}
const counts = new Map();
for (const word of texts[0].split(/[^\p{L}\p{N}]+/u)) if (word) counts.set(word, (counts.get(word) ?? 0) + 1);
const starts = new Map(), ends = new Map();
for (const [word, count] of counts) {
  if (count < 3) continue;
  add(word);
  add(word.toLowerCase());
  const lower = word.toLowerCase();
  for (let n = 2; n <= 4 && n < lower.length; n++) {
    ends.set(lower.slice(-n), (ends.get(lower.slice(-n)) ?? 0) + count);
    starts.set(lower.slice(0, n + 1), (starts.get(lower.slice(0, n + 1)) ?? 0) + count);
  }
}
for (const [end, count] of ends) if (count >= 30) add("##" + end);
for (const [start, count] of starts) if (count >= 30) add(start);

fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, "vocabulary.txt"), vocabulary.join("\n") + "\n");

const vocab = Object.fromEntries(vocabulary.map((token, id) => [token, id]));
for (const [name, uncased] of [["cased", false], ["uncased", true]]) {
  const bert = { type: "BertNormalizer", clean_text: false, handle_chinese_chars: true, strip_accents: uncased, lowercase: false };
  const tokenizer = new Tokenizer(
    {
      version: "1.0",
      added_tokens: [],
      normalizer: uncased ? { type: "Sequence", normalizers: [bert, { type: "NFKC" }, { type: "Lowercase" }] } : bert,
      pre_tokenizer: { type: "BertPreTokenizer" },
      post_processor: null,
      decoder: { type: "WordPiece", prefix: "##", cleanup: false },
      model: { type: "WordPiece", unk_token: "[UNK]", continuing_subword_prefix: "##", max_input_chars_per_word: 100, vocab },
    },
    {},
  );
  const ids = texts.map((text) => tokenizer.encode(text, { add_special_tokens: false }).ids);
  const decoded = ids.map((row) => (row.length ? tokenizer.decode(row, { clean_up_tokenization_spaces: false }) : ""));
  fs.writeFileSync(path.join(outDir, `${name}.json`), JSON.stringify({ ids, decoded }));
}
