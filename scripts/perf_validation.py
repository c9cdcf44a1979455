#!/usr/bin/python3
"""Held-out validation of perf_model: predicts every row of published (or locally measured)
iteration times and reports the error per source, and the ranking quality per group of layouts
(one model on one GPU count) against two rules of thumb.

    scripts/perf_validation.py --binary build-cpu/bin/perf_model [--data docs/perf_validation/*.csv]
        [--markdown out.md] [--json out.json]
    scripts/perf_validation.py --import-sweep sweep/sweep.csv --cluster FILE --out data.csv \
        --cite "this machine, ..." -- <the sweep's model flags>

The second form turns a scripts/scaling_sweep.py result into a data file (metric ms, one group per
world size), for a sweep measured on the machine the cluster file describes.

Data files (docs/perf_validation/*.csv): '#' comment lines citing the source, then one row per run:
the model (layers, hidden, heads, seq, vocab), the layout (gpus, tp, pp, vp, micro_batch,
global_batch, recompute none|selective|full, sp, zero3), the cluster file, extra pretrain_gpt
flags, the published figure (metric, value), a group name (rows of one model on one GPU count that
are ranked against each other), which settings the source did not publish (assumed) and, optionally,
the code base that ran the row when it is not the file's (code; such rows are scored as their own
source, e.g. 'narayanan2021 (deepspeed)'). A comment
line 'implementation: megatron' marks runs of Megatron-LM: their memory is predicted with
Megatron's activation stash and its sequence-parallel re-gather (perf_model --implementation megatron),
not this trainer's.

The measured iteration time is computed from the published figure by the source's own FLOP count:
  tflops_eq3    Narayanan et al. 2021, Eq. 3: 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) / (GPUs x TFLOP/s)
  tflops_model  Megatron's model FLOPs 72 B s l h^2 (1 + s/(6h) + V/(12 l h)) / (GPUs x TFLOP/s)
  mfu           the same model FLOPs / (GPUs x peak x MFU), peak from the row's cluster file
  s, ms         the iteration time itself, in seconds or milliseconds
A file whose comment block contains 'CALIBRATION data' is reported as fit error, apart from the
held-out sources.

Ranking, per group with at least two predicted rows: Spearman's rank correlation between predicted
and measured time (all rows), and the regret of the predicted best among the rows the model
predicts to fit in memory, as --search picks (its measured time over the measured best, minus 1).
Two rules of thumb pick a layout without a timing model, among the same rows:
'fewest-model-parallel' (fewest TP x PP, then the largest micro batch) and
'tp-in-node' (Megatron's advice: the largest TP within a node, then the fewest PP stages, then the
largest micro batch). A rule's ties are charged the mean measured time of the tied rows.
"""

import argparse
import concurrent.futures
import csv
import glob
import json
import math
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_DATA = sorted(glob.glob(os.path.join(ROOT, "docs", "perf_validation", "*.csv")))
# ZeRO-3 (fully sharded data parallelism) in Megatron-FSDP's flags; a binary that cannot predict it
# reports the rows as not predicted.
ZERO3_FLAGS = ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads_params"]
TARGET_MEAN_ERROR, TARGET_MEDIAN_RHO, TARGET_MEAN_REGRET = 0.10, 0.8, 0.10


class DataError(Exception):
    pass


def read_source(path):
    """Returns (comment lines, rows) of one data file."""
    with open(path) as f:
        lines = f.read().splitlines()
    comments = [line[1:].strip() for line in lines if line.startswith("#")]
    rows = list(csv.DictReader([line for line in lines if line.strip() and not line.startswith("#")]))
    if not rows:
        raise DataError(f"{path}: no rows")
    for i, row in enumerate(rows):
        for key in ("id", "layers", "hidden", "heads", "seq", "vocab", "gpus", "tp", "pp", "global_batch",
                    "micro_batch", "metric", "value", "cluster"):
            if not row.get(key):
                raise DataError(f"{path}: row {i + 1} ({row.get('id')}): missing '{key}'")
    return comments, rows


def cluster_value(cluster, key):
    """A key of a cluster file (NAME resolves to configs/clusters/NAME.conf)."""
    path = cluster if ("/" in cluster or cluster.endswith(".conf")) else os.path.join(
        ROOT, "configs", "clusters", cluster + ".conf")
    with open(path) as f:
        for line in f:
            name, _, value = line.split("#", 1)[0].partition("=")
            if name.strip() == key:
                return float(value.strip())
    raise DataError(f"{path}: no '{key}'")


def model_flops(row, recompute_eq3):
    B, s, l, h, V = (float(row[k]) for k in ("global_batch", "seq", "layers", "hidden", "vocab"))
    if recompute_eq3:
        return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
    return 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))


def measured_seconds(row):
    metric, value, gpus = row["metric"], float(row["value"]), int(row["gpus"])
    if metric == "tflops_eq3":
        return model_flops(row, True) / (gpus * value * 1e12)
    if metric == "tflops_model":
        return model_flops(row, False) / (gpus * value * 1e12)
    if metric == "mfu":
        return model_flops(row, False) / (gpus * cluster_value(row["cluster"], "peak_tflops") * 1e12 * value)
    if metric == "ms":
        return value / 1e3
    if metric == "s":
        return value
    raise DataError(f"row {row['id']}: unknown metric '{metric}'")


def row_flags(row, micro_batch=None):
    flags = ["--num-layers", row["layers"], "--hidden-size", row["hidden"], "--num-attention-heads", row["heads"],
             "--seq-length", row["seq"], "--max-position-embeddings", row["seq"], "--vocab-size", row["vocab"],
             "--micro-batch-size", str(micro_batch or row["micro_batch"]), "--global-batch-size", row["global_batch"],
             "--tensor-model-parallel-size", row["tp"], "--pipeline-model-parallel-size", row["pp"]]
    if int(row.get("vp") or 1) > 1:
        flags += ["--num-virtual-stages-per-pipeline-rank", row["vp"]]
    if row.get("sp") == "1":
        flags.append("--sequence-parallel")
    recompute = row.get("recompute") or "none"
    if recompute == "full":
        flags += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    elif recompute == "selective":
        flags += ["--recompute-granularity", "selective"]
    elif recompute != "none":
        raise DataError(f"row {row['id']}: unknown recompute '{recompute}'")
    if row.get("zero3") == "1":
        flags += ZERO3_FLAGS
    flags += (row.get("extra_flags") or "").split()
    if not any(f in flags for f in ("--bf16", "--fp32")) and row["cluster"] != "cpu" and "cpu" not in row["cluster"]:
        flags.append("--bf16")
    return flags


def predict(binary, row, micro_batch=None, implementation="trainer"):
    """perf_model's JSON for the row, or the error line it printed."""
    command = [binary, "--cluster", row["cluster"], "--world-size", row["gpus"], "--json",
               "--implementation", implementation] + row_flags(row, micro_batch)
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return None, lines[-1] if lines else f"exit status {done.returncode}"
    return json.loads(done.stdout), None


def spearman(xs, ys):
    def ranks(values):
        order = sorted(range(len(values)), key=lambda i: values[i])
        result = [0.0] * len(values)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for k in range(i, j + 1):
                result[order[k]] = (i + j) / 2.0 + 1
            i = j + 1
        return result

    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    return num / den if den > 0 else 0.0


def rule_pick(rows, key):
    """Mean measured time of the rows a rule of thumb ranks first (ties share the pick)."""
    best = min(key(r) for r in rows)
    tied = [r for r in rows if key(r) == best]
    return statistics.fmean(r["measured_s"] for r in tied), [r["id"] for r in tied]


def fewest_model_parallel(row):
    return (int(row["tp"]) * int(row["pp"]), -int(row["micro_batch"]))


def tp_in_node(gpus_per_node):
    def key(row):
        tp = int(row["tp"])
        return (0 if tp <= gpus_per_node else 1, -tp if tp <= gpus_per_node else tp, int(row["pp"]),
                -int(row["micro_batch"]))
    return key


def evaluate_group(name, rows):
    measured = [r["measured_s"] for r in rows]
    predicted = [r["predicted_s"] for r in rows]
    best_measured = min(measured)
    # The model and the rules choose among the layouts the model predicts to fit, as --search does.
    fits = [r for r in rows if r["fits"]] or rows
    model_best = min(fits, key=lambda r: r["predicted_s"])
    gpus_per_node = cluster_value(rows[0]["cluster"], "gpus_per_node")
    result = {"group": name, "layouts": len(rows), "spearman": spearman(predicted, measured),
              "model_pick": model_best["id"], "model_regret": model_best["measured_s"] / best_measured - 1,
              # The timing alone: the fastest predicted of every layout, memory not consulted.
              "timing_regret": min(rows, key=lambda r: r["predicted_s"])["measured_s"] / best_measured - 1,
              "measured_best": min(rows, key=lambda r: r["measured_s"])["id"]}
    for rule, key in (("fewest_model_parallel", fewest_model_parallel), ("tp_in_node", tp_in_node(gpus_per_node))):
        time, picks = rule_pick(fits, key)
        result[rule + "_pick"] = picks
        result[rule + "_regret"] = time / best_measured - 1
    return result


def implementation_of(row, accounting):
    """perf_model --implementation for a row: DeepSpeed's ZeRO-3 rows (code deepspeed) with
    DeepSpeed's 2021 ZeRO-3 on Megatron's model code; the others with the file's accounting."""
    return "deepspeed" if (row.get("code") or "") == "deepspeed" else accounting


def run(binary, paths):
    sources, groups = [], []
    for path in paths:
        comments, rows = read_source(path)
        calibration = any("CALIBRATION data" in c for c in comments)
        # Runs of Megatron-LM are predicted with Megatron's implementation choices (a comment line
        # 'implementation: megatron'); this trainer's own runs with its own.
        accounting = "megatron" if any(c.startswith("implementation: megatron") for c in comments) else "trainer"
        name = os.path.splitext(os.path.basename(path))[0]
        predicted_rows, skipped = [], []
        # Every perf_model call of the file at once (each is a short process).
        jobs = [(i, None) for i in range(len(rows))] + [
            (i, mbs) for i, row in enumerate(rows) if "micro_batch" in (row.get("assumed") or "")
            for mbs in (1, 2, 4, 8)]
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            results = dict(zip(jobs, pool.map(lambda job: predict(binary, rows[job[0]], job[1], implementation_of(
                rows[job[0]], accounting)), jobs)))
        for i, row in enumerate(rows):
            row["measured_s"] = measured_seconds(row)
            prediction, error = results[(i, None)]
            if prediction is None:
                skipped.append({"id": row["id"], "reason": error})
                continue
            row["predicted_s"] = prediction["iteration_time_s"]
            row["error"] = row["predicted_s"] / row["measured_s"] - 1
            row["memory_gib"] = prediction["memory_gib_per_gpu"]
            row["fits"] = bool(prediction["fits_in_memory"])
            if "micro_batch" in (row.get("assumed") or ""):
                # The source did not publish the micro batch: the band over the ones that fit.
                band = []
                for mbs in (1, 2, 4, 8):
                    other, _ = results[(i, mbs)]
                    if other is not None and other["fits_in_memory"]:
                        band.append(other["iteration_time_s"] / row["measured_s"] - 1)
                row["error_band"] = [min(band), max(band)] if band else None
            predicted_rows.append(row)
        # A row run by another code base than the file's (column 'code', e.g. DeepSpeed's ZeRO-3 rows
        # of Narayanan et al.) is its own held-out source: one error figure per implementation.
        codes = sorted({r.get("code") or "" for r in rows})
        for code in codes:
            subset = [r for r in predicted_rows if (r.get("code") or "") == code]
            errors = [abs(r["error"]) for r in subset]
            summary = {"source": name + (f" ({code})" if code else ""), "file": os.path.relpath(path, ROOT),
                       "role": "calibration" if calibration else "held-out", "implementation": accounting,
                       "rows": len([r for r in rows if (r.get("code") or "") == code]), "predicted": len(subset),
                       "not_predicted": [k for k in skipped if (next(r for r in rows if r["id"] == k["id"]).get("code") or "") == code],
                       "mean_abs_error": statistics.fmean(errors) if errors else None,
                       "median_abs_error": statistics.median(errors) if errors else None,
                       "max_abs_error": max(errors) if errors else None,
                       "mean_signed_error": statistics.fmean(r["error"] for r in subset) if errors else None,
                       "predicted_not_to_fit": [r["id"] for r in subset if not r["fits"]],
                       "table": [{k: r.get(k) for k in ("id", "cite", "gpus", "tp", "pp", "micro_batch", "recompute",
                                                         "measured_s", "predicted_s", "error", "error_band",
                                                         "memory_gib", "fits", "assumed")} for r in subset]}
            sources.append(summary)
        by_group = {}
        for r in predicted_rows:
            if r.get("group"):
                by_group.setdefault(r["group"], []).append(r)
        for group, members in sorted(by_group.items()):
            if len(members) >= 2 and not calibration:
                groups.append(dict(evaluate_group(group, members), source=name))
        unscored = sorted({r["group"] for r in rows if r.get("group")} - {g for g in by_group if len(by_group[g]) >= 2})
        for summary in sources[len(sources) - len(codes):]:
            summary["groups_not_scored"] = unscored
    return sources, groups


def ranking_summary(groups):
    if not groups:
        return None
    result = {"groups": len(groups), "median_spearman": statistics.median(g["spearman"] for g in groups),
              "mean_regret_model": statistics.fmean(g["model_regret"] for g in groups),
              "mean_regret_timing_only": statistics.fmean(g["timing_regret"] for g in groups)}
    for rule in ("fewest_model_parallel", "tp_in_node"):
        result[f"mean_regret_{rule}"] = statistics.fmean(g[rule + "_regret"] for g in groups)
    return result


def pct(x):
    return "n/a" if x is None else f"{100 * x:+.1f}%"


def abs_pct(x):
    return "n/a" if x is None else f"{100 * x:.1f}%"


def markdown(sources, groups, ranking):
    out = []
    for s in sources:
        out.append(f"### {s['source']} ({s['role']}, {s['file']})\n")
        out.append("| row | source row | GPUs | TP | PP | mbs | recompute | measured s | predicted s | error | "
                   "band over unpublished mbs | GiB/GPU |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in s["table"]:
            band = "" if not r.get("error_band") else f"{pct(r['error_band'][0])} .. {pct(r['error_band'][1])}"
            memory = f"{r['memory_gib']:.1f}" + ("" if r["fits"] else " (over)")
            out.append(f"| {r['id']} | {r['cite']} | {r['gpus']} | {r['tp']} | {r['pp']} | {r['micro_batch']} | "
                       f"{r['recompute']} | {r['measured_s']:.3f} | {r['predicted_s']:.3f} | {pct(r['error'])} | "
                       f"{band} | {memory} |")
        out.append("")
        out.append(f"{s['predicted']} of {s['rows']} rows predicted; mean absolute error "
                   f"{abs_pct(s['mean_abs_error'])}, median {abs_pct(s['median_abs_error'])}, "
                   f"largest {abs_pct(s['max_abs_error'])}, mean signed {pct(s['mean_signed_error'])}.")
        if s["predicted_not_to_fit"]:
            out.append(f"Predicted not to fit in memory although they ran: {', '.join(s['predicted_not_to_fit'])}.")
        for skip in s["not_predicted"]:
            out.append(f"Not predicted: {skip['id']}: {skip['reason']}")
        if s["groups_not_scored"]:
            out.append(f"Groups not scored (fewer than two predicted layouts): {', '.join(s['groups_not_scored'])}.")
        out.append("")
    if groups:
        out.append("### Ranking\n")
        out.append("| source | group | layouts | Spearman | model's pick | regret | timing alone | measured best | "
                   "fewest TP x PP regret | TP-in-node regret |")
        out.append("|---|---|---|---|---|---|---|---|---|---|")
        for g in groups:
            out.append(f"| {g['source']} | {g['group']} | {g['layouts']} | {g['spearman']:+.2f} | {g['model_pick']} | "
                       f"{pct(g['model_regret'])} | {pct(g['timing_regret'])} | {g['measured_best']} | "
                       f"{pct(g['fewest_model_parallel_regret'])} | "
                       f"{pct(g['tp_in_node_regret'])} |")
        out.append("")
        out.append(f"Over {ranking['groups']} groups: median Spearman {ranking['median_spearman']:+.2f}, "
                   f"mean regret of the model's pick {pct(ranking['mean_regret_model'])} (timing alone, memory "
                   f"not consulted: {pct(ranking['mean_regret_timing_only'])}), of fewest TP x PP "
                   f"{pct(ranking['mean_regret_fewest_model_parallel'])}, of TP-in-node "
                   f"{pct(ranking['mean_regret_tp_in_node'])}.")
    else:
        out.append("No group of layouts could be ranked.")
    return "\n".join(out) + "\n"


def targets(sources, ranking):
    held_out = [s for s in sources if s["role"] == "held-out" and s["mean_abs_error"] is not None]
    lines = []
    for s in held_out:
        ok = s["mean_abs_error"] <= TARGET_MEAN_ERROR
        lines.append(f"{'MET ' if ok else 'MISS'} {s['source']}: mean error {abs_pct(s['mean_abs_error'])} "
                     "(target <= 10%)")
    if ranking:
        lines.append(f"{'MET ' if ranking['median_spearman'] >= TARGET_MEDIAN_RHO else 'MISS'} median Spearman "
                     f"{ranking['median_spearman']:+.2f} (target >= 0.8)")
        regret = ranking["mean_regret_model"]
        lines.append(f"{'MET ' if regret <= TARGET_MEAN_REGRET else 'MISS'} mean regret {pct(regret)} (target <= 10%)")
        beats = all(regret < ranking[f"mean_regret_{r}"] for r in ("fewest_model_parallel", "tp_in_node"))
        lines.append(f"{'MET ' if beats else 'MISS'} better than both rules of thumb")
    else:
        lines.append("MISS no ranking groups")
    return lines


SCHEMA_FLAGS = {"--num-layers": "layers", "--hidden-size": "hidden", "--num-attention-heads": "heads",
                "--seq-length": "seq", "--vocab-size": "vocab", "--micro-batch-size": "micro_batch",
                "--global-batch-size": "global_batch"}
HEADER = ["id", "cite", "layers", "hidden", "heads", "seq", "vocab", "gpus", "tp", "pp", "vp", "global_batch",
          "micro_batch", "recompute", "sp", "zero3", "metric", "value", "group", "assumed", "cluster", "extra_flags"]


def import_sweep(sweep_csv, cluster, out, cite, model_flags):
    """Writes the sweep's layouts as a data file: the model from its flags, the layout from its name."""
    sys.path.insert(0, HERE)
    from scaling_sweep import parse_layout  # the sweep's own reading of a layout name
    base, extra, i = {}, [], 0
    while i < len(model_flags):
        flag = model_flags[i]
        if flag in SCHEMA_FLAGS and i + 1 < len(model_flags):
            base[SCHEMA_FLAGS[flag]] = model_flags[i + 1]
            i += 2
        elif flag == "--max-position-embeddings":
            i += 2
        elif flag in ("--device", "--lr") and i + 1 < len(model_flags):
            i += 2  # how the sweep ran, not what perf_model predicts
        elif flag == "--mock-data":
            i += 1
        else:
            extra.append(flag)
            i += 1
    missing = [v for v in SCHEMA_FLAGS.values() if v not in base]
    if missing:
        raise DataError(f"the model flags lack {', '.join(missing)}")
    with open(sweep_csv) as f:
        rows = list(csv.DictReader(f))
    with open(out, "w", newline="") as f:
        f.write(f"# {cite}\n# Imported from {sweep_csv} by scripts/perf_validation.py --import-sweep; model flags: "
                f"{' '.join(model_flags)}\n# metric ms: the sweep's elapsed ms per iteration (median trial).\n")
        writer = csv.DictWriter(f, fieldnames=HEADER)
        writer.writeheader()
        for row in rows:
            layout = parse_layout(row["layout"])
            record = dict(base, id=row["layout"], cite=f"{row['layout']}: trials {row.get('elapsed_ms_trials', '')}",
                          gpus=layout["world"], tp=layout["tp"], pp=layout["pp"], vp=layout["v"],
                          micro_batch=layout["mbs"] or base["micro_batch"],
                          recompute="full" if layout["rfull"] else "selective" if layout["rsel"] else "none",
                          sp=int(layout["sp"]), zero3=int(layout.get("zero3", False)), metric="ms",
                          value=row["elapsed_ms"], group=f"world{layout['world']}", assumed="", cluster=cluster,
                          extra_flags=" ".join(extra + (["--use-distributed-optimizer"] if layout["zero"] else []) +
                                               (["--use-megatron-fsdp", "--data-parallel-sharding-strategy",
                                                 "optim_grads"] if layout.get("zero2") else []) +
                                               (["--context-parallel-size", str(layout["cp"])]
                                                if layout.get("cp", 1) > 1 else [])))
            writer.writerow(record)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", help="the perf_model executable")
    parser.add_argument("--import-sweep", help="a scaling_sweep.py sweep.csv to turn into a data file (--out)")
    parser.add_argument("--cluster", help="with --import-sweep: the cluster file of the machine it ran on")
    parser.add_argument("--out", help="with --import-sweep: the data file to write")
    parser.add_argument("--cite", default="measured on this machine", help="with --import-sweep: the source line")
    parser.add_argument("model_flags", nargs=argparse.REMAINDER, help="with --import-sweep: -- the model flags")
    parser.add_argument("--data", nargs="+", default=DEFAULT_DATA,
                        help="data files (default docs/perf_validation/*.csv)")
    parser.add_argument("--markdown", help="write the tables here")
    parser.add_argument("--json", help="write every figure here")
    args = parser.parse_args(argv)
    try:
        if args.import_sweep:
            if not args.cluster or not args.out:
                raise DataError("--import-sweep needs --cluster and --out")
            flags = args.model_flags[1:] if args.model_flags[:1] == ["--"] else args.model_flags
            import_sweep(args.import_sweep, args.cluster, args.out, args.cite, flags)
            return 0
        if not args.binary:
            raise DataError("--binary (perf_model) is required")
        sources, groups = run(args.binary, args.data)
    except (DataError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    ranking = ranking_summary(groups)
    text = markdown(sources, groups, ranking)
    sys.stdout.write(text)
    for line in targets(sources, ranking):
        print(line)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"sources": sources, "groups": groups, "ranking": ranking}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
