#!/usr/bin/python3
"""--sample-interval / --sample-prompt (docs/GENERATION.md, "Samples during training"):

  * one rank and TP=2 x PP=2 (mpirun, 4 ranks): the log lines' losses and gradient norms are
    identical with and without sampling; the logging rank prints one sample line per interval
    (and no other rank does); both layouts print the same sample (the same weights, counter-based
    draws keyed by seed and iteration);
  * GPT-2 BPE data: a text --sample-prompt is encoded, the sample decoded to text;
  * --sample-interval -1 is refused naming the flag.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

FLAGS = ["--device", "cpu", "--mock-data", "--vocab-size", "200", "--num-layers", "2", "--hidden-size", "64",
         "--num-attention-heads", "4", "--seq-length", "32", "--max-position-embeddings", "64",
         "--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", "10", "--lr", "3e-3",
         "--log-interval", "1"]


def numbers(stdout):
    return re.findall(r"iteration +\d+/ +\d+ .*?lm loss: (\S+) .*?grad norm: (\S+)", stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    for flag in ("--pretrain", "--preprocess", "--mpirun", "--source-dir", "--work-dir"):
        parser.add_argument(flag, required=True)
    args = parser.parse_args()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    failures, samples = [], {}
    for name, launcher, extra in (("one rank", [], []),
                                  ("TP=2 x PP=2", [args.mpirun, "-n", "4", "--oversubscribe"],
                                   ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"])):
        runs = {}
        for sampling in (False, True):
            command = launcher + [args.pretrain] + FLAGS + extra + (["--sample-interval", "5"] if sampling else [])
            result = subprocess.run(command, capture_output=True, text=True)
            if result.returncode != 0:
                failures.append(f"{name}: exit {result.returncode}: {result.stderr[-300:]}")
                break
            runs[sampling] = result.stdout
        if len(runs) != 2:
            continue
        plain, sampled = numbers(runs[False]), numbers(runs[True])
        lines = re.findall(r"^sample at iteration (\d+): (.*)$", runs[True], re.M)
        print(f"{name}: {len(sampled)} log lines, losses and grad norms "
              f"{'identical' if plain == sampled and len(plain) == 10 else 'DIFFERENT'} with and without sampling; "
              f"{len(lines)} sample lines")
        for iteration, text in lines:
            print(f"  sample at iteration {iteration}: {text}")
        if plain != sampled or len(plain) != 10:
            failures.append(f"{name}: sampling changed the log lines: {plain} vs {sampled}")
        if [i for i, _ in lines] != ["5", "10"]:
            failures.append(f"{name}: expected samples at iterations 5 and 10, got {lines}")
        samples[name] = lines
    if len(samples) == 2 and samples["one rank"] != samples["TP=2 x PP=2"]:
        failures.append(f"the layouts printed different samples: {samples}")

    # GPT-2 BPE text.
    corpus = os.path.join(args.source_dir, "tests", "data", "tokenizer_corpus.jsonl")
    prefix = os.path.join(args.work_dir, "corpus")
    tokenizer = harness.gpt2_tokenizer_flags(args.source_dir)
    subprocess.run([args.preprocess, "--input", corpus, "--output-prefix", prefix, "--workers", "1", "--append-eod"]
                   + tokenizer, check=True, stdout=subprocess.DEVNULL)
    result = subprocess.run([args.pretrain, "--device", "cpu", "--data-path", prefix + "_text_document", "--split",
                             "100,0,0", "--tokenizer-type", "GPT2BPETokenizer", "--num-layers", "1", "--hidden-size",
                             "32", "--num-attention-heads", "2", "--seq-length", "64", "--max-position-embeddings", "128",
                             "--micro-batch-size", "2", "--global-batch-size", "2", "--train-iters", "4", "--lr", "1e-3",
                             "--sample-interval", "4", "--sample-prompt", "Hello world"] + tokenizer,
                            capture_output=True, text=True, errors="replace")  # a sample may end inside a UTF-8 sequence
    text = re.findall(r"^sample at iteration 4: (.*)$", result.stdout, re.M)
    print(f"GPT-2 BPE: sample at iteration 4: {text[0] if text else result.stderr[-300:]}")
    if result.returncode != 0 or len(text) != 1 or not text[0].startswith("Hello world | "):
        failures.append(f"GPT-2 BPE sample: exit {result.returncode}, {text}")

    bad = subprocess.run([args.pretrain] + FLAGS + ["--sample-interval", "-1"], capture_output=True, text=True)
    if bad.returncode == 0 or "--sample-interval" not in bad.stderr + bad.stdout:
        failures.append(f"--sample-interval -1: exit {bad.returncode}, {bad.stderr!r}")
    return harness.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
