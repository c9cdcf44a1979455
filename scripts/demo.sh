#!/usr/bin/env bash
# Installs what is missing, builds pretrain_gpt, and trains a small GPT with the GPT-2 vocabulary
# on the CPU for 300 iterations; the lm loss in the log falls clearly.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
scripts/build.sh pretrain_gpt
exec build/bin/pretrain_gpt \
  --num-layers 4 --hidden-size 128 --num-attention-heads 4 \
  --seq-length 64 --max-position-embeddings 64 \
  --micro-batch-size 4 --global-batch-size 8 --train-iters 300 \
  --lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 30 --lr-decay-style cosine \
  --mock-data --vocab-size 50257 --log-interval 25 "$@"
