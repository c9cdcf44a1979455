// How the decoder's layers are split over the pipeline's virtual stages, with Megatron's flags:
// evenly (--num-layers / (p x v) each), with --decoder-first-pipeline-num-layers /
// --decoder-last-pipeline-num-layers (the first / last pipeline rank gets that many, the other
// ranks the rest evenly), or with --account-for-embedding-in-pipeline-split /
// --account-for-loss-in-pipeline-split (the embedding / the loss counted as one layer of the
// first / last virtual stage, which then builds one transformer layer fewer). Megatron's
// get_num_layers_to_build and get_transformer_layer_offset; the pipeline layout, the memory plan
// and the schedule costs all take their layer ranges from here.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "train/args/arguments.h"

namespace gpt {

// Any of the four flags: the split is not --num-layers / (p x v) per virtual stage.
bool custom_pipeline_split(const Arguments& args);

// --num-layers plus the embedding and the loss where they count as layers: what
// --num-layers-per-virtual-pipeline-stage divides (Megatron's arguments.py).
int64_t pipeline_split_layers(const Arguments& args);

// validate_for_world's part where custom_pipeline_split: Megatron's rules (TransformerConfig's and
// arguments.py's, the chunks per rank included), each refusal naming the flags to change.
absl::Status validate_pipeline_split(const Arguments& args);

// The layers of each pipeline rank (p entries) as Megatron's num_layers_per_pipeline_rank: the
// embedding and the loss included where they count as layers. Rank r's chunks split them evenly.
std::vector<int64_t> pipeline_rank_layers(const Arguments& args);

// The transformer layers of each virtual stage s = c x p + r (chunk c of pipeline rank r; p x v
// entries, possibly 0 where the embedding or the loss takes a stage's only layer). For validated
// arguments; their sum is --num-layers.
std::vector<int64_t> virtual_stage_layers(const Arguments& args);

}  // namespace gpt
