// preprocess_data: JSON lines to Megatron indexed datasets, Megatron's interface
// (tools/preprocess_data.py):
//
//   preprocess_data --input corpus.jsonl --output-prefix my-corpus --vocab-file vocab.json
//       --merge-file merges.txt --tokenizer-type GPT2BPETokenizer --append-eod --workers 8
//   preprocess_data ... --tokenizer-type GPTSentencePieceTokenizer --tokenizer-model tokenizer.model
//   preprocess_data ... --tokenizer-type HuggingFaceTokenizer --tokenizer-model llama3-dir
//
// writes my-corpus_text_document.bin/.idx (one per --json-keys key). Lines are read in batches and
// encoded by --workers threads; documents are written in input order, so the output is the same
// for any worker count. A malformed JSON line, a missing or non-string key, an empty document or
// invalid UTF-8 is counted and reported with its line number; --on-error stop (default) ends the
// run without output, --on-error skip leaves the line out. A key that appears twice in a line
// takes its last value, as Python's json (and so Megatron's tool) reads it. An input that yields
// no document at all (an empty file, only blank or skipped lines) is an error unless
// --allow-empty asks for an empty dataset.
#include <simdjson.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "cli_parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "data/file_access.h"
#include "data/text_tokenizer.h"
#include "data/indexed_dataset.h"
#include "train/args/numeric_flags.h"

namespace gpt {
namespace {

struct Options {
  std::string input, output_prefix, vocab_file, merge_file, tokenizer_model, tokenizer_type = "GPT2BPETokenizer",
      on_error = "stop";
  std::vector<std::string> json_keys = {"text"};
  bool append_eod = false;
  bool allow_empty = false;
  int workers = 1;
  int64_t batch_lines = 32;  // small batches keep the working set in cache and the pipeline busy
};

enum class Problem { kNone, kMalformedJson, kMissingKey, kEmptyDocument, kInvalidUtf8 };
const char* describe(Problem p) {
  switch (p) {
    case Problem::kMalformedJson: return "malformed JSON";
    case Problem::kMissingKey: return "missing or non-string key";
    case Problem::kEmptyDocument: return "empty document";
    case Problem::kInvalidUtf8: return "invalid UTF-8";
    default: return "ok";
  }
}

// One line's result: for each key its token ids, or the problem found.
struct LineResult {
  Problem problem = Problem::kNone;
  std::string problem_key;
  std::vector<std::vector<int32_t>> ids;  // per key
};

class Worker {
 public:
  Worker(const TextTokenizer& tokenizer, const Options& options) : tokenizer_(tokenizer.clone()), options_(options) {}

  void process(const std::string& line, LineResult& result) {
    result.problem = Problem::kNone;
    result.problem_key.clear();
    result.ids.resize(options_.json_keys.size());
    for (std::vector<int32_t>& ids : result.ids) ids.clear();  // keeps capacity across batches
    // The DOM parser validates the whole line: structure, trailing content and UTF-8.
    simdjson::dom::element document;
    const auto error = parser_.parse(line.data(), line.size()).get(document);
    if (error != simdjson::SUCCESS) {
      result.problem = error == simdjson::UTF8_ERROR ? Problem::kInvalidUtf8 : Problem::kMalformedJson;
      return;
    }
    if (!document.is_object()) {
      result.problem = Problem::kMalformedJson;
      return;
    }
    const simdjson::dom::object object = document.get_object().value_unsafe();
    for (size_t k = 0; k < options_.json_keys.size(); ++k) {
      // The last field with this (unescaped) name, as Python's json.loads keeps it; simdjson's
      // lookup would take the first, and compares the key as escaped in the line.
      simdjson::dom::element value;
      bool found = false;
      for (const simdjson::dom::key_value_pair field : object) {
        if (field.key == options_.json_keys[k]) {
          value = field.value;
          found = true;
        }
      }
      std::string_view text;
      if (!found || value.get_string().get(text) != simdjson::SUCCESS) {
        result.problem = Problem::kMissingKey;
        result.problem_key = options_.json_keys[k];
        return;
      }
      if (text.empty()) {
        result.problem = Problem::kEmptyDocument;
        result.problem_key = options_.json_keys[k];
        return;
      }
      tokenizer_->encode(text, result.ids[k]);
      if (options_.append_eod) result.ids[k].push_back(tokenizer_->eod_id());
    }
  }

 private:
  std::unique_ptr<TextTokenizer> tokenizer_;  // a copy per worker: the piece cache is not shared
  const Options& options_;
  simdjson::dom::parser parser_;
};

absl::Status run(const Options& options) {
  if (!is_text_tokenizer_type(options.tokenizer_type)) {
    return absl::InvalidArgumentError(absl::StrCat("--tokenizer-type ", options.tokenizer_type,
                                                   " is not supported (GPT2BPETokenizer, SentencePieceTokenizer, "
                                                   "GPTSentencePieceTokenizer or HuggingFaceTokenizer)"));
  }
  const bool gpt2 = options.tokenizer_type == "GPT2BPETokenizer";
  if (gpt2 && (options.vocab_file.empty() || options.merge_file.empty())) {
    return absl::InvalidArgumentError("--tokenizer-type GPT2BPETokenizer needs --vocab-file and --merge-file");
  }
  if (!gpt2 && options.tokenizer_model.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--tokenizer-type ", options.tokenizer_type, " needs --tokenizer-model"));
  }
  if (!gpt2 && (!options.vocab_file.empty() || !options.merge_file.empty())) {
    return absl::InvalidArgumentError(absl::StrCat("--tokenizer-type ", options.tokenizer_type,
                                                   " reads --tokenizer-model, not --vocab-file or --merge-file"));
  }
  if (gpt2 && !options.tokenizer_model.empty()) {
    return absl::InvalidArgumentError("--tokenizer-type GPT2BPETokenizer reads --vocab-file and --merge-file, not --tokenizer-model");
  }
  if (options.on_error != "stop" && options.on_error != "skip") {
    return absl::InvalidArgumentError(absl::StrCat("--on-error must be stop or skip (got '", options.on_error, "')"));
  }
  // Before any work: each key names one output dataset, so a key given twice would write the
  // same files twice.
  for (size_t k = 0; k < options.json_keys.size(); ++k) {
    if (options.json_keys[k].empty()) return absl::InvalidArgumentError("--json-keys: a key is empty");
    for (size_t j = 0; j < k; ++j) {
      if (options.json_keys[j] == options.json_keys[k]) {
        return absl::InvalidArgumentError(
            absl::StrCat("--json-keys: '", options.json_keys[k], "' is given more than once"));
      }
    }
  }
  if (options.output_prefix.empty()) return absl::InvalidArgumentError("--output-prefix is empty");
  // A directory opens as a stream that reads nothing (0 documents, exit 0): refused by name.
  GPT_RETURN_IF_ERROR(check_readable_file("--input", options.input));
  GPT_ASSIGN_OR_RETURN(const std::unique_ptr<TextTokenizer> tokenizer,
                       load_text_tokenizer({.type = options.tokenizer_type,
                                            .vocab_file = options.vocab_file,
                                            .merge_file = options.merge_file,
                                            .tokenizer_model = options.tokenizer_model}));
  std::ifstream input(options.input);
  if (!input) return absl::NotFoundError(absl::StrCat("cannot read --input ", options.input));
  std::vector<std::unique_ptr<IndexedDatasetWriter>> writers;
  for (const std::string& key : options.json_keys) {
    GPT_ASSIGN_OR_RETURN(auto writer, IndexedDatasetWriter::create(absl::StrCat(options.output_prefix, "_", key, "_document"),
                                                                   token_dtype_for_vocab(tokenizer->vocab_size())));
    writers.push_back(std::move(writer));
  }
  std::vector<Worker> workers;
  for (int w = 0; w < options.workers; ++w) workers.emplace_back(*tokenizer, options);

  const auto start = std::chrono::steady_clock::now();
  std::map<Problem, std::vector<int64_t>> problems;  // problem -> line numbers
  int64_t line_number = 0, documents = 0, tokens = 0, bytes = 0;

  // Three batches in flight: the workers encode batch k while this thread writes batch k - 1 and
  // reads batch k + 1. Worker w takes lines w, w + workers, ... of a batch; results land by index,
  // so the output order (and bytes) do not depend on the worker count.
  // Lines and results keep their storage from batch to batch (no allocation churn once warm).
  struct Batch {
    std::vector<std::string> storage;
    std::vector<LineResult> results;
    size_t count = 0;
  };
  Batch batches[3];
  const size_t batch_capacity = static_cast<size_t>(options.batch_lines * options.workers);
  auto read_batch = [&](Batch& batch) {
    batch.storage.resize(batch_capacity);
    batch.results.resize(batch_capacity);
    batch.count = 0;
    while (batch.count < batch_capacity && std::getline(input, batch.storage[batch.count])) {
      bytes += static_cast<int64_t>(batch.storage[batch.count].size()) + 1;
      ++batch.count;
    }
  };
  auto encode_batch = [&](Batch& batch) {
    std::vector<std::thread> threads;
    for (int w = 0; w < options.workers; ++w) {
      threads.emplace_back([&, w] {
        for (size_t i = static_cast<size_t>(w); i < batch.count; i += static_cast<size_t>(options.workers)) {
          workers[static_cast<size_t>(w)].process(batch.storage[i], batch.results[i]);
        }
      });
    }
    return threads;
  };
  // Writes one encoded batch; a bad line under --on-error stop ends the run.
  auto write_batch = [&](const Batch& batch) -> absl::Status {
    for (size_t i = 0; i < batch.count; ++i) {
      ++line_number;
      if (batch.storage[i].find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines are not documents
      const LineResult& r = batch.results[i];
      if (r.problem != Problem::kNone) {
        problems[r.problem].push_back(line_number);
        if (options.on_error == "stop") {
          return absl::InvalidArgumentError(absl::StrCat(options.input, ":", line_number, ": ", describe(r.problem),
                                                         r.problem_key.empty() ? "" : absl::StrCat(" ('", r.problem_key, "')"),
                                                         "; no output written (--on-error skip leaves such lines out)"));
        }
        continue;
      }
      for (size_t k = 0; k < writers.size(); ++k) {
        GPT_RETURN_IF_ERROR(writers[k]->add_document(r.ids[k]));
        tokens += static_cast<int64_t>(r.ids[k].size());
      }
      ++documents;
    }
    return absl::OkStatus();
  };

  read_batch(batches[0]);
  absl::Status status = absl::OkStatus();
  for (int64_t k = 0; batches[k % 3].count > 0; ++k) {
    Batch& current = batches[k % 3];
    std::vector<std::thread> threads = encode_batch(current);
    if (k > 0 && status.ok()) status = write_batch(batches[(k - 1) % 3]);
    read_batch(batches[(k + 1) % 3]);
    for (std::thread& t : threads) t.join();
    if (!status.ok()) return status;
    if (batches[(k + 1) % 3].count == 0) GPT_RETURN_IF_ERROR(write_batch(current));
  }
  if (documents == 0 && !options.allow_empty) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--input ", options.input, ": no documents to write (",
        line_number == 0 ? "the file is empty" : absl::StrCat(line_number, " lines, all blank or skipped"),
        "); no output written (--allow-empty writes an empty dataset)"));
  }
  for (auto& writer : writers) GPT_RETURN_IF_ERROR(writer->finish());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("preprocess_data: %lld documents, %lld tokens written to %s_{%s}_document (%.2f s, %.1f MB/s, %d workers)\n",
              static_cast<long long>(documents), static_cast<long long>(tokens), options.output_prefix.c_str(),
              absl::StrJoin(options.json_keys, ",").c_str(), seconds, bytes / 1e6 / seconds, options.workers);
  for (const auto& [problem, numbers] : problems) {
    std::vector<int64_t> first(numbers.begin(), numbers.begin() + std::min<size_t>(numbers.size(), 10));
    std::printf("  skipped %zu lines with %s (lines %s%s)\n", numbers.size(), describe(problem),
                absl::StrJoin(first, ", ").c_str(), numbers.size() > first.size() ? ", ..." : "");
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace gpt

int main(int argc, char** argv) {
  gpt::Options options;
  CLI::App app{"JSON lines to a Megatron indexed dataset", "preprocess_data"};
  app.add_option("--input", options.input, "JSON lines file")->required();
  app.add_option("--json-keys", options.json_keys, "Keys to tokenize (default text)")->expected(1, -1);
  app.add_option("--output-prefix", options.output_prefix, "Output prefix")->required();
  app.add_option("--vocab-file", options.vocab_file, "GPT-2 vocab.json (GPT2BPETokenizer)");
  app.add_option("--merge-file", options.merge_file, "GPT-2 merges.txt (GPT2BPETokenizer)");
  app.add_option("--tokenizer-model", options.tokenizer_model,
                 "SentencePiece tokenizer.model, or a Hugging Face tokenizer.json or its directory");
  app.add_option("--tokenizer-type", options.tokenizer_type,
                 "GPT2BPETokenizer (default), SentencePieceTokenizer, GPTSentencePieceTokenizer or HuggingFaceTokenizer");
  app.add_flag("--append-eod", options.append_eod, "End every document with the tokenizer's end-of-document id");
  app.add_flag("--allow-empty", options.allow_empty,
               "Write an empty dataset when the input has no documents (otherwise an error)");
  // Decimal and in range (train/args/numeric_flags.h): 0 or a negative count is refused, not an empty
  // output or an abort; the upper bounds keep the batches' memory (3 x lines x workers) sane.
  app.add_option("--workers", options.workers, "Encoding threads (1 to 1024)")->transform(gpt::decimal_integer(1, 1024));
  app.add_option("--on-error", options.on_error, "stop (default) or skip bad lines");
  app.add_option("--batch-lines", options.batch_lines, "Lines per worker per batch (1 to 1048576)")
      ->transform(gpt::decimal_integer(1, 1 << 20));
  if (const std::optional<int> exit_status = gpt::parse_command_line(app, argc, argv)) return *exit_status;
  const absl::Status status = gpt::run(options);
  if (!status.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
