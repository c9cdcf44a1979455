#!/usr/bin/python3
"""The data pipeline as users meet it:
  * format compatibility: datasets written by an independent numpy writer (uint16 and int32, with
    an empty sequence) are read token for token by the project's reader; truncated or foreign
    files are refused with a message naming the file;
  * preprocess_data: identical output for 1 and 4 workers; --append-eod; bad lines (malformed
    JSON, missing key, non-string value, empty document, invalid UTF-8) stop the run with the line
    number and no output, or are skipped and reported with --on-error skip."""

import argparse
import filecmp
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import megatron_dataset  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preprocess", required=True)
    parser.add_argument("--dump", required=True)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    w = lambda name: os.path.join(args.work_dir, name)  # noqa: E731
    failures = []
    rng = random.Random(7)

    # Format compatibility.
    for code, high in ((8, 65535), (4, 2 ** 31 - 1)):
        documents = [[rng.randrange(high) for _ in range(rng.randrange(1, 50))] for _ in range(20)]
        documents[5] = []
        prefix = w(f"numpy_written_{code}")
        megatron_dataset.write(prefix, documents, code)
        run = subprocess.run([args.dump, prefix], capture_output=True, text=True)
        read = [[int(t) for t in line.split()] for line in run.stdout.split("\n")[:-1]]
        if run.returncode != 0 or read != documents:
            failures.append(f"dtype code {code}: our reader disagrees with the numpy writer ({run.stderr.strip()})")
        else:
            print(f"dtype code {code}: {len(documents)} sequences, {sum(map(len, documents))} tokens read token for token")
    prefix = w("numpy_written_8")
    with open(prefix + ".bin", "r+b") as f:
        f.truncate(os.path.getsize(prefix + ".bin") - 2)
    run = subprocess.run([args.dump, prefix], capture_output=True, text=True)
    if run.returncode == 0 or f"{prefix}.bin is" not in run.stderr or "truncated" not in run.stderr:
        failures.append(f"truncated .bin not refused clearly: {run.stderr!r}")
    with open(w("foreign.idx"), "wb") as f:
        f.write(b"PK\x03\x04 this is a zip file, not an index" * 3)
    open(w("foreign.bin"), "wb").close()
    run = subprocess.run([args.dump, w("foreign")], capture_output=True, text=True)
    if run.returncode == 0 or "foreign.idx is not a Megatron indexed-dataset index" not in run.stderr:
        failures.append(f"foreign file not refused clearly: {run.stderr!r}")
    run = subprocess.run([args.dump, w("missing")], capture_output=True, text=True)
    if run.returncode == 0 or "missing.idx not found" not in run.stderr:
        failures.append(f"missing file not refused clearly: {run.stderr!r}")

    # preprocess_data.
    tokenizer = harness.gpt2_tokenizer_flags(args.source_dir)
    corpus = os.path.join(args.source_dir, "tests", "data", "tokenizer_corpus.jsonl")
    for workers in (1, 4):
        subprocess.run([args.preprocess, "--input", corpus, "--output-prefix", w(f"workers{workers}"), "--append-eod",
                        "--workers", str(workers), "--batch-lines", "3"] + tokenizer, check=True, stdout=subprocess.DEVNULL)
    for suffix in (".bin", ".idx"):
        if not filecmp.cmp(w("workers1_text_document" + suffix), w("workers4_text_document" + suffix), shallow=False):
            failures.append(f"--workers 1 and 4 wrote different {suffix}")
    documents, _, _ = megatron_dataset.read(w("workers1_text_document"))
    if not all(d and d[-1] == 50256 for d in documents) or any(50256 in d[:-1] for d in documents):
        failures.append("--append-eod: every document must end with 50256 (and the literal text never becomes it)")

    bad = w("bad.jsonl")
    with open(bad, "wb") as f:
        f.write(b'{"text": "fine one"}\n')
        f.write(b'{"text": "unterminated\n')                 # line 2: malformed JSON
        f.write(b'{"other": "no text key"}\n')             # line 3: missing key
        f.write(b'{"text": ""}\n')                         # line 4: empty document
        f.write(b'{"text": "bad \xff\xfe bytes"}\n')       # line 5: invalid UTF-8
        f.write(b'{"text": 42}\n')                         # line 6: not a string
        f.write(b'\n')                                     # line 7: blank, ignored
        f.write(b'{"text": "fine two"}\n')
    run = subprocess.run([args.preprocess, "--input", bad, "--output-prefix", w("bad_stop")] + tokenizer,
                         capture_output=True, text=True)
    if run.returncode == 0 or "bad.jsonl:2: malformed JSON" not in run.stderr or os.path.exists(w("bad_stop_text_document.bin")):
        failures.append(f"--on-error stop: {run.returncode} {run.stderr!r}")
    run = subprocess.run([args.preprocess, "--input", bad, "--output-prefix", w("bad_skip"), "--on-error", "skip"] + tokenizer,
                         capture_output=True, text=True)
    expected = ["skipped 1 lines with malformed JSON (lines 2)", "skipped 2 lines with missing or non-string key (lines 3, 6)",
                "skipped 1 lines with empty document (lines 4)", "skipped 1 lines with invalid UTF-8 (lines 5)"]
    documents, _, _ = megatron_dataset.read(w("bad_skip_text_document")) if run.returncode == 0 else ([], 0, 0)
    if run.returncode != 0 or any(e not in run.stdout for e in expected) or len(documents) != 2:
        failures.append(f"--on-error skip: {run.returncode} {run.stdout!r} {run.stderr!r} ({len(documents)} documents)")
    else:
        print("bad lines: stopped at line 2 without output; skipped and reported by line with --on-error skip")
    return harness.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
