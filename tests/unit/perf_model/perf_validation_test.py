#!/usr/bin/env python3
"""scripts/perf_validation.py runs on the shipped data and its figures come from the data: the
measured times are recomputed here from the published figures, the errors from perf_model's own
predictions, a changed published figure changes the reported error by what it must, the
calibration file stays out of the held-out figures, and a group's Spearman and regret follow the
measured times given to it."""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SCRIPT = os.path.join(ROOT, "scripts", "perf_validation.py")
DATA = os.path.join(ROOT, "docs", "perf_validation")
HEADER = ("id,cite,layers,hidden,heads,seq,vocab,gpus,tp,pp,vp,global_batch,micro_batch,recompute,sp,zero3,"
          "metric,value,group,assumed,cluster,extra_flags")


def validate(binary, data, out):
    command = [sys.executable, SCRIPT, "--binary", binary, "--json", out, "--data"] + data
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise SystemExit(f"perf_validation.py failed: {result.stderr}")
    with open(out) as f:
        return json.load(f), result.stdout


def rows_of(path):
    with open(path) as f:
        return {r["id"]: r for r in csv.DictReader([l for l in f if not l.startswith("#") and l.strip()])}


def flops(row, eq3):
    B, s, l, h, V = (float(row[k]) for k in ("global_batch", "seq", "layers", "hidden", "vocab"))
    if eq3:  # Narayanan et al. 2021, Eq. 3 (counts the recomputed forward)
        return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
    return 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    binary = parser.parse_args().binary
    failures = []

    def check(condition, what):
        if not condition:
            failures.append(what)

    def close(a, b, rel=1e-9):
        return abs(a - b) <= rel * max(abs(a), abs(b), 1e-30)

    with tempfile.TemporaryDirectory() as tmp:
        shipped = sorted(os.path.join(DATA, f) for f in os.listdir(DATA) if f.endswith(".csv"))
        report, text = validate(binary, shipped, os.path.join(tmp, "all.json"))
        # One summary per data file and code base (rows of another code base than the file's are their own source).
        codes = sum(len({r.get("code") or "" for r in rows_of(path).values()}) for path in shipped)
        check(len(report["sources"]) == codes, "one summary per data file and code base")
        peaks = {"dgx-a100": 312.0, "dgx-h100": 989.0}
        for source in report["sources"]:
            csv_rows = rows_of(os.path.join(ROOT, source["file"]))
            errors = []
            for r in source["table"]:
                row = csv_rows[r["id"]]
                value, gpus = float(row["value"]), int(row["gpus"])
                if row["metric"] == "tflops_eq3":
                    measured = flops(row, True) / (gpus * value * 1e12)
                elif row["metric"] == "tflops_model":
                    measured = flops(row, False) / (gpus * value * 1e12)
                elif row["metric"] == "mfu":
                    measured = flops(row, False) / (gpus * peaks[row["cluster"]] * 1e12 * value)
                elif row["metric"] == "s":
                    measured = value
                else:
                    measured = value / 1e3
                check(close(r["measured_s"], measured), f"{r['id']}: measured {r['measured_s']} != {measured}")
                check(close(r["error"], r["predicted_s"] / measured - 1), f"{r['id']}: error not from the times")
                errors.append(abs(r["predicted_s"] / measured - 1))
            check(close(source["mean_abs_error"], sum(errors) / len(errors)), f"{source['source']}: mean error")
            code = source["source"].partition(" (")[2].rstrip(")")
            own = [r for r in csv_rows.values() if (r.get("code") or "") == code]
            check(source["predicted"] + len(source["not_predicted"]) == len(own), f"{source['source']}: rows lost")
        roles = {s["source"]: s["role"] for s in report["sources"]}
        check(roles.get("megatron_core_h100") == "calibration", "the fitted H100 table is reported as calibration")
        check(all(g["source"] != "megatron_core_h100" for g in report["groups"]), "calibration rows ranked")
        check("MET " in text or "MISS" in text, "the targets are reported")

        # One prediction checked against perf_model itself.
        one = next(r for r in next(s for s in report["sources"] if s["source"] == "korthikanti2022")["table"]
                   if r["id"] == "k22-175B-selective")
        direct = subprocess.run([binary, "--cluster", "dgx-a100", "--world-size", "64", "--json", "--num-layers", "96",
                                 "--hidden-size", "12288", "--num-attention-heads", "96", "--seq-length", "2048",
                                 "--max-position-embeddings", "2048", "--vocab-size", "51200", "--micro-batch-size",
                                 "1", "--global-batch-size", "64", "--tensor-model-parallel-size", "8",
                                 "--pipeline-model-parallel-size", "8", "--num-virtual-stages-per-pipeline-rank",
                                 "3", "--sequence-parallel", "--implementation", "megatron",
                                 "--recompute-granularity", "selective", "--bf16",
                                 "--attention-backend", "unfused"], capture_output=True, text=True)
        check(direct.returncode == 0 and close(json.loads(direct.stdout)["iteration_time_s"], one["predicted_s"]),
              f"k22-175B: the script's prediction is not perf_model's ({direct.stderr})")

        # Doubling a published time doubles the measured time: the error follows.
        source = os.path.join(DATA, "korthikanti2022.csv")
        with open(source) as f:
            lines = f.read().splitlines()
        changed = [l.replace(",s,13.75,", ",s,27.5,") if l.startswith("k22-175B-selective,") else l for l in lines]
        check(changed != lines, "the 175B row was found")
        path = os.path.join(tmp, "korthikanti_changed.csv")
        with open(path, "w") as f:
            f.write("\n".join(changed) + "\n")
        changed_report, _ = validate(binary, [path], os.path.join(tmp, "changed.json"))
        row = next(r for r in changed_report["sources"][0]["table"] if r["id"] == "k22-175B-selective")
        check(close(row["measured_s"], 2 * one["measured_s"], 1e-6), "doubled time")
        check(close(row["error"], one["predicted_s"] / (2 * one["measured_s"]) - 1, 1e-6), "error after the change")

        # A group of three CPU layouts: measured times in the predicted order give Spearman +1 and no
        # regret; in the reverse order -1 and the regret of picking the slowest.
        base = "{id},synthetic,2,64,2,32,256,4,{tp},{pp},1,8,{mbs},none,0,0,ms,{ms},g4,,cpu,"
        layouts = [("tp1pp1", 1, 1, 2), ("tp2pp1", 2, 1, 2), ("tp1pp2", 1, 2, 1)]
        path = os.path.join(tmp, "group.csv")

        def write(times):
            with open(path, "w") as f:
                f.write("# synthetic\n" + HEADER + "\n")
                for (name, tp, pp, mbs), ms in zip(layouts, times):
                    f.write(base.format(id=name, tp=tp, pp=pp, mbs=mbs, ms=ms) + "\n")

        write([100, 100, 100])
        first, _ = validate(binary, [path], os.path.join(tmp, "g1.json"))
        predicted = {r["id"]: r["predicted_s"] for r in first["sources"][0]["table"]}
        check(len(set(predicted.values())) == 3, f"three distinct predictions: {predicted}")
        order = sorted(predicted, key=predicted.get)
        ms = {name: 10 * (i + 1) for i, name in enumerate(order)}
        write([ms[name] for name, *_ in layouts])
        same, _ = validate(binary, [path], os.path.join(tmp, "g2.json"))
        group = same["groups"][0]
        check(close(group["spearman"], 1.0) and close(group["model_regret"], 0.0, 1e-12), f"same order: {group}")
        ms = {name: 10 * (3 - i) for i, name in enumerate(order)}
        write([ms[name] for name, *_ in layouts])
        reverse, _ = validate(binary, [path], os.path.join(tmp, "g3.json"))
        group = reverse["groups"][0]
        check(close(group["spearman"], -1.0) and close(group["model_regret"], 2.0), f"reverse order: {group}")
        # fewest TP x PP: tp1pp1 (1 x 1, micro batch 2) alone; its regret is its measured time over the best.
        check(group["fewest_model_parallel_pick"] == ["tp1pp1"] and
              close(group["fewest_model_parallel_regret"], ms["tp1pp1"] / 10 - 1), f"rule pick: {group}")

    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("perf_validation: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
