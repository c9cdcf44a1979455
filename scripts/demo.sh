#!/usr/bin/env bash
# Installs what is missing, builds, prepares the default corpus (the Brown corpus, tokenized with
# GPT-2's vocabulary by preprocess_data, cached under .cache/data) and trains a small GPT on the CPU
# for 250 iterations, evaluating on the validation split every 50: training and validation loss
# fall; a sample continuation every 125 iterations (--sample-interval). The trained model is saved
# under .cache/demo_checkpoints and the demo ends with generate's continuation of a prompt from it.
# Extra arguments are passed to pretrain_gpt.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
scripts/build.sh pretrain_gpt preprocess_data generate
scripts/prepare_brown.sh
rm -rf .cache/demo_checkpoints
build/bin/pretrain_gpt \
  --data-path .cache/data/brown_text_document --split 949,50,1 \
  --vocab-file .cache/data/gpt2-vocab.json --merge-file .cache/data/gpt2-merges.txt \
  --tokenizer-type GPT2BPETokenizer \
  --num-layers 4 --hidden-size 128 --num-attention-heads 4 \
  --seq-length 128 --max-position-embeddings 128 \
  --micro-batch-size 4 --global-batch-size 8 --train-iters 250 \
  --lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 25 --lr-decay-style cosine \
  --log-interval 25 --log-throughput --eval-interval 50 --eval-iters 10 \
  --sample-interval 125 --sample-prompt "The jury said" \
  --save .cache/demo_checkpoints "$@"
echo
echo "generate from the trained model (.cache/demo_checkpoints):"
build/bin/generate .cache/demo_checkpoints --prompt "The jury said" --max-new-tokens 40 \
  --temperature 0.8 --top-k 40 --seed 1
