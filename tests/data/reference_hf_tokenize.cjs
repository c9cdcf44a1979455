// Independent Hugging Face tokenization of a JSON-lines file with npm @huggingface/tokenizers
// (tokenizers.js, the tokenizer of transformers.js), for the parity test.
//   node reference_hf_tokenize.cjs NODE_MODULES TOKENIZER_DIR INPUT.jsonl OUTPUT.jsonl [INPUT OUTPUT ...]
// Output: one JSON array of ids per input line, as transformers' tokenizer(text).input_ids gives
// them (special tokens of the post-processor added, added tokens in the text recognised).
const fs = require("fs");
const path = require("path");
const [modules, directory, ...files] = process.argv.slice(2);
const { Tokenizer } = require(path.join(modules, "@huggingface", "tokenizers", "dist", "tokenizers.cjs"));
const tokenizerJson = JSON.parse(fs.readFileSync(path.join(directory, "tokenizer.json"), "utf8"));
const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(directory, "tokenizer_config.json"), "utf8"));
const tokenizer = new Tokenizer(tokenizerJson, tokenizerConfig);
for (let i = 0; i + 1 < files.length; i += 2) {
  const texts = fs.readFileSync(files[i], "utf8").split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l).text);
  fs.writeFileSync(files[i + 1], texts.map((t) => JSON.stringify(Array.from(tokenizer.encode(t).ids))).join("\n") + "\n");
}
