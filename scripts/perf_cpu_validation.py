#!/usr/bin/python3
"""This machine's calibration and validation in one command (docs/PERFORMANCE_MODEL.md, "CPU"):

    scripts/perf_cpu_validation.py [--build build-cpu] [--ranks N] [--trials 5] [--dry-run]
    scripts/perf_cpu_validation.py --reuse-sweep sweep.csv --cite "..."   (steps 4-5 only)

1. perf_calibrate under mpirun with one rank per core (--ranks, default: the cores), the full set
   (its microbenchmarks, and its trainer probes, which fit the host-overhead terms from trainer runs
   that are not layouts of the sweep), written to configs/clusters/cpu-measured.conf (with a header
   saying when and at what load);
2. perf_model --search on those ranks with that file: its best layout joins the sweep when the
   sweep can run it (scaling_sweep.py's layout names);
3. scripts/scaling_sweep.py over at least 12 layouts of the sweep model (docs/SCALING.md) on the
   same ranks (TP, PP with and without interleaving, DP with ZeRO 0/1/2, context parallelism,
   recompute, micro batch), --trials alternating in order and reverse, the median trial kept;
4. scripts/perf_validation.py --import-sweep into docs/perf_validation/cpu_sweep.csv, then the
   validation of that file: mean error, Spearman, --search's pick against the measured best;
5. the figures replace the block between '<!-- cpu-sweep:begin -->' and '<!-- cpu-sweep:end -->'
   in docs/PERFORMANCE_MODEL.md (date, commit, load average, the table).

No more ranks than cores: the calibration's kernels and collectives are timed with every rank on
its own core, as the sweep then runs, so nothing has to model time-sharing. Takes 4-8 minutes on
the 2 quiet cores (16 at load 3-9); run it on a quiet machine (the load average is recorded before
and after).
"""

import argparse
import datetime
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODEL = ["--vocab-size", "1024", "--num-layers", "4", "--hidden-size", "128", "--num-attention-heads", "4",
         "--seq-length", "64", "--max-position-embeddings", "64", "--micro-batch-size", "2",
         "--global-batch-size", "16"]
# Per world size 2 (one rank per core on this machine): 16 layouts.
LAYOUTS = {
    2: ["dp2", "dp2-zero", "dp2-zero2", "dp2-mbs1", "dp2-mbs4", "dp2-mbs8", "dp2-rfull", "dp2-rsel", "tp2",
        "tp2-sp", "tp2-rsel", "pp2", "pp2-v2", "pp2-mbs1", "pp2-rfull", "cp2"],
    4: ["dp4", "dp4-zero", "dp4-zero2", "dp4-mbs1", "dp4-mbs4", "dp4-rfull", "dp4-rsel", "tp2-dp2", "tp2-dp2-sp",
        "tp4", "pp2-dp2", "pp4", "tp2-pp2", "pp2-dp2-rfull", "pp4-v2", "cp2-dp2"],
}
BEGIN, END = "<!-- cpu-sweep:begin -->", "<!-- cpu-sweep:end -->"


def sh(command, **kwargs):
    print("+", " ".join(command), flush=True)
    return subprocess.run(command, check=True, text=True, **kwargs)


def load_average():
    return os.getloadavg()[0]


def sweep_name(p):
    """A --search prediction's layout as a scaling_sweep.py name, or None when the sweep cannot run it."""
    layout = p["layout"]
    if layout.get("schedule") not in (None, "1f1b", "interleaved") or layout.get("cp_comm_type", "p2p") != "p2p":
        return None
    parts = []
    for key, short in (("tensor_model_parallel_size", "tp"), ("context_parallel_size", "cp"),
                       ("pipeline_model_parallel_size", "pp"), ("data_parallel_size", "dp")):
        if int(layout.get(key, 1)) > 1:
            parts.append(f"{short}{layout[key]}")
    if int(layout.get("virtual_stages", 1)) > 1:
        parts.append(f"v{layout['virtual_stages']}")
    if layout.get("sequence_parallel"):
        parts.append("sp")
    zero = int(layout.get("zero_level", 0))
    if zero == 3:
        return None
    parts += {1: ["zero"], 2: ["zero2"]}.get(zero, [])
    if int(layout["micro_batch_size"]) != 2:
        parts.append(f"mbs{layout['micro_batch_size']}")
    recompute = layout.get("recompute", "none")
    if recompute == "selective":
        parts.append("rsel")
    elif recompute.startswith("full"):
        if recompute != "full uniform 1":
            return None
        parts.append("rfull")
    return "-".join(parts) or None


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build-cpu"), help="the CPU build directory")
    parser.add_argument("--ranks", type=int, default=os.cpu_count() or 2, help="ranks (default: one per core)")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--work", default="/tmp/perf_cpu_validation", help="scratch directory")
    parser.add_argument("--dry-run", action="store_true", help="print the commands of the sweep, run nothing long")
    parser.add_argument("--reuse-sweep", help="a scaling_sweep.py sweep.csv measured earlier on this machine: only "
                        "import, validate and rewrite the document (the calibration file is left as it is)")
    parser.add_argument("--cite", help="with --reuse-sweep: when and how that sweep was measured")
    args = parser.parse_args(argv)
    if args.ranks not in LAYOUTS:
        raise SystemExit(f"error: --ranks {args.ranks}: layouts are listed for {sorted(LAYOUTS)} ranks")
    binary = lambda name: os.path.join(args.build, "bin", name)
    for name in ("perf_calibrate", "perf_model", "pretrain_gpt"):
        if not os.path.exists(binary(name)):
            raise SystemExit(f"error: {binary(name)} is missing (build it: cmake --build {args.build} --target {name})")
    os.makedirs(args.work, exist_ok=True)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    mpirun = ["mpirun", "-np", str(args.ranks), "--oversubscribe", "--bind-to", "none"]
    started = datetime.datetime.now(datetime.timezone.utc)
    load_before = load_average()
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"

    # 1. Calibration.
    cluster = os.path.join(ROOT, "configs", "clusters", "cpu-measured.conf")
    measured = os.path.join(args.work, "measured.conf")
    if args.reuse_sweep and not args.cite:
        raise SystemExit("error: --reuse-sweep needs --cite (when and how the sweep was measured)")
    if not args.dry_run and not args.reuse_sweep:
        sh(mpirun + [binary("perf_calibrate"), "--name", "cpu-measured", "--out", measured, "--json",
                     os.path.join(args.work, "measured.json")],
           env=env)
        with open(measured) as f:
            text = f.read()
        with open(cluster, "w") as f:
            f.write(f"# This machine ({os.cpu_count()} cores), measured by scripts/perf_cpu_validation.py at "
                    f"{started:%Y-%m-%d %H:%M} UTC (commit {commit}, load average {load_before:.1f}):\n"
                    f"#   mpirun -np {args.ranks} build-cpu/bin/perf_calibrate   (defaults: the sweep model)\n"
                    f"# docs/PERFORMANCE_MODEL.md validates it on a scaling_sweep of this machine; cpu.conf is an\n"
                    f"# older description fitted to three layouts of an earlier sweep.\n" + text)

    # 2. --search's best layout joins the sweep.
    layouts = list(LAYOUTS[args.ranks])
    search = subprocess.run([binary("perf_model"), "--search", "--top", "1", "--json", "--cluster", cluster,
                             "--world-size", str(args.ranks)] + MODEL, capture_output=True, text=True)
    pick = None
    if search.returncode == 0:
        best = json.loads(search.stdout)["ranked"][0]
        pick = sweep_name(best)
        print(f"search's best: {pick or best['layout']}", flush=True)
        if pick and pick not in layouts:
            layouts.append(pick)
    else:
        print(f"search failed: {search.stderr.strip()}", flush=True)

    # 3. The sweep.
    sweep_dir = os.path.join(args.work, "sweep")
    sweep_csv = args.reuse_sweep or os.path.join(sweep_dir, "sweep.csv")
    sweep = [sys.executable, os.path.join(HERE, "scaling_sweep.py"), "--out", sweep_dir, "--layouts"] + layouts + [
        "--scaling", "strong", "--iterations", str(args.iterations), "--warmup", str(args.warmup), "--trials",
        str(args.trials), "--binary", binary("pretrain_gpt")] + (["--dry-run"] if args.dry_run else []) + [
        "--", "--device", "cpu", "--mock-data", "--lr", "1e-3"] + MODEL
    if not args.reuse_sweep:
        sh(sweep, env=env)
    if args.dry_run:
        return 0
    load_after = load_average()
    finished = datetime.datetime.now(datetime.timezone.utc)

    # 4. Import and validate.
    data = os.path.join(ROOT, "docs", "perf_validation", "cpu_sweep.csv")
    cite = args.cite or (f"this machine ({os.cpu_count()} cores, {args.ranks} ranks), {started:%Y-%m-%d %H:%M}-{finished:%H:%M} UTC, "
            f"commit {commit}, {args.trials} alternating trials of {args.iterations} iterations ({args.warmup} "
            f"warm-up), load average {load_before:.1f} before, {load_after:.1f} after")
    sh([sys.executable, os.path.join(HERE, "perf_validation.py"), "--import-sweep", sweep_csv,
        "--cluster", "cpu-measured", "--out", data, "--cite", cite, "--", "--device", "cpu", "--mock-data", "--lr",
        "1e-3"] + MODEL)
    report_json = os.path.join(args.work, "validation.json")
    done = sh([sys.executable, os.path.join(HERE, "perf_validation.py"), "--binary", binary("perf_model"), "--data",
               data, "--json", report_json], capture_output=True)
    with open(report_json) as f:
        report = json.load(f)
    source, group = report["sources"][0], (report["groups"] or [None])[0]
    rows = {r["id"]: r for r in source["table"]}
    best_id = min(rows, key=lambda k: rows[k]["measured_s"])
    lines = [BEGIN, "",
             f"Measured by `scripts/perf_cpu_validation.py` ({cite}); calibration file "
             f"`configs/clusters/cpu-measured.conf` " +
             ("(as it was: --reuse-sweep measures nothing)" if args.reuse_sweep else "written by the same run") +
             ", data `docs/perf_validation/cpu_sweep.csv`.", "",
             "| layout | measured ms (median; trials) | predicted ms | error |", "|---|---|---|---|"]
    for r in sorted(source["table"], key=lambda r: r["measured_s"]):
        trials = r["cite"].split("trials ", 1)[-1].replace(";", ", ")
        mark = " (search's pick)" if r["id"] == pick else ""
        lines.append(f"| {r['id']}{mark} | {1e3 * r['measured_s']:.1f} ({trials}) | {1e3 * r['predicted_s']:.1f} | "
                     f"{100 * r['error']:+.1f}% |")
    lines.append("")
    summary = (f"Mean absolute error **{100 * source['mean_abs_error']:.1f}%** (target 10%), largest "
               f"{100 * source['max_abs_error']:.1f}%")
    if group:
        summary += f"; Spearman **{group['spearman']:+.2f}** over {group['layouts']} layouts"
    if pick in rows:
        regret = rows[pick]["measured_s"] / rows[best_id]["measured_s"] - 1
        summary += (f"; `--search`'s best, {pick}, measured {1e3 * rows[pick]['measured_s']:.1f} ms against the "
                    f"measured best {best_id}'s {1e3 * rows[best_id]['measured_s']:.1f} ms: **{100 * regret:.1f}%** "
                    f"slower (target 5%)")
    elif pick is None:
        summary += "; `--search`'s best layout is not one the sweep can run"
    lines += [summary + ".", "", END]
    doc = os.path.join(ROOT, "docs", "PERFORMANCE_MODEL.md")
    with open(doc) as f:
        text = f.read()
    block = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    if not block.search(text):
        raise SystemExit(f"error: {doc} has no {BEGIN} ... {END} block")
    with open(doc, "w") as f:
        f.write(block.sub(lambda _: "\n".join(lines), text))
    print("\n".join(lines))
    print(done.stdout.splitlines()[-1] if done.stdout else "")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
