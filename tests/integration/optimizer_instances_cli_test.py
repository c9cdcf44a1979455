#!/usr/bin/python3
"""--num-distributed-optimizer-instances from the command line (issue 32): pretrain_gpt prints the
instances' groups at start-up (DP 4 in 2 instances: [0,1] [2,3], across them [0,2] [1,3]) and a
memory report with the optimizer state of 1/2 of the elements per rank (1/4 with one instance); its
checkpoints hold each optimizer element once (the same bytes of optimizer state as one instance's,
spread over the instances, or all written by instance 0 with --no-ckpt-fully-parallel-save); a run
saved at iteration 3 resumes bit-identically under the same instances (also with half the optimizer
state in host memory); and the checkpoint moves between instance counts: 2 -> 1, 1 -> 2, 2 -> 4
(instances of one rank) and 2 -> one rank without the distributed optimizer, each continuation
within 1e-5 of the saving layout's uninterrupted losses, its checkpoint at 6 that run's state (the
summation order differs between instance counts, so only those comparisons are not bit for bit).

  optimizer_instances_cli_test.py --binary build-cpu/bin/pretrain_gpt --mpirun mpirun
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

import h5py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checkpoint_test as ck  # noqa: E402
import harness  # noqa: E402

MODEL = ["--device", "cpu", "--mock-data", "--vocab-size", "250", "--num-layers", "2", "--hidden-size", "64",
         "--num-attention-heads", "4", "--seq-length", "32", "--max-position-embeddings", "32",
         "--micro-batch-size", "2", "--global-batch-size", "8", "--lr", "1e-3", "--log-interval", "1",
         "--eval-iters", "0", "--train-iters", "6", "--save-interval", "3"]
ZERO1 = ["--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather"]


def instances(n):
    return ZERO1 + ["--num-distributed-optimizer-instances", str(n)]


MOMENTS = re.compile(r"^\s+optimizer moments \(FP32\)\s+([\d.]+) /\s+([\d.]+)")
GROUPS = [">   distributed-optimizer instance groups: [0,1] [2,3]",
          ">   across distributed-optimizer instances groups: [0,2] [1,3]"]


def run(binary, mpirun, ranks, flags, work, name):
    command = ([binary] if ranks == 1 else mpirun + ["-np", str(ranks), binary]) + MODEL + flags
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=work)
    with open(os.path.join(work, name + ".log"), "w") as log:
        log.write(" ".join(command) + f"\nexit {done.returncode}\n{done.stdout}\n{done.stderr}")
    if done.returncode != 0:
        raise RuntimeError(f"{name}: exit {done.returncode}: {done.stderr[-1500:]}")
    return done.stdout


def checkpoint_at_3(source, work, name):
    """The saving run's checkpoint at 3 alone in a directory (so that a resume starts there)."""
    moved = os.path.join(work, name)
    os.makedirs(moved)
    shutil.copytree(ck.iteration_dir(source, 3), ck.iteration_dir(moved, 3))
    with open(os.path.join(moved, ck.TRACKER), "w") as f:
        f.write("3\n")
    return moved


def written_elements(checkpoint, ranks):
    """[rank] (model elements, optimizer elements) in the rank's shard file (none: a rank that writes
    nothing writes no file)."""
    counts = []
    for rank in range(ranks):
        sizes = {"model": 0, "optimizer": 0}
        path = os.path.join(checkpoint, f"shard_{rank:05d}.h5")
        if not os.path.exists(path):
            counts.append((0, 0))
            continue
        with h5py.File(path, "r") as f:
            def visit(name, obj):
                if isinstance(obj, h5py.Dataset) and name.split("/")[0] in sizes:
                    sizes[name.split("/")[0]] += obj.size
            f.visititems(visit)
        counts.append((sizes["model"], sizes["optimizer"]))
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    args = parser.parse_args()
    binary = os.path.abspath(args.binary)
    mpirun = [args.mpirun, "--oversubscribe", "--bind-to", "none"]
    work = tempfile.mkdtemp(prefix="optimizer_instances_")
    failures = []

    def expect(condition, text):
        if not condition:
            failures.append(text)
        return condition

    try:
        # The uninterrupted runs: 2 instances and 1, each saving at 3 and 6.
        full, moments = {}, {}
        for n in (2, 1):
            save = os.path.join(work, f"full_n{n}")
            stdout = run(binary, mpirun, 4, instances(n) + ["--save", save], work, f"full_n{n}")
            full[n] = (save, ck.losses(stdout))
            rows = [MOMENTS.match(line) for line in stdout.splitlines()]
            moments[n] = [tuple(float(v) for v in row.groups()) for row in rows if row]
            if n == 2:
                missing = [line for line in GROUPS if line not in stdout.splitlines()]
                if expect(not missing, f"start-up lines missing: {missing}"):
                    print("start-up: " + " / ".join(line.strip("> ") for line in GROUPS), flush=True)

        # The memory report: each rank holds the moments of 1/2 of the elements with 2 instances of
        # 2 ranks, 1/4 with one instance of 4 (theoretical and allocated; MB with two decimals).
        if expect(moments[1] and moments[2], f"no optimizer moments in the memory reports: {moments}"):
            one, two = moments[1][0], moments[2][0]
            expect(all(abs(b - 2 * a) <= 0.011 for a, b in zip(one, two)),
                   f"optimizer moments per rank (MB, theoretical / allocated): 1 instance {one}, 2 instances {two}")
            print(f"optimizer moments per rank (MB, theoretical / allocated): 1 instance {one}, 2 instances {two}")

        # Each optimizer element written once: as many optimizer elements as one instance's
        # checkpoint, two moments (FP32: no separate master weights) of every model element.
        one, two = (written_elements(ck.iteration_dir(full[n][0], 3), 4) for n in (1, 2))
        model = sum(m for m, _ in one)
        expect(sum(o for _, o in two) == sum(o for _, o in one) == 2 * model,
               f"optimizer elements written: 2 instances {[o for _, o in two]}, 1 instance {[o for _, o in one]}, "
               f"model {model}")
        save = os.path.join(work, "instance0_writes")
        run(binary, mpirun, 4, instances(2) + ["--save", save, "--no-ckpt-fully-parallel-save", "--exit-interval", "3"],
            work, "instance0_writes")
        rank0 = written_elements(ck.iteration_dir(save, 3), 4)
        expect([o for _, o in rank0[2:]] == [0, 0] and sum(o for _, o in rank0) == 2 * model,
               f"--no-ckpt-fully-parallel-save: optimizer elements per rank {[o for _, o in rank0]} (instance 1 "
               f"is ranks 2 and 3)")
        print(f"optimizer elements written per rank: 2 instances {[o for _, o in two]}, 1 instance "
              f"{[o for _, o in one]}, instance 0 alone {[o for _, o in rank0]} (2 x {model} model elements)")

        # A resume under the same instances: bit-identical losses and checkpoint at 6; the same with
        # half of each rank's optimizer state in host memory.
        offload = ["--optimizer-cpu-offload", "--use-precision-aware-optimizer", "--optimizer-offload-fraction", "0.5"]
        save = os.path.join(work, "full_n2_offload")
        full_offload = (save, ck.losses(run(binary, mpirun, 4, instances(2) + offload + ["--save", save], work,
                                            "full_n2_offload")))
        for name, flags, (source, reference) in (("", [], full[2]), (", half offloaded", offload, full_offload)):
            case = "resume_n2" + ("_offload" if flags else "")
            moved = checkpoint_at_3(source, work, case)
            stdout = run(binary, mpirun, 4, instances(2) + flags + ["--load", moved, "--save", moved], work, case)
            tail = ck.losses(stdout)
            expect(ck.loaded_iteration(stdout) == 3, f"resume{name}: loaded {ck.loaded_iteration(stdout)}")
            same = all(tail.get(i) == reference.get(i) for i in (4, 5, 6))
            problems, count = ck.compare_bitwise(ck.iteration_dir(source, 6), ck.iteration_dir(moved, 6))
            if expect(same and not problems, f"resume with 2 instances{name}: losses {tail} vs {reference}; "
                                             f"{problems[:3]}"):
                print(f"saved at 3 and resumed with 2 instances{name}: losses 4..6 and {count} tensors at 6 "
                      f"bit-identical")

        # Between instance counts and layouts.
        for name, source, ranks, flags in (("2 -> 1", 2, 4, instances(1)), ("1 -> 2", 1, 4, instances(2)),
                                           ("2 -> 4", 2, 4, instances(4)), ("2 -> one rank", 2, 1, [])):
            case = "reshard_" + name.replace(" -> ", "_to_").replace(" ", "_")
            moved = checkpoint_at_3(full[source][0], work, case)
            stdout = run(binary, mpirun, ranks, flags + ["--load", moved, "--save", moved], work, case)
            ours, reference = ck.losses(stdout), full[source][1]
            if not expect(ck.loaded_iteration(stdout) == 3 and all(i in ours for i in (4, 5, 6)),
                          f"{name}: loaded {ck.loaded_iteration(stdout)}, losses {ours}"):
                continue
            worst = max(abs(float(ours[i]) - float(reference[i])) / float(reference[i]) for i in (4, 5, 6))
            saved, reference6 = (ck.state_tensors(ck.iteration_dir(d, 6)) for d in (moved, full[source][0]))
            bad, worst_state = ck.close_tensors(saved, reference6)
            moments = [k for k in reference6 if k.startswith("optimizer/exp_avg")]
            expect(worst <= 1e-5, f"{name}: losses 4..6 {[ours[i] for i in (4, 5, 6)]} vs "
                                  f"{[reference[i] for i in (4, 5, 6)]} (max relative {worst:.1e})")
            expect(set(saved) == set(reference6) and not bad and moments,
                   f"{name}: checkpoint at 6 differs from the uninterrupted run's in {bad[:4]} "
                   f"(keys {sorted(set(saved) ^ set(reference6))[:4]})")
            print(f"saved with {source} instance(s) at 3, resumed {name}: losses 4..6 max relative {worst:.1e}, "
                  f"checkpoint at 6 within {worst_state:.1e} of the uninterrupted run's ({len(moments)} moments)")
    except RuntimeError as error:
        failures.append(str(error))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return harness.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
