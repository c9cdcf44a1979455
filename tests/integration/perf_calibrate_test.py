#!/usr/bin/env python3
"""perf_calibrate as CI runs it: the reduced set under mpirun with 2 ranks writes a cluster file
that perf_model reads and predicts with, and JSON whose figures are sane (every time and bandwidth
positive, the GEMM efficiency curve non-decreasing and within (0, 1], the ring fit's latency >= 0);
the trainer probes ran and the host-overhead terms fitted to them are non-negative; one rank alone
(no collective to time) is one "error:" line and exit 1. No timing is asserted."""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--perf-model", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    args = parser.parse_args()
    failures = []

    def check(condition, what):
        if not condition:
            failures.append(what)

    mpirun = [args.mpirun, "--oversubscribe", "--bind-to", "none"]
    with tempfile.TemporaryDirectory() as tmp:
        conf, data = os.path.join(tmp, "measured.conf"), os.path.join(tmp, "measured.json")
        done = subprocess.run(mpirun + ["-np", "2", args.binary, "--reduced", "--repeats", "3", "--out", conf,
                                        "--json", data], capture_output=True, text=True, timeout=300)
        check(done.returncode == 0, f"2 ranks: exit {done.returncode}: {done.stderr}")
        if done.returncode == 0:
            with open(data) as f:
                m = json.load(f)
            check(m["peak_tflops"] > 0 and m["memory_bandwidth_GBps"] > 0, "positive peak and memory bandwidth")
            check(m["link_fit"]["bandwidth_GBps"] > 0 and m["link_fit"]["latency_us"] >= 0, f"link fit {m['link_fit']}")
            check(all(g["seconds"] > 0 and g["efficiency"] > 0 for g in m["gemms"]), "GEMM times positive")
            curve = m["gemm_efficiency"]
            check(len(curve) >= 2, f"GEMM curve over at least two decades: {curve}")
            check(all(a[0] < b[0] and a[1] <= b[1] for a, b in zip(curve, curve[1:])), f"curve monotone: {curve}")
            check(all(0 < e <= 1 for _, e in curve), f"curve within (0, 1]: {curve}")
            ops = {(c["op"], c["span"]) for c in m["collectives"]}
            check({("all_reduce", 2), ("all_gather", 2), ("reduce_scatter", 2)} <= ops, f"collectives timed: {ops}")
            check(all(c["seconds"] > 0 and c["bytes"] > 0 for c in m["collectives"]), "collective times positive")
            check(len({c["bytes"] for c in m["collectives"]}) >= 3, "collectives at several sizes")
            check(0 < m["attention_forward_efficiency"] and 0 < m["attention_backward_efficiency"], "attention timed")
            check(m["host_adamw_GBps"] > 0 and m["host_link_bandwidth_GBps"] > 0, "host AdamW and host link measured")
            # The trainer probes: every one ran (a positive step time), was predicted, and the fitted
            # host-overhead terms are non-negative and no worse a fit than none.
            probes = m["trainer_probes"]
            check(len(probes) >= 5, f"trainer probes ran: {probes}")
            check(all(p["measured_s"] > 0 and p["predicted_s"] > 0 and p["ops"] > 0 and p["passes"] > 0
                      for p in probes), f"probe times and counts positive: {probes}")
            check(any(p["collectives"] > 2 * min(q["collectives"] for q in probes) for p in probes),
                  "the probes differ in communication calls (ZeRO-2, TP)")
            fit = m["host_overhead"]
            check(all(fit[k] >= 0 for k in ("per_op_us", "per_pass_us", "per_collective_us", "per_iteration_ms")),
                  f"overhead terms non-negative: {fit}")
            check(fit["rms_relative_error"] <= fit["rms_relative_error_before"] + 1e-12, f"the fit helps: {fit}")
            with open(conf) as f:
                text = f.read()
            check(all(f"\n{key} = " in text for key in ("kernel_overhead_us", "microbatch_overhead_us",
                                                        "collective_overhead_us", "iteration_overhead_ms")),
                  "the file carries the four overhead keys")
            predicted = subprocess.run([args.perf_model, "--cluster", conf, "--world-size", "2", "--json",
                                        "--num-layers", "4", "--hidden-size", "128", "--num-attention-heads", "4",
                                        "--seq-length", "64", "--max-position-embeddings", "64", "--vocab-size",
                                        "1024", "--micro-batch-size", "2", "--global-batch-size", "16"],
                                       capture_output=True, text=True, timeout=60)
            check(predicted.returncode == 0, f"perf_model reads the file: {predicted.stderr}")
            if predicted.returncode == 0:
                check(json.loads(predicted.stdout)["iteration_time_s"] > 0, "a positive prediction")
            # The measured host figures price optimizer offload.
            offload = subprocess.run([args.perf_model, "--cluster", conf, "--world-size", "2", "--json",
                                      "--num-layers", "4", "--hidden-size", "128", "--num-attention-heads", "4",
                                      "--seq-length", "64", "--max-position-embeddings", "64", "--vocab-size",
                                      "1024", "--micro-batch-size", "2", "--global-batch-size", "16",
                                      "--use-distributed-optimizer", "--optimizer-cpu-offload",
                                      "--use-precision-aware-optimizer"], capture_output=True, text=True, timeout=60)
            check(offload.returncode == 0, f"perf_model prices offload with the file: {offload.stderr}")
            if offload.returncode == 0:
                check(json.loads(offload.stdout)["time_breakdown_s"]["host_optimizer"] > 0, "a positive host step")
        alone = subprocess.run([args.binary, "--reduced", "--repeats", "1", "--out", conf], capture_output=True,
                               text=True, timeout=300)
        errors = [l for l in alone.stderr.splitlines() if l.startswith("error:")]
        check(alone.returncode == 1 and len(errors) == 1 and "mpirun" in errors[0],
              f"one rank: exit {alone.returncode}, stderr {alone.stderr!r}")
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("perf_calibrate: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
