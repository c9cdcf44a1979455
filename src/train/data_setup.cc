#include "train/data_setup.h"

#include <algorithm>
#include <filesystem>
#include <thread>

#include "data/gpt2_vocabulary.h"
#include "data/gpt_dataset_builder.h"
#include "data/indexed_dataset.h"
#include "data/mock_dataset.h"
#include "data/text_tokenizer.h"
#include "data/token_check.h"
#include "parallel/comm/mpi_runtime.h"
#include "train/args/batch_size_arguments.h"
#include "train/memory_plan.h"
#include "train/rank_agreement.h"

namespace gpt {
namespace {

// Opens a dataset and checks every token id against the vocabulary now, not hours into the run
// when the microbatch holding a bad id is drawn. The ranks of a node open the same files, so each
// checks its share with its share of the cores; the set-up agreement after data loading makes one
// rank's finding everyone's.
absl::StatusOr<std::shared_ptr<const IndexedDataset>> open_checked(const std::string& prefix, int64_t vocab_size) {
  GPT_ASSIGN_OR_RETURN(std::unique_ptr<IndexedDataset> opened, IndexedDataset::open(prefix));
  TokenCheckOptions check;
  check.vocab_size = vocab_size;
  check.parts = std::max(1, local_world_size());
  check.part = local_rank();
  check.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / check.parts);
  GPT_RETURN_IF_ERROR(check_token_ids(*opened, check));
  return std::shared_ptr<const IndexedDataset>(std::move(opened));
}

absl::StatusOr<int64_t> tokenizer_vocab_size(const Arguments& a) {
  if (a.tokenizer_type == "NullTokenizer") return a.vocab_size + 1;  // Megatron: ids [0, N) plus eod N
  if (a.tokenizer_type == "GPT2BPETokenizer") {
    GPT_ASSIGN_OR_RETURN(Gpt2Vocabulary vocabulary, Gpt2Vocabulary::load(a.vocab_file));
    return vocabulary.size();
  }
  // SentencePiece and Hugging Face: the size includes the special tokens the tokenizer adds.
  GPT_ASSIGN_OR_RETURN(const std::unique_ptr<TextTokenizer> tokenizer,
                       load_text_tokenizer({.type = a.tokenizer_type, .tokenizer_model = a.tokenizer_model}));
  return tokenizer->vocab_size();
}

// The tokenizer's vocabulary. The launcher planned memory with the vocabulary known before the
// tokenizer was read (none for a GPT-2 vocabulary file); now the real one, before any index or
// model memory is taken.
absl::StatusOr<int64_t> checked_tokenizer_vocab_size(const Arguments& a) {
  GPT_ASSIGN_OR_RETURN(const int64_t vocab_size, tokenizer_vocab_size(a));
  if (vocab_size > vocabulary_before_data(a)) {
    GPT_RETURN_IF_ERROR(check_memory_fits(a, job_world_size(), vocab_size, /*ranks_per_gpu=*/1));
  }
  return vocab_size;
}

// Megatron's default cache: next to the (first) dataset.
std::string cache_dir(const Arguments& a, const std::string& first_prefix) {
  if (!a.data_cache_path.empty()) return a.data_cache_path;
  const std::filesystem::path parent = std::filesystem::path(first_prefix).parent_path();
  return ((parent.empty() ? std::filesystem::path(".") : parent) / "cache" / "GPTDataset_indices").string();
}

absl::StatusOr<DataSources> build_indexed(const Arguments& a) {
  DataSources sources;
  GPT_ASSIGN_OR_RETURN(sources.vocab_size, checked_tokenizer_vocab_size(a));
  GptDatasetsConfig config;
  config.data_path = a.data_path;
  config.split = a.split;
  config.seed = static_cast<uint64_t>(a.seed);
  config.seq_length = a.seq_length;
  config.num_samples = samples_per_split(a);  // valid and test read nothing with --eval-iters 0
  GPT_ASSIGN_OR_RETURN(const DataBlend blend, parse_data_path(a.data_path));
  config.cache_dir = cache_dir(a, blend.prefixes.front());
  config.tokenizer = a.tokenizer_type == "NullTokenizer"     ? TokenizerIdentity::null_tokenizer(a.vocab_size)
                     : a.tokenizer_type == "GPT2BPETokenizer" ? TokenizerIdentity::gpt2_bpe(a.vocab_file, a.merge_file)
                                                              : TokenizerIdentity::with_model(a.tokenizer_type, a.tokenizer_model);
  const int64_t vocab_size = sources.vocab_size;
  auto open = [&](const std::string& prefix) -> absl::StatusOr<std::shared_ptr<const DocumentStore>> {
    return open_checked(prefix, vocab_size);
  };
  GPT_ASSIGN_OR_RETURN(const auto built, build_gpt_datasets(config, open));
  sources.train = built[0];
  sources.valid = built[1];
  sources.test = built[2];
  return sources;
}

absl::StatusOr<DataSources> build_mock(const Arguments& a) {
  DataSources sources;
  const uint64_t seed = static_cast<uint64_t>(a.seed);
  // The tokenizer's vocabulary (NullTokenizer: N + 1, as Megatron), or --vocab-size alone.
  if (a.tokenizer_type.empty()) {
    sources.vocab_size = a.vocab_size;
  } else {
    GPT_ASSIGN_OR_RETURN(sources.vocab_size, checked_tokenizer_vocab_size(a));
  }
  // Mock data: three independent streams, one per split, of ids below the vocabulary size.
  sources.train = std::make_shared<MockDataset>(seed, sources.vocab_size, a.seq_length);
  if (a.eval_iters > 0) {
    sources.valid = std::make_shared<MockDataset>(seed + 1, sources.vocab_size, a.seq_length);
    sources.test = std::make_shared<MockDataset>(seed + 2, sources.vocab_size, a.seq_length);
  }
  return sources;
}

}  // namespace

std::array<int64_t, 3> samples_per_split(const Arguments& a) {
  const int64_t evaluations = a.train_iters / a.eval_interval + 1;
  // As Megatron: --train-samples when given (it names the index cache and sets the epochs), even
  // when it is not a multiple of the global batch.
  int64_t train = a.train_samples > 0 ? a.train_samples : a.train_iters * a.global_batch_size;
  // A ramp-up or step schedule may read past that count (a last batch over --train-samples; with
  // --train-iters Megatron counts micro batch x data-parallel size per iteration): the split holds
  // what the run reads.
  train = std::max(train, batch_size_schedule(a).samples_after(0, a.train_iters));
  return {train, evaluations * a.eval_iters * a.global_batch_size,
          a.eval_iters * a.global_batch_size};
}

absl::StatusOr<DataSources> build_data_sources(const Arguments& a) {
  absl::StatusOr<DataSources> sources = a.data_path.empty() ? build_mock(a) : build_indexed(a);
  // Collective: a missing or damaged file on one rank ends set-up on every rank now, with that
  // rank's message, instead of leaving the others in their first collective until the timeout.
  GPT_RETURN_IF_ERROR(agree_on_setup(sources.status(), "data loading"));
  return sources;
}

}  // namespace gpt
