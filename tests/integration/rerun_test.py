#!/usr/bin/python3
"""Megatron's rerun checks (--rerun-mode, --check-for-spiky-loss; train/resilience/rerun_check.h) under mpirun
-np 2 (DP=2), with a fault injected on rank 1 in iteration 5 (GPT_RERUN_FAULT):

1. transient (NaN in the first run only): the rerun is clean, the job exits 17 (Megatron's
   EXIT_CODE_FAILED_ON_RESULT_VALIDATION) naming rank 1 and its node, without a save; resumed
   without the fault from its periodic checkpoint (3) it trains 4..8 with the uninterrupted losses.
2. reproducible (NaN in the rerun too): the job reports the iteration and its samples, saves
   iteration 4 and exits 16 (EXIT_CODE_RESUME_TO_DISAMBIGUATE); resumed from it, the second stage:
   on the same node and device, exit 16 again without a save; on another node (GPT_TEST_NODE_NAME)
   with the NaN again, "likely correct", exit 17; on another node without it, "possible persistent
   error", exit 17. With --no-check-for-nan-in-loss-and-grad the first run skips iteration 5's
   update instead and finishes.
3. --check-for-spiky-loss: a transient spike (x1e6) after the first 100 iterations is rejected,
   rerun, and training continues with the rerun's result: every loss equals the run without checks.
4. report_stats: every iteration rerun, the largest relative difference reported is 0, the losses
   are the run's without checks.
5. Megatron's error injection (--error-injection-rate 1, so that every validation call of iteration
   2 is rejected): each --error-injection-type ends as Megatron's (error_injection below)."""

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

MODEL = ("--device cpu --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
         "--max-position-embeddings 32 --vocab-size 512 --micro-batch-size 1 --global-batch-size 8 --lr 1e-3 "
         "--log-interval 1 --eval-iters 0").split()
# Searched anywhere in a line: under mpirun another rank's output may share the logging rank's line.
LOSS = re.compile(r" \[[^\]]*\] iteration +(\d+)/ +\d+ \|.*\| lm loss: (\S+) \|.*number of skipped iterations: +(\d+)")


def losses(text):
    return {int(m.group(1)): m.group(2) for m in map(LOSS.search, text.splitlines()) if m}


def skipped(text):
    return {int(m.group(1)): int(m.group(3)) for m in map(LOSS.search, text.splitlines()) if m}


class Runner:
    def __init__(self, options, work_dir):
        self.options, self.work_dir, self.count = options, work_dir, 0

    def run(self, label, extra, fault=None, node=None):
        self.count += 1
        env = dict(os.environ)
        env.pop("GPT_RERUN_FAULT", None)
        env.pop("GPT_TEST_NODE_NAME", None)
        if fault:
            env["GPT_RERUN_FAULT"] = fault
        if node:
            env["GPT_TEST_NODE_NAME"] = node  # every rank pretends to run on another node
        command = [self.options.mpirun, "-np", "2", "--oversubscribe", "--bind-to", "none", self.options.binary] + MODEL + extra
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, cwd=self.work_dir)
        with open(os.path.join(self.work_dir, f"run_{self.count:02d}_{label}.log"), "w") as log:
            log.write(f"{' '.join(command)}\nGPT_RERUN_FAULT={fault}\nexit {result.returncode}\n--- stdout\n"
                      f"{result.stdout}\n--- stderr\n{result.stderr}")
        return result.returncode, result.stdout, result.stderr


def tracker(directory):
    path = os.path.join(directory, "latest_checkpointed_iteration.txt")
    return open(path).read().strip() if os.path.exists(path) else None


def error_injection(runner, validate, reference, host):
    """Each --error-injection-type ends as Megatron's: transient, exit 17 without a save; persistent
    and correct_result, exit 16 with the checkpoint before iteration 2, then resumed on another node
    exit 17 as a persistent error or a correct result (on the same node, exit 16 again). On a
    non-fatal check (the spike) a transient injection reruns and continues every iteration, and a
    persistent one continues once and blocks later injections (Megatron's injected_error_type)."""
    failures = []
    inject = lambda kind: ["--error-injection-rate", "1", "--error-injection-type", kind]  # noqa: E731
    rejected = ("Unexpected result {} on rank 0 at iteration #2 invocation #1 "
                "(message='found NaN in local forward loss calculation')")
    names = {"transient_error": "Transient error", "persistent_error": "Persistent error",
             "correct_result": "Expected result"}
    for kind, first_status in [("transient_error", 17), ("persistent_error", 16), ("correct_result", 16)]:
        save = os.path.join(runner.work_dir, kind)
        status, out, err = runner.run(kind, validate + inject(kind) + ["--save", save, "--load", save])
        value = re.search(r"Unexpected result (\S+) on rank 0 at iteration #2 invocation #1", err)
        compared = value and (f"({value.group(1)} != {value.group(1)})" if kind == "transient_error"
                              else f"({value.group(1)} = {value.group(1)})")
        expected = [f"Injecting error type {names[kind]}", rejected.format(value.group(1) if value else "?"),
                    f"Rank 0, node {host}, iteration #2: First rerun: unexpected result is "
                    f"{'not ' if kind == 'transient_error' else ''}reproducible within the tolerance {compared}"]
        if kind == "transient_error":
            expected.append(f"Rank 0, node {host}, iteration #2: Possible transient error!")
        checkpoint = None if kind == "transient_error" else "1"
        if (status != first_status or not value or any(e not in err for e in expected) or
                err.count("Injecting error type") != 2 or tracker(save) != checkpoint or "error:" in err or
                losses(out) != {1: reference[1]}):
            failures.append(f"injection {kind}: exit {status} (expected {first_status}), checkpoint {tracker(save)} "
                            f"(expected {checkpoint}), losses {losses(out)}, or lines missing: {err[-1500:]}")
        print(f"injection {kind}: exit {status}, checkpoint {tracker(save)}: {expected[-1][:110]}")
        if kind == "transient_error":
            continue
        second = [("same node", None, 16, f"Got rescheduled on the same GPU. Need to resume again from the same "
                                          f"checkpoint (node: {host}, gpu: 0)"),
                  ("another node", "elsewhere", 17,
                   "Possible persistent error! (node " + host if kind == "persistent_error" else
                   "Correct result (but possible Application error)")]
        for label, node, expected_status, line in second:
            status, out, err = runner.run(f"{kind}_second_stage", validate + inject(kind) + ["--save", save, "--load",
                                                                                                save], node=node)
            if status != expected_status or line not in err or tracker(save) != "1" or "Injecting" in err:
                failures.append(f"injection {kind}, second stage on {label}: exit {status} (expected "
                                f"{expected_status}), checkpoint {tracker(save)}: {err[-1200:]}")
            print(f"injection {kind}, second stage on {label}: exit {status}: {line[:90]}")
    # Non-fatal: only the spike check is validated.
    spike_only = validate + ["--no-check-for-nan-in-loss-and-grad", "--check-for-spiky-loss"]
    # (injections: both ranks'; rejections: the deciding rank 0's lines, one per iteration rerun)
    for kind, injections, rejections in [("transient_error", 14, 7), ("persistent_error", 2, 1)]:
        status, out, err = runner.run(f"{kind}_spike", spike_only + inject(kind))
        continued = out.count("Continuing normal execution because failed validation was not fatal")
        if (status != 0 or losses(out) != reference or err.count("Injecting error type") != injections or
                err.count("(message='Spiky loss')") != rejections or continued != rejections):
            failures.append(f"injection {kind} on the spike check: exit {status}, {err.count('Injecting error type')} "
                            f"injections (expected {injections}), {continued} continued, losses {losses(out)}")
        print(f"injection {kind} on the spike check: exit {status}, {err.count('Injecting error type')} injections, "
              f"{continued} iterations rerun and continued, losses equal the run without checks")
    return failures


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mpirun", required=True)
    parser.add_argument("--work-dir", required=True)
    options = parser.parse_args()
    options.binary = os.path.abspath(options.binary)
    work_dir = os.path.abspath(options.work_dir)
    shutil.rmtree(work_dir, ignore_errors=True)
    os.makedirs(work_dir)
    runner = Runner(options, work_dir)
    failures = []
    host = socket.gethostname()
    validate = ["--rerun-mode", "validate_results", "--train-iters", "8"]

    status, out, err = runner.run("reference", ["--train-iters", "8"])
    reference = losses(out)
    if status != 0 or len(reference) != 8:
        return harness.finish([f"the reference run failed: {err[-1000:]}"])

    # 1. Transient: exit 17 without a save (Megatron's head); the job resumes from its last
    # periodic checkpoint (iteration 3).
    save = os.path.join(work_dir, "transient")
    status, out, err = runner.run("transient", validate + ["--save", save, "--load", save, "--save-interval", "3"],
                                  fault="5:1")
    expected = ["Unexpected result nan on rank 1 at iteration #5 invocation #1 "
                "(message='found NaN in local forward loss calculation')",
                f"Rank 1, node {host}, iteration #5: First rerun: unexpected result is not reproducible",
                f"Rank 1, node {host}, iteration #5: Possible transient error!"]
    if (status != 17 or any(e not in err for e in expected) or
            "a transient error on rank 1: Exiting now. The job can be resumed from a previous checkpoint" not in out):
        failures.append(f"transient: exit 17 (expected 17) or messages missing: {err[-1500:]}")
    saved = tracker(save)
    if saved != "3" or "error:" in err:
        failures.append(f"transient: checkpoint {tracker(save)} (expected 3: no save at the exit), or an error line")
    if {i: reference[i] for i in range(1, 5)} != losses(out):
        failures.append(f"transient: iterations before the fault {losses(out)} != the reference's")
    status, resumed_out, err = runner.run("transient_resumed", validate + ["--save", save, "--load", save])
    if status != 0 or losses(resumed_out) != {i: reference[i] for i in range(4, 9)}:
        failures.append(f"transient: the resumed run (exit {status}) printed {losses(resumed_out)}, expected the "
                        "reference's iterations 4..8")
    print(f"transient: exit 17 without a save (last checkpoint {saved}); resumed 4..8 equal the uninterrupted run")

    # 2. Reproducible: exit 16, or skip under --no-check-for-nan-in-loss-and-grad.
    save = os.path.join(work_dir, "persistent")
    status, out, err = runner.run("persistent", validate + ["--save", save, "--load", save], fault="5:1:persistent")
    reported = (f"Rank 1, node {host}, iteration #5: First rerun: unexpected result is reproducible within the "
                "tolerance (nan = nan): the data or the numerics of iteration 5, samples [32, 40)")
    if status != 16 or reported not in err or tracker(save) != "4" or "is reproducible (samples [32, 40))" not in out:
        failures.append(f"persistent: exit {status} (expected 16), checkpoint {tracker(save)} or report missing: "
                        f"{err[-1500:]}")
    # Megatron's second stage, from the machine's state in that checkpoint.
    stage_two = [
        ("same node", "5:1:persistent", None, 16, f"Got rescheduled on the same GPU. Need to resume again from the same "
                                                  f"checkpoint (node: {host}, gpu: 1)"),
        ("another node, reproduced", "5:1:persistent", "elsewhere", 17,
         "Second rerun: unexpected result is reproducible on a different GPU, therefore it was likely correct (nan = nan)"),
        ("another node, clean", None, "elsewhere", 17,
         "Second rerun: unexpected result is not reproducible on a different GPU, therefore was likely incorrect"),
    ]
    for label, fault, node, expected_status, expected_line in stage_two:
        status, out, err = runner.run("second_stage", validate + ["--save", save, "--load", save], fault=fault,
                                      node=node)
        if (status != expected_status or expected_line not in err or tracker(save) != "4" or
                "Getting RerunStateMachine state from checkpoint. Will rerun step 5." not in out):
            failures.append(f"second stage, {label}: exit {status} (expected {expected_status}), checkpoint "
                            f"{tracker(save)}: {err[-1200:]}")
        print(f"second stage, {label}: exit {status}: {expected_line[:90]}")
    status, out, err = runner.run("persistent_skip", validate + ["--no-check-for-nan-in-loss-and-grad"],
                                  fault="5:1:persistent")
    got = losses(out)
    if (status != 0 or skipped(out).get(5) != 1 or got.get(5) != "NAN" or
            any(got.get(i) != reference[i] for i in range(1, 5)) or len(got) != 8):
        failures.append(f"persistent with --no-check-for-nan-in-loss-and-grad: exit {status}, losses {got}, skipped "
                        f"{skipped(out)}")
    print(f"persistent: exit 16 after saving iteration 4, samples [32, 40) reported; with "
          f"--no-check-for-nan-in-loss-and-grad iteration 5 skipped (exit {status})")

    # 3. A transient spike after the first 100 iterations.
    status, spike_reference_out, _ = runner.run("spike_reference", ["--train-iters", "104"])
    status, out, err = runner.run("spike", ["--rerun-mode", "validate_results", "--check-for-spiky-loss",
                                            "--train-iters", "104"], fault="103:1:spike")
    if (status != 0 or "(message='Spiky loss')" not in err or "not reproducible" not in err or
            "Continuing normal execution because failed validation was not fatal" not in out or
            losses(out) != losses(spike_reference_out)):
        failures.append(f"spiky loss: exit {status}, or not rejected, rerun and continued with the reference's losses: "
                        f"{err[-1500:]}")
    print("spiky loss: rejected at iteration 103, rerun, continued; all 104 losses equal the run without checks")

    # 4. report_stats.
    every_four = ["--train-iters", "8", "--log-interval", "4"]
    _, interval_reference, _ = runner.run("report_stats_reference", every_four)
    status, out, err = runner.run("report_stats", ["--rerun-mode", "report_stats"] + every_four)
    stats = re.findall(r"loss: (\d+) reruns, largest relative difference (\S+)", out)
    if status != 0 or stats != [("4", "0.000e+00")] * 2 or losses(out) != losses(interval_reference) or not stats:
        failures.append(f"report_stats: exit {status}, stats {stats}, losses {losses(out)}")
    print(f"report_stats: {stats}")

    # 5. Megatron's error injection (--error-injection-rate 1: every validation call of the first
    # validated iteration, 2, is rejected, on both ranks; rank 0 decides).
    failures += error_injection(runner, validate, reference, host)

    return harness.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
