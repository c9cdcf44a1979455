#!/usr/bin/python3
"""Same samples as Megatron for the same seed and data (issue 15).

The reference is Megatron's own index building re-implemented here with Debian's numpy, nothing
stored: megatron/core/datasets (core_v0.8.0, and current Megatron but for the sample index's
dtype, int64 before core 0.10 and int32 when it fits since):
  * --split: parse_and_normalize_split, convert_split_vector_to_split_matrix and the
    int(round(bookend * n)) of _build_megatron_dataset_splits;
  * GPTDataset._build_document_sample_shuffle_indices: one numpy.random.RandomState(seed) per
    dataset, _build_document_index (the final epoch shuffled on its own below 80% use),
    helpers.cpp build_sample_idx, _build_shuffle_index, with their dtypes;
  * the cache names: md5 of json.dumps(unique_identifiers, indent=4) with the legacy
    _GPT2BPETokenizer / _NullTokenizer identifiers, "<md5>-GPTDataset-<split>-<what>";
  * get_blend_from_list and the blends: weight prefix pairs (ceil(ceil(n w) 1.005) samples each),
    prefixes without weights (one epoch each, weighed by size), helpers.cpp build_blending_indices;
  * _query_document_sample_shuffle_indices for the tokens of each sample.
For several seeds, corpus sizes, splits and epoch counts (one epoch, several, and a final epoch
shuffled on its own), the arrays gpt_dataset_indices (the project's build_gpt_datasets, which
pretrain_gpt uses) writes to its cache must equal these in values and dtypes, under these names,
byte for byte as numpy.save writes them, and the samples it reads must be Megatron's."""

import argparse
import functools
import glob
import hashlib
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
from collections import OrderedDict

import numpy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import megatron_dataset  # noqa: E402

SPLITS = ("train", "valid", "test")


# --- Megatron's rules, re-implemented -------------------------------------------------------------

def normalize(weights):
    w = numpy.array(weights, dtype=numpy.float64)
    return (w / numpy.sum(w)).tolist()


def split_matrix(split):
    vector = list(map(float, re.findall(r"[.0-9]+", split)))
    vector = normalize(vector + [0.0] * (3 - len(vector)))
    ends = functools.reduce(lambda a, b: a + [a[len(a) - 1] + b], [[0], *vector])
    return [None if e <= b else (b, e) for b, e in zip(ends[:-1], ends[1:])]


def blend_from_list(words):
    if len(words) % 2 == 1:
        return words, None
    weights = []
    for w in words[0::2]:
        try:
            weights.append(float(w))
        except ValueError:
            return words, None
    return words[1::2], weights


class Tokenizer:
    def __init__(self, unique_identifiers):
        self.unique_identifiers = unique_identifiers


def gpt2_tokenizer(vocab, merges):
    return Tokenizer(OrderedDict([("class", "_GPT2BPETokenizer"), ("tokenizer_path", [vocab, merges])]))


def null_tokenizer(vocab_size):
    return Tokenizer(OrderedDict([("class", "_NullTokenizer"), ("tokenizer_path", [None]),
                                  ("vocab_size", str(vocab_size))]))


def description(path, num_samples, split_name, seed, seq_length, split, tokenizer):
    identifiers = OrderedDict()
    identifiers["class"] = "GPTDataset"
    identifiers["dataset_path"] = path
    identifiers["num_samples"] = num_samples
    identifiers["index_split"] = split_name
    identifiers["random_seed"] = seed
    identifiers["sequence_length"] = seq_length
    identifiers["split"] = split
    identifiers["split_matrix"] = split_matrix(split)
    identifiers["tokenizer"] = tokenizer
    return json.dumps(identifiers, indent=4, default=lambda obj: obj.unique_identifiers)


def build_document_index(documents, num_epochs, random_state, separate_final_epoch):
    if not separate_final_epoch or num_epochs == 1:
        document_index = numpy.mgrid[0:num_epochs, 0:len(documents)][1]
        document_index[:] = documents
        document_index = document_index.reshape(-1).astype(numpy.int32)
        random_state.shuffle(document_index)
        return document_index
    first = build_document_index(documents, num_epochs - 1, random_state, False)
    last = build_document_index(documents, 1, random_state, False)
    return numpy.concatenate((first, last))


def build_sample_index(sizes, document_index, seq_length, num_epochs, tokens_per_epoch, extra=1):
    """helpers.cpp build_sample_idx (drop_last_partial_sequence), with helpers.py's dtype."""
    num_samples = (num_epochs * tokens_per_epoch - extra) // seq_length
    dtype = numpy.int32 if max(document_index.shape[0], sizes.max()) <= numpy.iinfo(numpy.int32).max else numpy.int64
    sample_index = numpy.zeros((num_samples + 1, 2), dtype=dtype)
    position, offset = 0, 0
    for i in range(1, num_samples + 1):
        remaining = seq_length + extra
        while remaining != 0:
            length = int(sizes[document_index[position]]) - offset
            remaining -= length
            if remaining <= 0:
                offset += remaining + length - extra
                remaining = 0
            else:
                if position == len(document_index) - 1:
                    offset = int(sizes[document_index[position]]) - extra
                    break
                position += 1
                offset = 0
        sample_index[i] = (position, offset)
    return sample_index


def build_shuffle_index(num_samples, total_size, random_state):
    dtype = numpy.uint32 if total_size < numpy.iinfo(numpy.uint32).max - 1 else numpy.int64
    first = numpy.arange(0, num_samples, 1, dtype=dtype)
    random_state.shuffle(first)
    if num_samples == total_size:
        return first
    last = numpy.arange(num_samples, total_size, 1, dtype=dtype)
    random_state.shuffle(last)
    return numpy.concatenate((first, last))


def gpt_dataset(sizes, indices, num_samples, seq_length, seed, extra=1):
    """GPTDataset._build_document_sample_shuffle_indices -> (document, sample, shuffle, epochs,
    separate_final_epoch)."""
    tokens_per_epoch = int(numpy.sum(sizes[indices]))
    num_epochs = 1
    if num_samples is not None:
        tokens = tokens_per_epoch
        while tokens < num_samples * seq_length + extra:
            num_epochs += 1
            tokens += tokens_per_epoch
    separate_final_epoch = False
    if num_epochs > 1:
        sans_final = ((num_epochs - 1) * tokens_per_epoch - extra) // seq_length
        from_final = num_samples - sans_final
        per_epoch = (tokens_per_epoch - extra) // seq_length
        assert 0 <= from_final <= per_epoch + 1
        separate_final_epoch = from_final < int(0.80 * per_epoch)
    random_state = numpy.random.RandomState(seed)
    document_index = build_document_index(indices, num_epochs, random_state, separate_final_epoch)
    sample_index = build_sample_index(sizes, document_index, seq_length, num_epochs, tokens_per_epoch)
    total = sample_index.shape[0] - 1
    shuffle_index = build_shuffle_index(sans_final if separate_final_epoch else total, total, random_state)
    return document_index, sample_index, shuffle_index, num_epochs, separate_final_epoch


def sample_tokens(documents, document_index, sample_index, shuffle_index, idx, extra=1):
    """_query_document_sample_shuffle_indices."""
    idx = shuffle_index[idx]
    beg, beg_offset = sample_index[idx]
    end, end_offset = sample_index[idx + 1]
    if beg == end:
        return documents[document_index[beg]][beg_offset:end_offset + extra]
    parts = []
    for i in range(beg, end + 1):
        offset = 0 if i > beg else beg_offset
        stop = None if i < end else end_offset + extra
        parts += documents[document_index[i]][offset:stop]
    return parts


def blending_indices(weights, size):
    """helpers.cpp build_blending_indices."""
    dataset_index, dataset_sample_index = [], []
    current = [0] * len(weights)
    for i in range(size):
        position = max(float(i), 1.0)
        best, best_error = 0, weights[0] * position - current[0]
        for d in range(1, len(weights)):
            error = weights[d] * position - current[d]
            if error > best_error:
                best, best_error = d, error
        dataset_index.append(best)
        dataset_sample_index.append(current[best])
        current[best] += 1
    return dataset_index, dataset_sample_index


def npy_bytes(array):
    out = io.BytesIO()
    numpy.save(out, array, allow_pickle=True)
    return out.getvalue()


# --- The test -------------------------------------------------------------------------------------

class Checks:
    def __init__(self):
        self.failures = []
        self.separate_final_epochs = 0
        self.whole_multi_epochs = 0
        self.arrays = 0

    def expect(self, condition, message):
        if not condition:
            self.failures.append(message)
        return condition


def make_corpus(work, name, count, rng, max_length=60):
    lengths = rng.integers(0, max_length, size=count)
    lengths[lengths == 0] = 1 if count < 3 else 0  # a few empty documents, as real corpora have
    documents = [rng.integers(0, 50000, size=int(n)).tolist() for n in lengths]
    prefix = os.path.join(work, name)
    megatron_dataset.write(prefix, documents, 8)
    return prefix, documents


def run_tool(tool, words, split, seed, seq_length, samples, cache, tokenizer_flags, printed):
    command = [tool, "--data-path", *words, "--split", split, "--seed", str(seed), "--seq-length", str(seq_length),
               "--samples", ",".join(map(str, samples)), "--data-cache-path", cache, "--print", str(printed)]
    run = subprocess.run(command + tokenizer_flags, capture_output=True, text=True)
    built = {}
    for line in run.stdout.splitlines():
        parts = line.split()
        if parts[0] == "split":
            current = parts[1]
            built[current] = []
        elif parts[0] == "sample":
            built[current].append([int(t) for t in parts[2:]])
    return run, built


def check_dataset(checks, label, cache, path, documents, split_name, indices, num_samples, seq_length, seed, split,
                  tokenizer):
    """The cached arrays of one GPTDataset against the reference; returns the reference arrays."""
    sizes = numpy.array([len(d) for d in documents], dtype=numpy.int32)
    reference = gpt_dataset(sizes, indices, num_samples, seq_length, seed)
    document_index, sample_index, shuffle_index, epochs, separate = reference
    text = description(path, num_samples, split_name, seed, seq_length, split, tokenizer)
    base = os.path.join(cache, f"{hashlib.md5(text.encode('utf-8')).hexdigest()}-GPTDataset-{split_name}")
    if not checks.expect(os.path.isfile(base + "-description.txt"),
                         f"{label} {split_name}: no {os.path.basename(base)}-description.txt (Megatron's md5 name); "
                         f"cache holds {sorted(os.listdir(cache))}"):
        return reference
    with open(base + "-description.txt") as f:
        checks.expect(f.read() == text, f"{label} {split_name}: description.txt differs from Megatron's")
    for what, expected in (("document_index", document_index), ("sample_index", sample_index),
                           ("shuffle_index", shuffle_index)):
        ours = numpy.load(f"{base}-{what}.npy")
        if checks.expect(ours.dtype == expected.dtype and ours.shape == expected.shape and numpy.array_equal(ours, expected),
                         f"{label} {split_name} {what}: ours {ours.dtype}{ours.shape} {ours[:6].tolist()} vs Megatron's "
                         f"{expected.dtype}{expected.shape} {expected[:6].tolist()}"):
            checks.arrays += 1
            with open(f"{base}-{what}.npy", "rb") as f:
                checks.expect(f.read() == npy_bytes(expected), f"{label} {split_name} {what}: not numpy.save's bytes")
    if separate:
        checks.separate_final_epochs += 1
    elif epochs > 1:
        checks.whole_multi_epochs += 1
    return reference


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tool", required=True, help="gpt_dataset_indices")
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    work = args.work_dir
    rng = numpy.random.default_rng(15)
    checks = Checks()
    gpt2 = ["--vocab-file", "gpt2/vocab.json", "--merge-file", "gpt2/merges.txt"]
    gpt2_identity = gpt2_tokenizer("gpt2/vocab.json", "gpt2/merges.txt")

    corpora = {n: make_corpus(work, f"corpus{n}", n, rng) for n in (49, 200, 1001)}

    # One prefix: seeds, corpus sizes, splits, epoch counts (train samples from a fraction of an
    # epoch to several epochs, with final epochs used below and above 80%).
    cases = [
        (1234, 49, "969,30,1", 16, (40, 8, 4)),
        (1234, 49, "969, 30, 1", 16, (400, 24, 8)),
        (7, 200, "98,2,0", 32, (100, 30, 0)),
        (7, 200, "98,2,0", 32, (560, 30, 0)),
        (0, 200, "949,50,1", 8, (2999, 200, 10)),
        (2 ** 32 - 1, 1001, "90,5,5", 64, (1000, 80, 40)),
        (31337, 1001, "1", 24, (12000, 0, 0)),
        (99, 49, "50,50", 4, (3000, 700, 0)),
    ]
    for seed, n, split, seq_length, samples in cases:
        prefix, documents = corpora[n]
        cache = os.path.join(work, f"cache_{seed}_{n}_{seq_length}_{samples[0]}")
        label = f"seed {seed}, {n} documents, --split {split!r}, seq {seq_length}, samples {samples}"
        run, read = run_tool(args.tool, [prefix], split, seed, seq_length, samples, cache, gpt2, 12)
        if not checks.expect(run.returncode == 0, f"{label}: exit {run.returncode}: {run.stderr.strip()}"):
            continue
        matrix = split_matrix(split)
        for s, split_name in enumerate(SPLITS):
            if samples[s] == 0 or matrix[s] is None:
                continue
            begin, end = (int(round(x * float(n))) for x in matrix[s])
            if begin == end:
                # Megatron loops forever looking for epochs of zero tokens; here the split is not built.
                checks.expect(split_name not in read, f"{label} {split_name}: built from no documents")
                continue
            indices = numpy.arange(begin, end, 1, dtype=numpy.int32)
            document_index, sample_index, shuffle_index, _, _ = check_dataset(
                checks, label, cache, prefix, documents, split_name, indices, samples[s], seq_length, seed, split,
                gpt2_identity)
            expected = [sample_tokens(documents, document_index, sample_index, shuffle_index, i)
                        for i in range(min(12, samples[s]))]
            checks.expect(read.get(split_name) == expected, f"{label} {split_name}: the samples read differ from Megatron's")
        # A second run finds the cache and leaves it as it is.
        stamps = {p: os.stat(p).st_mtime_ns for p in glob.glob(os.path.join(cache, "*"))}
        again, read_again = run_tool(args.tool, [prefix], split, seed, seq_length, samples, cache, gpt2, 12)
        checks.expect(again.returncode == 0 and read_again == read and
                      stamps == {p: os.stat(p).st_mtime_ns for p in glob.glob(os.path.join(cache, "*"))},
                      f"{label}: the second run did not reuse the cache unchanged")
    print(f"one prefix: {len(cases)} runs, {checks.arrays} arrays equal to Megatron's (values, dtypes, names, bytes); "
          f"{checks.separate_final_epochs} datasets with a separate final epoch, {checks.whole_multi_epochs} with "
          f"several epochs shuffled whole")
    checks.expect(checks.separate_final_epochs >= 2 and checks.whole_multi_epochs >= 2,
                  "the cases no longer cover both multi-epoch kinds")

    # Issue 15's example: 49 documents with 969,30,1 train on documents 0-46.
    prefix, documents = corpora[49]
    cache = os.path.join(work, "cache_issue")
    run, _ = run_tool(args.tool, [prefix], "969,30,1", 5, 8, (10, 0, 0), cache, gpt2, 0)
    trained = numpy.load(glob.glob(os.path.join(cache, "*-train-document_index.npy"))[0]) if run.returncode == 0 else []
    checks.expect(sorted(set(numpy.asarray(trained).tolist())) == list(range(47)),
                  f"49 documents, 969,30,1: trained on {sorted(set(numpy.asarray(trained).tolist()))[-3:]}..., not 0-46")

    # The NullTokenizer's identifiers name the files too.
    cache = os.path.join(work, "cache_null")
    run, _ = run_tool(args.tool, [prefix], "1", 3, 8, (50, 0, 0), cache, ["--null-vocab-size", "50000"], 0)
    if checks.expect(run.returncode == 0, f"NullTokenizer: {run.stderr.strip()}"):
        check_dataset(checks, "NullTokenizer", cache, prefix, documents, "train", numpy.arange(0, 49, dtype=numpy.int32),
                      50, 8, 3, "1", null_tokenizer(50000))

    # Blends: weight prefix pairs, and prefixes without weights (one epoch each, weighed by size).
    small, small_documents = corpora[49]
    large, large_documents = corpora[200]
    for words, samples in (([small, large], (150, 20, 0)), (["0.3", small, "0.7", large], (900, 60, 0))):
        label = f"--data-path {' '.join(os.path.basename(w) for w in words)}"
        cache = os.path.join(work, f"cache_blend_{len(words)}")
        seed, seq_length, split = 11, 16, "90,10,0"
        run, read = run_tool(args.tool, words, split, seed, seq_length, samples, cache, gpt2, 40)
        if not checks.expect(run.returncode == 0, f"{label}: exit {run.returncode}: {run.stderr.strip()}"):
            continue
        prefixes, weights = blend_from_list(words)
        if weights is not None:
            weights = normalize(weights)
        matrix = split_matrix(split)
        for s, split_name in enumerate(SPLITS):
            if samples[s] == 0 or matrix[s] is None:
                continue
            references = []
            for k, (prefix, documents) in enumerate(zip(prefixes, (small_documents, large_documents))):
                n = len(documents)
                begin, end = (int(round(x * float(n))) for x in matrix[s])
                num_samples = None if weights is None else int(math.ceil(math.ceil(samples[s] * weights[k]) * 1.005))
                references.append((documents, check_dataset(checks, label, cache, prefix, documents, split_name,
                                                             numpy.arange(begin, end, 1, dtype=numpy.int32), num_samples,
                                                             seq_length, seed, split, gpt2_identity)))
            if weights is None:
                counts = [r[1][1].shape[0] - 1 for r in references]
                size = min(samples[s], sum(counts))
                blend_weights = normalize(counts)
            else:
                size, blend_weights = samples[s], weights
            dataset_index, dataset_sample_index = blending_indices(blend_weights, size)
            expected = []
            for i in range(min(40, size)):
                documents, (document_index, sample_index, shuffle_index, _, _) = references[dataset_index[i]]
                expected.append(sample_tokens(documents, document_index, sample_index, shuffle_index,
                                              dataset_sample_index[i]))
            checks.expect(read.get(split_name) == expected, f"{label} {split_name}: the blended samples differ from Megatron's")
        print(f"{label}: datasets and blended samples equal Megatron's")
    return harness.finish(checks.failures, f"{checks.arrays} index arrays equal to numpy's")


if __name__ == "__main__":
    sys.exit(main())
