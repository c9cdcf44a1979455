#!/usr/bin/python3
"""Megatron's checkpoint and scheduler-resume flags (issue 32; docs/CHECKPOINTS.md, "Flags"), on the
CPU backend, one rank and under mpirun:

- a resume whose learning-rate schedule differs from the checkpoint's (--lr) stops with one error
  line naming both values and nothing trained; --use-checkpoint-opt_param-scheduler continues with
  the checkpoint's schedule (the uninterrupted run's learning rates and losses, as printed);
  --override-opt_param-scheduler with the command line's (the learning rates a fresh run with the
  new --lr prints at the same iterations); both together are refused; the same for --decoupled-lr,
  whose checkpoint continues the uninterrupted run's losses;
- --save-retain-interval 4 with saves every 2 of 10 iterations leaves iterations 4, 8 and 10
  (Megatron's rule: a save deletes the previous checkpoint unless it is a multiple of the interval);
- --no-ckpt-fully-parallel-save under DP=2: data-parallel rank 1's shard holds fewer bytes than
  with the default fully parallel save, and every tensor equals the default save's bit for bit;
- the other distributed-checkpoint flags of Megatron's test configurations
  (--dist-ckpt-optim-fully-reshardable, --ckpt-fully-parallel-load, --ckpt-assume-constant-structure,
  --async-strategy mcore with --async-save) run and save the same tensors as without them;
- --check-weight-hash-across-dp-replicas-interval 2 under TP2 x DP2 with the distributed optimizer:
  the replicas agree and all 4 iterations run; with one rank's parameter copy corrupted
  (GPT_CHECKPOINT_FAULT=replica-weights:3:corrupt) the run stops at iteration 2 with one error line
  naming world rank 3 and its data-parallel rank 0 (rank 1);
- --test-mode with --qk-layernorm under TP2 x DP2 (Megatron's real-time test of the q/k norms): the
  ranks agree and all 4 iterations run; with one rank's q/k norms corrupted
  (GPT_CHECKPOINT_FAULT=qk-layernorm:3:corrupt) the run stops before the first iteration with one
  error line naming world rank 3 against rank 0; without --qk-layernorm it checks nothing and runs.
"""
import argparse
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from checkpoint_test import (Runner, compare_bitwise, iteration_dir, losses, tracker)  # noqa: E402

BASE = ("--device cpu --mock-data --num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16 "
        "--max-position-embeddings 16 --vocab-size 255 --micro-batch-size 2 --global-batch-size 4 --log-interval 1 "
        "--eval-iters 0 --lr-decay-style cosine --lr-warmup-iters 1 --train-iters 8").split()
LEARNING_RATE = re.compile(r"iteration +(\d+)/ +\d+ \|.*\| learning rate: (\S+) \|")


def learning_rates(stdout):
    return {int(m.group(1)): m.group(2) for m in map(LEARNING_RATE.search, stdout.splitlines()) if m}


def error_lines(out, err):
    return [l for l in (out + err).splitlines() if l.startswith("error:")]


class Checks:
    def __init__(self):
        self.failures = []

    def expect(self, condition, message):
        if not condition:
            self.failures.append(message)
        return condition


def scheduler_checks(runner, checks, work):
    saved = os.path.join(work, "scheduler")
    shutil.rmtree(saved, ignore_errors=True)
    _, uninterrupted, _ = runner.run("uninterrupted", 1, BASE + ["--lr", "1e-3"])
    _, fresh_new_lr, _ = runner.run("fresh_new_lr", 1, BASE + ["--lr", "2e-3"])
    status, _, err = runner.run("save_at_4", 1, BASE + ["--lr", "1e-3", "--save", saved, "--exit-interval", "4"])
    checks.expect(status == 0 and tracker(saved) == "4", f"save at 4: exit {status} {err[-300:]}")

    status, out, err = runner.run("changed_lr", 1, BASE + ["--lr", "2e-3", "--load", saved])
    errors = error_lines(out, err)
    checks.expect(status not in (0, None) and len(errors) == 1 and "learning rate 0.002 (checkpoint: 0.001)" in errors[0]
                  and not losses(out), f"resume with another --lr: exit {status}, errors {errors}")
    print(f"  resume with --lr 2e-3 of a --lr 1e-3 checkpoint: exit {status}, {errors[0] if errors else 'no error'}")

    status, out, err = runner.run("use_checkpoint", 1, BASE + ["--lr", "2e-3", "--load", saved,
                                                               "--use-checkpoint-opt_param-scheduler"])
    want_lr = {i: v for i, v in learning_rates(uninterrupted).items() if i > 4}
    want_loss = {i: v for i, v in losses(uninterrupted).items() if i > 4}
    checks.expect(status == 0 and want_lr and learning_rates(out) == want_lr and losses(out) == want_loss,
                  f"--use-checkpoint-opt_param-scheduler: exit {status}, lr {learning_rates(out)} (want {want_lr}), "
                  f"losses {losses(out)} (want {want_loss})")
    print(f"  --use-checkpoint-opt_param-scheduler: iterations 5-8 learning rates and losses equal the uninterrupted "
          f"--lr 1e-3 run's: {learning_rates(out) == want_lr and losses(out) == want_loss}")

    status, out, err = runner.run("override", 1, BASE + ["--lr", "2e-3", "--load", saved,
                                                         "--override-opt_param-scheduler"])
    want_lr = {i: v for i, v in learning_rates(fresh_new_lr).items() if i > 4}
    checks.expect(status == 0 and want_lr and learning_rates(out) == want_lr,
                  f"--override-opt_param-scheduler: exit {status}, lr {learning_rates(out)} (want {want_lr})")
    print(f"  --override-opt_param-scheduler: iterations 5-8 learning rates equal a fresh --lr 2e-3 run's: "
          f"{learning_rates(out) == want_lr}")

    status, out, err = runner.run("both", 1, BASE + ["--lr", "1e-3", "--load", saved, "--override-opt_param-scheduler",
                                                     "--use-checkpoint-opt_param-scheduler"])
    errors = error_lines(out, err)
    checks.expect(status not in (0, None) and len(errors) == 1 and "contradict" in errors[0],
                  f"both scheduler flags: exit {status}, errors {errors}")


def decoupled_checks(runner, checks, work):
    """--decoupled-lr / --decoupled-min-lr: they change training (the losses differ from --lr alone), a
    checkpoint keeps them (a resume continues the uninterrupted run's losses), a resume with another
    --decoupled-lr stops naming both values, and --use-checkpoint-opt_param-scheduler continues with the
    checkpoint's."""
    saved = os.path.join(work, "decoupled")
    shutil.rmtree(saved, ignore_errors=True)
    decoupled = BASE + ["--lr", "1e-3", "--decoupled-lr", "3e-3", "--decoupled-min-lr", "1e-4"]
    _, plain, _ = runner.run("plain_lr", 1, BASE + ["--lr", "1e-3"])
    _, uninterrupted, _ = runner.run("decoupled_uninterrupted", 1, decoupled)
    checks.expect(losses(uninterrupted) and losses(uninterrupted)[8] != losses(plain)[8],
                  f"--decoupled-lr leaves the losses as --lr alone: {losses(uninterrupted)} vs {losses(plain)}")
    status, _, err = runner.run("decoupled_save_at_4", 1, decoupled + ["--save", saved, "--exit-interval", "4"])
    checks.expect(status == 0 and tracker(saved) == "4", f"decoupled save at 4: exit {status} {err[-300:]}")
    want_loss = {i: v for i, v in losses(uninterrupted).items() if i > 4}
    status, out, err = runner.run("decoupled_resume", 1, decoupled + ["--load", saved])
    checks.expect(status == 0 and want_loss and losses(out) == want_loss,
                  f"decoupled resume: exit {status}, losses {losses(out)} (want {want_loss}) {err[-300:]}")
    print(f"  --decoupled-lr resume: iterations 5-8 losses equal the uninterrupted run's: {losses(out) == want_loss}")
    changed = [f if f != "3e-3" else "4e-3" for f in decoupled]
    status, out, err = runner.run("decoupled_changed", 1, changed + ["--load", saved])
    errors = error_lines(out, err)
    checks.expect(status not in (0, None) and len(errors) == 1
                  and "decoupled learning rate 0.004 (checkpoint: 0.003)" in errors[0] and not losses(out),
                  f"resume with another --decoupled-lr: exit {status}, errors {errors}")
    print(f"  resume with --decoupled-lr 4e-3 of a 3e-3 checkpoint: exit {status}, {errors[0] if errors else 'no error'}")
    status, out, err = runner.run("decoupled_use_checkpoint", 1,
                                  changed + ["--load", saved, "--use-checkpoint-opt_param-scheduler"])
    checks.expect(status == 0 and losses(out) == want_loss,
                  f"--decoupled-lr 4e-3 with --use-checkpoint-opt_param-scheduler: exit {status}, losses {losses(out)} "
                  f"(want {want_loss})")


def retain_checks(runner, checks, work):
    retain = os.path.join(work, "retain")
    shutil.rmtree(retain, ignore_errors=True)
    status, out, err = runner.run("retain", 1, BASE + ["--lr", "1e-3", "--train-iters", "10", "--save", retain,
                                                       "--save-interval", "2", "--save-retain-interval", "4"])
    left = sorted(n for n in os.listdir(retain) if n.startswith("iter_")) if os.path.isdir(retain) else []
    want = [f"iter_{i:07d}" for i in (4, 8, 10)]
    checks.expect(status == 0 and left == want and tracker(retain) == "10",
                  f"--save-retain-interval 4: exit {status}, left {left} (want {want}) {err[-300:]}")
    print(f"  --save-retain-interval 4 with saves every 2 of 10 iterations leaves {left}")


def shard_bytes(checkpoint):
    return {n: os.path.getsize(os.path.join(checkpoint, n)) for n in os.listdir(checkpoint) if n.startswith("shard_")}


def parallel_save_checks(runner, checks, work):
    runs = {}
    variants = {
        "default": [],
        "not_fully_parallel": ["--no-ckpt-fully-parallel-save"],
        "megatron_flags": ["--dist-ckpt-optim-fully-reshardable", "--ckpt-fully-parallel-load",
                           "--ckpt-assume-constant-structure", "--ckpt-fully-parallel-save", "--async-save",
                           "--async-strategy", "mcore", "--ckpt-format", "fsdp_dtensor"],
    }
    for name, flags in variants.items():
        directory = os.path.join(work, f"parallel_{name}")
        shutil.rmtree(directory, ignore_errors=True)
        status, out, err = runner.run(name, 2, BASE + ["--lr", "1e-3", "--train-iters", "2", "--save", directory] + flags)
        checks.expect(status == 0 and tracker(directory) == "2", f"{name}: exit {status} {err[-400:]}")
        runs[name] = iteration_dir(directory, 2)
    if checks.failures:
        return
    for name in ("not_fully_parallel", "megatron_flags"):
        problems, count = compare_bitwise(runs[name], runs["default"])
        checks.failures += [f"{name} vs default save: {p}" for p in problems]
        print(f"  {name}: {count} tensors {'identical to' if not problems else 'DIFFER from'} the default save's")
    default, single = shard_bytes(runs["default"]), shard_bytes(runs["not_fully_parallel"])
    rank1 = sorted(default)[-1]
    single.setdefault(rank1, 0)  # a rank with nothing to write writes no shard
    checks.expect(single[rank1] < default[rank1],
                  f"--no-ckpt-fully-parallel-save: {rank1} holds {single[rank1]} bytes, the default {default[rank1]}")
    print(f"  {rank1} (data-parallel rank 1): {default[rank1]} bytes fully parallel, {single[rank1]} bytes with "
          "--no-ckpt-fully-parallel-save")


def replica_check(runner, checks):
    flags = BASE + ["--lr", "1e-3", "--train-iters", "4", "--check-weight-hash-across-dp-replicas-interval", "2",
                    "--tensor-model-parallel-size", "2", "--use-distributed-optimizer"]
    status, out, err = runner.run("replicas_agree", 4, flags)
    checks.expect(status == 0 and sorted(losses(out)) == [1, 2, 3, 4], f"replica check: exit {status} {err[-400:]}")
    status, out, err = runner.run("replica_drift", 4, flags, env={"GPT_CHECKPOINT_FAULT": "replica-weights:3:corrupt"})
    errors = error_lines(out, err)
    checks.expect(status not in (0, None) and len(errors) == 1 and "iteration 2:" in errors[0]
                  and "ranks 3 (against 1)" in errors[0] and sorted(losses(out)) == [1, 2],
                  f"replica drift: exit {status}, errors {errors}, logged {sorted(losses(out))}")
    print(f"  a drifted replica: exit {status}, {errors[0] if errors else 'no error line'}")


def test_mode_check(runner, checks):
    flags = BASE + ["--lr", "1e-3", "--train-iters", "4", "--test-mode", "--tensor-model-parallel-size", "2",
                    "--use-distributed-optimizer"]
    status, out, err = runner.run("test_mode_agree", 4, flags + ["--qk-layernorm"])
    checks.expect(status == 0 and sorted(losses(out)) == [1, 2, 3, 4], f"--test-mode: exit {status} {err[-400:]}")
    status, out, err = runner.run("test_mode_drift", 4, flags + ["--qk-layernorm"],
                                  env={"GPT_CHECKPOINT_FAULT": "qk-layernorm:3:corrupt"})
    errors = error_lines(out, err)
    checks.expect(status not in (0, None) and len(errors) == 1 and "iteration 0:" in errors[0]
                  and "--test-mode" in errors[0] and "ranks 3 (against 0)" in errors[0] and not losses(out),
                  f"--test-mode drift: exit {status}, errors {errors}, logged {sorted(losses(out))}")
    print(f"  --test-mode, a rank's q/k norms drifted: exit {status}, {errors[0] if errors else 'no error line'}")
    status, out, err = runner.run("test_mode_without_qk", 4, flags, env={"GPT_CHECKPOINT_FAULT": "qk-layernorm:3:corrupt"})
    checks.expect(status == 0 and sorted(losses(out)) == [1, 2, 3, 4],
                  f"--test-mode without --qk-layernorm: exit {status} {err[-400:]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mpirun", required=True)
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    runner = Runner(os.path.abspath(args.binary), args.mpirun, args.work_dir)
    checks = Checks()
    scheduler_checks(runner, checks, args.work_dir)
    decoupled_checks(runner, checks, args.work_dir)
    retain_checks(runner, checks, args.work_dir)
    parallel_save_checks(runner, checks, args.work_dir)
    replica_check(runner, checks)
    test_mode_check(runner, checks)
    return harness.finish(checks.failures)


if __name__ == "__main__":
    sys.exit(main())
