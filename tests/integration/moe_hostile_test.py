#!/usr/bin/python3
"""Issue 40's bad input for the mixture-of-experts flags, with issue 44's rules (finite numbers,
bounded sizes), through pretrain_gpt: every case ends with exit 1 and one "error: ..." line naming
the flag, quickly, before anything trains or allocates a model (hostile_input_test.py's checks).

  * the router: top-k > experts, top-k < 1, groups not dividing the experts, group top-k > groups,
    groups without group top-k, expert bias with softmax scores, an unknown score function
  * sinkhorn with an auxiliary-loss coefficient, in a list of types, or with a capacity factor
  * numbers: NaN / inf / negative / overflowing coefficients, capacity factors and sizes
  * --moe-layer-freq: a list of the wrong length, values other than 0/1, a huge list expression,
    unbalanced brackets, a frequency past the layers
  * --moe-aux-loss-coeff / --moe-router-load-balancing-type counts that do not match, unknown and
    refused balancing types
  * MoE flags without --num-experts
  * sizes: --num-experts 10^9 (and the expert size) refused before any allocation
  * Megatron's MoE flags that are not built: refused naming the flag, never ignored

  moe_hostile_test.py --binary build-cpu/bin/pretrain_gpt
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from hostile_input_test import check_one_error, run  # noqa: E402

TINY = ("--device cpu --mock-data --vocab-size 256 --num-layers 2 --hidden-size 32 --num-attention-heads 4 "
        "--seq-length 16 --max-position-embeddings 16 --micro-batch-size 2 --global-batch-size 4 "
        "--train-iters 2 --lr 1e-3 --log-interval 1 --eval-iters 0").split()
MOE = ["--num-experts", "4", "--moe-router-topk", "2"]

# (extra flags over TINY + MOE, text the one error line must contain). Every case must end within
# LIMIT seconds (argument checks and the memory plan run before any model memory).
LIMIT = 10
CASES = [
    # The router (issue 40's acceptance).
    (["--moe-router-topk", "5"], "--moe-router-topk"),
    (["--moe-router-topk", "0"], "--moe-router-topk"),
    (["--moe-router-topk", "-1"], "--moe-router-topk"),
    (["--moe-router-topk", "1"], "--moe-router-pre-softmax"),
    (["--moe-router-num-groups", "3", "--moe-router-group-topk", "1"], "--moe-router-num-groups"),
    (["--moe-router-num-groups", "2", "--moe-router-group-topk", "3"], "--moe-router-group-topk"),
    (["--moe-router-num-groups", "2"], "--moe-router-group-topk"),
    (["--moe-router-group-topk", "1"], "--moe-router-num-groups"),
    (["--moe-router-num-groups", "0", "--moe-router-group-topk", "1"], "--moe-router-num-groups"),
    (["--moe-router-num-groups", "4", "--moe-router-group-topk", "1"], "--moe-router-group-topk"),
    (["--moe-router-score-function", "tanh"], "--moe-router-score-function"),
    (["--moe-router-score-function", "sqrtsoftplus"], "--moe-router-score-function"),
    (["--moe-router-enable-expert-bias"], "--moe-router-enable-expert-bias"),
    (["--moe-router-bias-update-rate", "1e-2"], "--moe-router-bias-update-rate"),
    (["--moe-router-score-function", "sigmoid", "--moe-router-enable-expert-bias", "--moe-router-bias-update-rate",
      "nan"], "--moe-router-bias-update-rate"),
    (["--moe-router-score-function", "sigmoid", "--moe-router-enable-expert-bias", "--moe-router-bias-update-rate",
      "-1"], "--moe-router-bias-update-rate"),
    (["--moe-router-topk-scaling-factor", "nan"], "--moe-router-topk-scaling-factor"),
    (["--moe-router-topk-scaling-factor", "inf"], "--moe-router-topk-scaling-factor"),
    (["--moe-router-topk-scaling-factor", "-2"], "--moe-router-topk-scaling-factor"),
    (["--moe-router-dtype", "fp16"], "--moe-router-dtype"),
    (["--moe-router-dtype", "fp64"], "--moe-router-dtype"),
    # Capacity and dropping.
    (["--moe-expert-capacity-factor", "0"], "--moe-expert-capacity-factor"),
    (["--moe-expert-capacity-factor", "-1"], "--moe-expert-capacity-factor"),
    (["--moe-expert-capacity-factor", "nan"], "--moe-expert-capacity-factor"),
    (["--moe-expert-capacity-factor", "inf"], "--moe-expert-capacity-factor"),
    (["--moe-expert-capacity-factor", "1e400"], "--moe-expert-capacity-factor"),
    (["--moe-expert-capacity-factor", "1e300"], "--moe-expert-capacity-factor"),  # aborted
    (["--moe-expert-capacity-factor", "5"], "--moe-expert-capacity-factor"),
    (["--moe-token-drop-policy", "position"], "--moe-token-drop-policy"),
    (["--moe-expert-capacity-factor", "1", "--moe-token-drop-policy", "random"], "--moe-token-drop-policy"),
    (["--moe-pad-expert-input-to-capacity"], "--moe-pad-expert-input-to-capacity"),
    # Coefficients and balancing types.
    (["--moe-aux-loss-coeff", "nan"], "--moe-aux-loss-coeff"),
    (["--moe-aux-loss-coeff", "inf"], "--moe-aux-loss-coeff"),
    (["--moe-aux-loss-coeff", "-1e-2"], "--moe-aux-loss-coeff"),
    (["--moe-aux-loss-coeff", "0x10"], "--moe-aux-loss-coeff"),
    (["--moe-aux-loss-coeff", "1e-2", "1e-3"], "--moe-aux-loss-coeff"),
    (["--moe-router-load-balancing-type", "aux_loss", "seq_aux_loss", "--moe-aux-loss-coeff", "1e-2", "1e-3",
      "1e-4"], "--moe-aux-loss-coeff"),
    (["--moe-router-load-balancing-type", "aux_loss", "seq_aux_loss", "--moe-aux-loss-coeff", "1e-2", "nan"],
     "--moe-aux-loss-coeff"),
    (["--moe-router-load-balancing-type", "balanced"], "--moe-router-load-balancing-type"),
    (["--moe-router-load-balancing-type", "sinkhorn", "--moe-aux-loss-coeff", "1e-2"], "--moe-aux-loss-coeff"),
    (["--moe-router-load-balancing-type", "sinkhorn", "aux_loss", "--moe-aux-loss-coeff", "0", "1e-2"],
     "--moe-router-load-balancing-type"),
    (["--moe-router-load-balancing-type", "sinkhorn", "--moe-expert-capacity-factor", "1"],
     "--moe-expert-capacity-factor"),
    (["--moe-router-load-balancing-type", "global_aux_loss", "--moe-aux-loss-coeff", "-1"], "--moe-aux-loss-coeff"),
    (["--moe-router-load-balancing-type", "global_aux_loss", "aux_loss", "--moe-aux-loss-coeff", "1e-2", "1e-3",
      "1e-4"], "--moe-aux-loss-coeff"),
    (["--moe-router-load-balancing-type", "quantile_balancing"], "--moe-router-load-balancing-type"),
    (["--moe-z-loss-coeff", "nan"], "--moe-z-loss-coeff"),
    (["--moe-z-loss-coeff", "inf"], "--moe-z-loss-coeff"),
    (["--moe-z-loss-coeff", "-1"], "--moe-z-loss-coeff"),
    # --moe-layer-freq: Megatron's int or Python list expression.
    (["--moe-layer-freq", "[1,0,1]"], "--moe-layer-freq"),
    (["--moe-layer-freq", "[1]"], "--moe-layer-freq"),
    (["--moe-layer-freq", "[2,1]"], "--moe-layer-freq"),
    (["--moe-layer-freq", "[-1,1]"], "--moe-layer-freq"),
    (["--moe-layer-freq", "[1]*1000000000000"], "--moe-layer-freq"),
    (["--moe-layer-freq", "([1]*100000)*100000"], "--moe-layer-freq"),
    (["--moe-layer-freq", "[1]*99999999999999999999"], "--moe-layer-freq"),
    (["--moe-layer-freq", "(" * 60000 + "[1,1]" + ")" * 60000], "--moe-layer-freq"),  # overflowed the stack
    (["--moe-layer-freq", "[" * 60000 + "1" + "]" * 60000], "--moe-layer-freq"),
    (["--moe-layer-freq", "[1]*2" + "+[]" * 30000 + "+[1]"], "--moe-layer-freq"),
    (["--moe-layer-freq", "[1,1"], "--moe-layer-freq"),
    (["--moe-layer-freq", "[1,1]]"], "--moe-layer-freq"),
    (["--moe-layer-freq", "__import__('os')"], "--moe-layer-freq"),
    (["--moe-layer-freq", "0"], "--moe-layer-freq"),
    (["--moe-layer-freq", "-1"], "--moe-layer-freq"),
    (["--moe-layer-freq", "nan"], "--moe-layer-freq"),
    (["--moe-layer-freq", ""], "--moe-layer-freq"),
    # Sizes: refused before anything allocates.
    (["--num-experts", "0x10"], "--num-experts"),
    (["--num-experts", "-4"], "--num-experts"),
    (["--num-experts", "99999999999999999999"], "--num-experts"),
    (["--moe-ffn-hidden-size", "-1"], "--moe-ffn-hidden-size"),
    (["--moe-ffn-hidden-size", "9223372036854775807"], "--moe-ffn-hidden-size"),  # aborted
    (["--moe-ffn-hidden-size", "4611686018427387904"], "--moe-ffn-hidden-size"),
    (["--moe-shared-expert-intermediate-size", "9223372036854775807", "--disable-bias-linear"],
     "--moe-shared-expert-intermediate-size"),  # aborted
    (["--num-experts", "9223372036854775807"], "--num-experts"),
    (["--moe-shared-expert-intermediate-size", "-1"], "--moe-shared-expert-intermediate-size"),
    # Layouts this program refuses with MoE layers.
    (["--moe-token-dispatcher-type", "flex"], "--moe-token-dispatcher-type"),
    (["--moe-token-dispatcher-type", "ring"], "--moe-token-dispatcher-type"),
    (["--moe-shared-expert-overlap", "--moe-shared-expert-intermediate-size", "32", "--disable-bias-linear"],
     "--moe-shared-expert-overlap"),
    (["--expert-tensor-parallel-size", "0"], "--expert-tensor-parallel-size"),
    (["--expert-model-parallel-size", "0"], "--expert-model-parallel-size"),
    (["--expert-model-parallel-size", "-2"], "--expert-model-parallel-size"),
    (["--expert-model-parallel-size", "4"], "--expert-model-parallel-size"),
    # Expert parallelism (issue 41): EP not dividing the experts or the world, ETP x EP x PP not
    # dividing the world (one process here).
    (["--expert-model-parallel-size", "3"], "--expert-model-parallel-size"),
    (["--num-experts", "6", "--expert-model-parallel-size", "4"], "--expert-model-parallel-size"),
    (["--expert-tensor-parallel-size", "2", "--expert-model-parallel-size", "2"], "--expert-tensor-parallel-size"),
    (["--expert-tensor-parallel-size", "2"], "--expert-tensor-parallel-size"),
    (["--expert-model-parallel-size", "99999999999999999999"], "--expert-model-parallel-size"),
]

# MoE flags without --num-experts (a dense model): each one refused naming itself.
WITHOUT_EXPERTS = [
    ["--expert-model-parallel-size", "2"],
    ["--moe-router-topk", "2"], ["--moe-ffn-hidden-size", "64"], ["--moe-layer-freq", "2"],
    ["--moe-aux-loss-coeff", "1e-2"], ["--moe-z-loss-coeff", "1e-3"], ["--moe-expert-capacity-factor", "1"],
    ["--moe-router-score-function", "sigmoid"], ["--moe-shared-expert-intermediate-size", "64"],
    ["--moe-router-load-balancing-type", "none"], ["--moe-grouped-gemm"], ["--moe-router-pre-softmax"],
    ["--moe-token-dispatcher-type", "alltoall"], ["--moe-per-layer-logging"],
]

# Megatron's MoE flags this program has not built: refused naming the flag, with or without experts.
NOT_BUILT = [
    ["--moe-input-jitter-eps", "1e-2"], ["--moe-shared-expert-gate"], ["--moe-apply-probs-on-input"],
    ["--moe-use-upcycling"], ["--moe-upcycling-granularity", "2"], ["--moe-layer-recompute"],
    ["--moe-router-force-load-balancing"], ["--moe-enable-deepep"], ["--moe-enable-routing-replay"],
    ["--moe-pad-experts-for-cuda-graph-inference"], ["--moe-router-quantile-balancing-ema", "0.9"],
    ["--moe-latent-size", "16"], ["--expert-model-parallel-size", "2"], ["--moe-flex-dispatcher-backend", "hybridep"],
    ["--overlap-moe-expert-parallel-comm"], ["--moe-router-padding-for-fp8"], ["--moe-use-grouped-tensor"],
    ["--moe-extended-tp"], ["--moe-use-legacy-grouped-gemm"],
]

# Expert counts and sizes too large for the machine: the memory plan refuses them before the
# model's memory is allocated (past 2^20 experts over the MoE layers from its closed form alone,
# which counts an MoE layer's tensors for one and two experts: it listed every expert's before).
TOO_LARGE = [
    ["--num-experts", "100000", "--moe-router-topk", "2"],
    ["--num-experts", "1000000000", "--moe-router-topk", "2"],
    ["--num-experts", "10000000", "--moe-router-topk", "2", "--moe-layer-freq", "[1,0]"],
    ["--num-experts", "100000000000", "--moe-router-topk", "2"],
    ["--num-experts", "1000000000", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "1"],
    ["--num-experts", "4", "--moe-ffn-hidden-size", "1000000000"],
    ["--num-experts", "4", "--moe-shared-expert-intermediate-size", "1000000000", "--disable-bias-linear"],
]


def command(base, extra):
    """base with extra's flags: a flag of base that extra gives again is dropped from base (with its
    values), and extra follows verbatim (multi-value flags, values starting with '-')."""
    given = {x for x in extra if x.startswith("--")}
    out, skipping = [], False
    for token in base:
        if token.startswith("--"):
            skipping = token in given
        if not skipping:
            out.append(token)
    return out + extra


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", required=True)
    args = parser.parse_args()
    failures, count = [], 0
    for extra, expected in CASES:
        result, seconds = run([args.binary] + command(TINY + MOE, extra), timeout=60)
        check_one_error(" ".join(extra)[:120], result, seconds, expected, LIMIT, failures)
        count += 1
    for extra in WITHOUT_EXPERTS:
        result, seconds = run([args.binary] + command(TINY, extra), timeout=60)
        check_one_error(f"{' '.join(extra)} without --num-experts", result, seconds, extra[0], LIMIT, failures)
        if result is not None and "--num-experts" not in result.stderr:
            failures.append(f"{' '.join(extra)} without --num-experts: the error does not name --num-experts")
        count += 1
    for extra in NOT_BUILT:
        for base in (TINY, TINY + MOE):
            result, seconds = run([args.binary] + command(base, extra), timeout=60)
            check_one_error(f"{' '.join(extra)} (not built)", result, seconds, extra[0], LIMIT, failures)
            count += 1
    for extra in TOO_LARGE:
        result, seconds = run([args.binary] + command(TINY, extra), timeout=120)
        check_one_error(" ".join(extra), result, seconds, "does not fit", 40, failures)
        count += 1
    # The same tiny model with good MoE flags trains (the refusals above are the flags', not the model's).
    result, _ = run([args.binary] + TINY + MOE + ["--moe-aux-loss-coeff", "1e-2"], timeout=120)
    if result is None or result.returncode != 0 or "iteration        2/       2" not in result.stdout:
        failures.append(f"the good MoE run did not train 2 iterations: {result and result.stderr[-400:]!r}")
    return harness.finish(failures, f"{count} bad MoE inputs refused with one line naming the flag")


if __name__ == "__main__":
    sys.exit(main())
