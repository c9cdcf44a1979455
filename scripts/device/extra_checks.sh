#!/usr/bin/env bash
# Extra checks on the GPU machine (copy into .devrt/ after packing; run after run.sh or alone):
# TP=2, PP=2 (interleaved, v=2) and DP=2 with the distributed optimizer and overlap, over MPI on the
# one GPU, against one rank; full recompute against none (bitwise with --deterministic-mode); BF16
# with cuDNN attention. Then GPT-2 124M throughput alone. Logs under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
[ -d .devrt/runtime/bin ] || { mkdir -p .devrt/runtime && tar -C .devrt/runtime -xJf .devrt/runtime.tar.xz; }
source .devrt/runtime/env.sh
torch_cudnn=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH=$torch_cudnn:$LD_LIBRARY_PATH
b=.devrt/runtime/bin/pretrain_gpt
flags="--device cuda --bf16 --mock-data --vocab-size 1000 --num-layers 4 --hidden-size 256 --num-attention-heads 4
       --seq-length 128 --max-position-embeddings 128 --micro-batch-size 4 --global-batch-size 16 --train-iters 20
       --lr 1e-3 --log-interval 5 --eval-iters 0 --deterministic-mode"
losses() { grep -o "iteration *[0-9]*/.*lm loss: [0-9.E+-]*" | sed 's/|.*lm loss:/ lm loss:/'; }
$b $flags 2>&1 | losses | tee "$OUT/one_rank.txt"
mpirun -np 2 --oversubscribe $b $flags --tensor-model-parallel-size 2 --distributed-backend mpi 2>&1 | losses | tee "$OUT/tp2.txt"
mpirun -np 2 --oversubscribe $b $flags --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 \
  --distributed-backend mpi 2>&1 | losses | tee "$OUT/pp2_v2.txt"
mpirun -np 2 --oversubscribe $b $flags --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather \
  --ddp-bucket-size 200000 --distributed-backend mpi 2>&1 | losses | tee "$OUT/dp2_zero.txt"
$b $flags --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 2>&1 | losses \
  | tee "$OUT/recompute_full.txt"
cmp -s <(sed 's/ *$//' "$OUT/one_rank.txt") <(sed 's/ *$//' "$OUT/recompute_full.txt") \
  && echo "full recompute: losses identical to no recompute" || echo "full recompute: losses DIFFER"
$b --device cuda --bf16 --mock-data --vocab-size 50257 --num-layers 12 --hidden-size 768 --num-attention-heads 12 \
  --seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 16 --global-batch-size 16 --train-iters 20 \
  --lr 1e-4 --log-interval 10 --eval-iters 0 2>&1 | grep -E "iteration +20/|memory report" -A0 | tee "$OUT/gpt2_124m.txt"
