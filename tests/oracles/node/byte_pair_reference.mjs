// The reference for kiln's BytePairTokenizer (tests/hub/tokenizer_test.cpp): OpenAI's byte-level BPE encodings
// as js-tiktoken ships them (gpt2 is GPT-2's, cl100k_base the one Llama 3's pattern comes from).
//
//   node byte_pair_reference.mjs ENCODING TEXTS.json OUTDIR
//
// TEXTS.json is a list of strings (or {"texts": [...]}). Writes OUTDIR/vocabulary.json and OUTDIR/merges.txt (the encoding's ranks as
// keras-hub's files: tokens spelled in GPT-2's byte characters, one merge rule per token of two or more bytes,
// in rank order, recovered by merging its bytes with the ranks below its own) and OUTDIR/ids.json (each
// text's ids, from js-tiktoken's encode).
import fs from "node:fs";
import path from "node:path";
import { Tiktoken } from "js-tiktoken/lite";

const [encodingName, textsPath, outDir] = process.argv.slice(2);
const ranks = (await import(`js-tiktoken/ranks/${encodingName}`)).default;
const encoding = new Tiktoken(ranks);

// GPT-2's bytes_to_unicode.
const byteChars = [];
{
  let next = 256;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    byteChars.push(String.fromCodePoint(printable ? b : next++));
  }
}
const spell = (bytes) => Array.from(bytes, (b) => byteChars[b]).join("");

const vocabulary = {};
const byRank = [...encoding.textMap.entries()].sort((a, b) => a[0] - b[0]);
for (const [rank, bytes] of byRank) vocabulary[spell(bytes)] = rank;
for (const [token, rank] of Object.entries(ranks.special_tokens)) vocabulary[token] = rank;

// The rule that makes each token: its bytes merged greedily by the ranks below its own leave two parts.
const rankOf = encoding.rankMap;
function parts(bytes, maxRank) {
  let pieces = Array.from(bytes, (b) => [b]);
  while (pieces.length > 1) {
    let best = Infinity, at = -1;
    for (let i = 0; i + 1 < pieces.length; i++) {
      const r = rankOf.get([...pieces[i], ...pieces[i + 1]].join(","));
      if (r !== undefined && r < maxRank && r < best) (best = r), (at = i);
    }
    if (at < 0) break;
    pieces = [...pieces.slice(0, at), [...pieces[at], ...pieces[at + 1]], ...pieces.slice(at + 2)];
  }
  return pieces;
}
const merges = [];
for (const [rank, bytes] of byRank) {
  if (bytes.length < 2) continue;
  const split = parts(bytes, rank);
  if (split.length !== 2) throw new Error(`token ${rank} is not one merge of two tokens`);
  merges.push(`${spell(split[0])} ${spell(split[1])}`);
}

const parsed = JSON.parse(fs.readFileSync(textsPath, "utf8"));
const texts = Array.isArray(parsed) ? parsed : parsed.texts;
const ids = texts.map((text) => encoding.encode(text));
fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, "vocabulary.json"), JSON.stringify(vocabulary));
fs.writeFileSync(path.join(outDir, "merges.txt"), "#version: 0.2\n" + merges.join("\n") + "\n");
fs.writeFileSync(path.join(outDir, "ids.json"), JSON.stringify(ids));
