#!/usr/bin/env bash
# Extra checks of 2026-11-23: StreamCopy GPU tests, and TP=2 over MPI on one shared GPU against one rank.
set -uo pipefail
OUT=${OUT:-/tmp/out}
ONLY_TESTS=stream_copy_test bash .devrt/run.sh
source .devrt/runtime/env.sh
torch_cudnn=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH=$torch_cudnn:$LD_LIBRARY_PATH
b=.devrt/runtime/bin/pretrain_gpt
flags="--device cuda --bf16 --mock-data --vocab-size 1000 --num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 --micro-batch-size 4 --global-batch-size 8 --train-iters 20 --lr 1e-3 --log-interval 5 --eval-iters 0 --deterministic-mode"
$b $flags 2>&1 | grep -o "iteration *[0-9]*/.*lm loss: [0-9.E+-]*" | sed 's/|.*lm loss:/ lm loss:/' | tee $OUT/one_rank.txt
mpirun -np 2 --oversubscribe $b $flags --tensor-model-parallel-size 2 --distributed-backend mpi 2>&1 | grep -o "iteration *[0-9]*/.*lm loss: [0-9.E+-]*" | sed 's/|.*lm loss:/ lm loss:/' | tee $OUT/tp2.txt
mpirun -np 2 --oversubscribe $b $flags --tensor-model-parallel-size 2 --distributed-backend nccl 2>&1 | tail -3 | tee $OUT/tp2_nccl_shared.txt
