// Independent GPT-2 tokenization of a JSON-lines file, for the parity test and the benchmark.
//   node reference_tokenize.cjs NODE_MODULES INPUT.jsonl OUTPUT.jsonl [--encoder tiktoken|gpt-3-encoder]
//   node reference_tokenize.cjs NODE_MODULES INPUT.jsonl --time       (tiktoken encode loop only)
// Output: one JSON array of ids per input line. Special tokens are ordinary text: tiktoken's
// encode(text, [], []) allows none and disallows none, so "<|endoftext|>" is encoded as characters.
const fs = require("fs");
const path = require("path");
const [modules, input, output, ...rest] = process.argv.slice(2);
const texts = fs.readFileSync(input, "utf8").split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l).text);

if (output === "--time") {
  const { get_encoding } = require(path.join(modules, "tiktoken"));
  const encoder = get_encoding("gpt2");
  let tokens = 0;
  const start = process.hrtime.bigint();
  for (const text of texts) tokens += encoder.encode(text, [], []).length;
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  console.log(JSON.stringify({ documents: texts.length, tokens, seconds }));
  encoder.free();
  process.exit(0);
}

const which = rest.includes("gpt-3-encoder") ? "gpt-3-encoder" : "tiktoken";
let encode;
if (which === "tiktoken") {
  const { get_encoding } = require(path.join(modules, "tiktoken"));
  const encoder = get_encoding("gpt2");
  encode = (text) => Array.from(encoder.encode(text, [], []));
} else {
  encode = require(path.join(modules, "gpt-3-encoder")).encode;
}
fs.writeFileSync(output, texts.map((t) => JSON.stringify(encode(t))).join("\n") + "\n");
