#!/usr/bin/python3
"""The project's dropout masks in numpy, written from the definitions in src/core/philox.h and
src/kernels/dropout_mask.h (no project code is called):

  philox4x32_10(key, counter_high, counter_low) -> 4 uint32 words (Salmon et al., SC'11)
  splitmix64, fnv1a_64, philox_key(seed, name) = splitmix64(splitmix64(seed) ^ fnv1a_64(name))
  dropout_key(seed, iteration, layer, site): philox_key(seed, "dropout"), then splitmix64 of it xor
      the iteration, the layer (uint64 wraparound: the embedding's -1 is 2^64 - 1) and the site
  an element at (sample, position) is kept iff word position % 4 of
      philox4x32_10(key, sample, position // 4) >= uint64(double(float32(p)) * 2^32)

Self-test: `dropout_masks.py --self-test [--reference PROGRAM]` checks Random123's known answers
and, given the small C++ program dropout_mask_values (built from the project's headers), every value
that program prints.
"""
import argparse
import subprocess
import sys

import numpy as np

MASK32 = 0xFFFFFFFF
MASK64 = 0xFFFFFFFFFFFFFFFF

# Sites of a transformer layer (part of the key).
SITE_ATTENTION_PROBABILITIES = 1
SITE_ATTENTION_OUTPUT = 2
SITE_MLP_OUTPUT = 3
SITE_EMBEDDING = 4

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_LOW = np.uint64(MASK32)
_SHIFT = np.uint64(32)


def philox4x32_10(key, counter_high, counter_low):
    """Philox4x32-10 of a scalar 64-bit key over broadcastable arrays of 64-bit counters.

    The counter is the four 32-bit words (low of counter_low, high of counter_low, low of
    counter_high, high of counter_high); the key the words (low, high). Returns uint32 [..., 4].
    """
    high = np.asarray(counter_high, dtype=np.uint64)
    low = np.asarray(counter_low, dtype=np.uint64)
    high, low = np.broadcast_arrays(high, low)
    c0, c1 = low & _LOW, low >> _SHIFT
    c2, c3 = high & _LOW, high >> _SHIFT
    k0, k1 = key & MASK32, (key >> 32) & MASK32
    for _ in range(10):
        product0 = _M0 * c0  # < 2^64: exact in uint64
        product1 = _M1 * c2
        hi0, lo0 = product0 >> _SHIFT, product0 & _LOW
        hi1, lo1 = product1 >> _SHIFT, product1 & _LOW
        c0, c1, c2, c3 = hi1 ^ c1 ^ np.uint64(k0), lo1, hi0 ^ c3 ^ np.uint64(k1), lo0
        k0 = (k0 + _W0) & MASK32
        k1 = (k1 + _W1) & MASK32
    return np.stack([c0, c1, c2, c3], axis=-1).astype(np.uint32)


def fnv1a_64(text):
    value = 0xCBF29CE484222325
    for byte in text.encode():
        value ^= byte
        value = (value * 0x100000001B3) & MASK64
    return value


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def philox_key(seed, stream_name):
    return splitmix64(splitmix64(seed & MASK64) ^ fnv1a_64(stream_name))


def dropout_key(seed, iteration, layer, site):
    key = philox_key(seed, "dropout")
    key = splitmix64(key ^ (iteration & MASK64))
    key = splitmix64(key ^ (layer & MASK64))
    return splitmix64(key ^ (site & MASK64))


def dropout_threshold(probability):
    """Keep threshold: uint64(double(float32(p)) * 2^32)."""
    return int(float(np.float32(probability)) * 4294967296.0)


def keep_mask(key, samples, positions, probability):
    """Boolean keep mask over broadcastable arrays of sample indices and positions."""
    samples = np.asarray(samples, dtype=np.uint64)
    positions = np.asarray(positions, dtype=np.uint64)
    samples, positions = np.broadcast_arrays(samples, positions)
    blocks = philox4x32_10(key, samples, positions >> np.uint64(2))
    words = np.take_along_axis(blocks, (positions & np.uint64(3)).astype(np.int64)[..., None], axis=-1)[..., 0]
    return words.astype(np.uint64) >= np.uint64(dropout_threshold(probability))


def hidden_keep_mask(key, first_sample, batch, seq, hidden, probability, first_token=0):
    """Keep mask of a hidden dropout on [s, b, h] activations: element (t, i, c) of sample
    first_sample + i at position (first_token + t) * h + c. Returns bool [s, b, h]."""
    samples = (first_sample + np.arange(batch, dtype=np.uint64))[None, :, None]
    positions = ((first_token + np.arange(seq, dtype=np.uint64))[:, None, None] * np.uint64(hidden)
                 + np.arange(hidden, dtype=np.uint64)[None, None, :])
    return keep_mask(key, samples, positions, probability)


def attention_keep_mask(key, first_sample, batch, heads, seq, probability, first_head=0):
    """Keep mask of attention dropout on the probabilities [b, heads, s, s]: element
    (i, n, q, k) of sample first_sample + i at position ((first_head + n) * s + q) * s + k."""
    samples = (first_sample + np.arange(batch, dtype=np.uint64))[:, None, None, None]
    head = (first_head + np.arange(heads, dtype=np.uint64))[None, :, None, None]
    query = np.arange(seq, dtype=np.uint64)[None, None, :, None]
    key_index = np.arange(seq, dtype=np.uint64)[None, None, None, :]
    positions = (head * np.uint64(seq) + query) * np.uint64(seq) + key_index
    return keep_mask(key, samples, positions, probability)


# ---- self-test ------------------------------------------------------------------------------------

# Random123's kat_vectors for philox4x32_10 (ctr words, key words -> output words), here as
# (key, counter_high, counter_low).
KNOWN_ANSWERS = [
    ((0, 0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((MASK64, MASK64, MASK64), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x299F31D0A4093822, 0x0370734413198A2E, 0x85A308D3243F6A88), (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


def self_test(reference):
    failures = []
    for (key, high, low), expected in KNOWN_ANSWERS:
        got = tuple(int(w) for w in philox4x32_10(key, high, low))
        if got != expected:
            failures.append(f"philox4x32_10({key:#x}, {high:#x}, {low:#x}) = {got}, Random123 says {expected}")
    checked = len(KNOWN_ANSWERS)
    if reference:
        lines = subprocess.run([reference], check=True, capture_output=True, text=True).stdout.splitlines()
        for line in lines:
            fields = line.split()
            kind, values = fields[0], fields[1:]
            if kind == "philox":
                key, high, low = (int(v, 16) for v in values[:3])
                want = tuple(int(v, 16) for v in values[3:])
                got = tuple(int(w) for w in philox4x32_10(key, high, low))
            elif kind == "fnv1a_64":
                want, got = int(values[1], 16), fnv1a_64(values[0])
            elif kind == "splitmix64":
                want, got = int(values[1], 16), splitmix64(int(values[0], 16))
            elif kind == "philox_key":
                want, got = int(values[2], 16), philox_key(int(values[0], 16), values[1])
            elif kind == "dropout_key":
                seed, iteration, layer, site = int(values[0], 16), int(values[1]), int(values[2]), int(values[3])
                want, got = int(values[4], 16), dropout_key(seed, iteration, layer, site)
            elif kind == "threshold":
                # values[0]: the float32 probability as its bit pattern
                p = float(np.frombuffer(np.uint32(int(values[0], 16)).tobytes(), dtype=np.float32)[0])
                want, got = int(values[1]), dropout_threshold(p)
            elif kind == "keeps":
                # key sample first_position probability_bits bits: positions first .. first + len - 1
                key, sample, first = int(values[0], 16), int(values[1]), int(values[2])
                p = float(np.frombuffer(np.uint32(int(values[3], 16)).tobytes(), dtype=np.float32)[0])
                want = values[4]
                positions = np.arange(first, first + len(want), dtype=np.uint64)
                got = "".join("1" if k else "0" for k in keep_mask(key, sample, positions, p))
            else:
                failures.append(f"unknown line from {reference}: {line}")
                continue
            checked += 1
            if got != want:
                failures.append(f"{line}: numpy gives {got}")
    print(f"dropout_masks self-test: {checked} values checked, {len(failures)} mismatches")
    for failure in failures[:20]:
        print("  " + failure)
    return 1 if failures else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--self-test", action="store_true", required=True)
    parser.add_argument("--reference", help="the dropout_mask_values program (C++, from the project's headers)")
    sys.exit(self_test(parser.parse_args().reference))
