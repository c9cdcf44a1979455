// ckpt_tool's Hugging Face commands (src/hf/hf_checkpoint.h), kept out of ckpt_tool.cc:
//
//   ckpt_tool export CHECKPOINT --output-dir DIR [--max-shard-size BYTES]   config.json + safetensors
//   ckpt_tool import HF_DIR --output SAVE_DIR [--make-vocab-size-divisible-by N]
//                                             [--tensor-model-parallel-size T]
#pragma once

#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "core/status.h"
#include "hf/hf_checkpoint.h"
#include "train/args/numeric_flags.h"
#include "train/args/saved_arguments.h"

namespace gpt {

class HfCommands {
 public:
  // Adds --output-dir and --max-shard-size to `export_` (whose --output it makes optional) and the
  // import subcommand to `app`.
  HfCommands(CLI::App& app, CLI::App* export_, CLI::Option* export_output) : export_(export_) {
    // What an import writes and an export reads passes pretrain_gpt's own checks.
    import_options_.check_arguments = validate_saved_arguments;
    export_options_.check_arguments = validate_saved_arguments;
    export_output->required(false);
    CLI::Option* dir = export_->add_option("--output-dir", output_dir_,
                                           "Write a Hugging Face model directory instead (config.json and safetensors, "
                                           "GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM, MixtralForCausalLM or Qwen3MoeForCausalLM, with the tokenizer; sharded with an index above "
                                           "--max-shard-size)");
    dir->excludes(export_output);
    export_->add_option("--max-shard-size", export_options_.max_shard_bytes,
                        "With --output-dir: bytes per safetensors file (default 5 GiB)")
        ->transform(decimal_integer(1));
    import_ = app.add_subcommand("import", "Turn a Hugging Face GPT-2, Llama, Qwen2, Mixtral or Qwen3-MoE directory (config.json, safetensors, tokenizer) into "
                                           "a checkpoint of this program (iteration 0; load with --load DIR --finetune)");
    import_->add_option("HF_DIR", hf_dir_, "Hugging Face model directory")->required();
    import_->add_option("--output,-o", save_dir_, "The save directory to create")->required();
    import_->add_option("--make-vocab-size-divisible-by", import_options_.make_vocab_size_divisible_by,
                        "Pad the vocabulary as pretrain_gpt will (default 128)")->transform(decimal_integer(1));
    import_->add_option("--tensor-model-parallel-size", import_options_.tensor_parallel,
                        "... for this TP size (the padding is a multiple of both; default 1)")->transform(decimal_integer(1));
  }

  // The status of the command when it is one of these, nullopt otherwise.
  std::optional<absl::Status> run(const std::string& checkpoint, std::optional<int64_t> iteration,
                                  std::optional<int64_t> vocab_size, const std::string& output) {
    if (*import_) return hf_import(hf_dir_, save_dir_, import_options_);
    if (!*export_) return std::nullopt;
    if (output_dir_.empty()) {
      if (output.empty()) return absl::InvalidArgumentError("export needs --output FILE or --output-dir DIR");
      return std::nullopt;
    }
    export_options_.iteration = iteration;
    export_options_.vocab_size = vocab_size;
    return hf_export(checkpoint, output_dir_, export_options_);
  }

 private:
  CLI::App* export_;
  CLI::App* import_ = nullptr;
  std::string output_dir_, hf_dir_, save_dir_;
  HfExportOptions export_options_;
  HfImportOptions import_options_;
};

}  // namespace gpt
