#!/bin/bash
# The reference implementations some tests compare kiln with, installed once (test-only; kiln never uses them):
# js-tiktoken (OpenAI's byte-level BPE encodings, for tests/hub/tokenizer_test.cpp) and @huggingface/tokenizers
# (tokenizers.js: WordPiece, for tests/hub/piece_tokenizers_test.cpp), with Debian's Node.js and npm, at the
# versions tests/oracles/node/package-lock.json pins; Debian's python3-sentencepiece (SentencePiece's Python
# binding, for the same test). Idempotent: with them installed it does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/apt-install.sh
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  apt_install install-test-oracles nodejs npm
fi
apt_install install-test-oracles python3-sentencepiece
oracles=tests/oracles/node
if [ -f "$oracles/node_modules/js-tiktoken/package.json" ] &&
   [ -f "$oracles/node_modules/@huggingface/tokenizers/package.json" ]; then
  exit 0
fi
echo "install-test-oracles: npm ci in $oracles"
(cd "$oracles" && npm ci --no-audit --no-fund --loglevel=error)
