// --moe-layer-freq (Megatron's moe_freq_type): which layers are MoE layers. An int N: every N-th
// layer starting with layer 0 (layer i is MoE when i % N == 0). A Python list expression of 0s and
// 1s, one per layer, built from list literals, `+` (concatenation), `*` with an int (repetition)
// and parentheses, e.g. "([0]*1+[1]*3)*2" -> 0 1 1 1 0 1 1 1. Megatron evaluates the text with
// Python's eval; this reads only that grammar, and bounds every list it builds before building it.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace gpt {

// The pattern for `num_layers` layers; an error says what is wrong with the text (the caller names
// the flag): not an int or such an expression, a value other than 0 or 1, a list whose length is
// not num_layers.
absl::StatusOr<std::vector<bool>> moe_layer_pattern(std::string_view text, int64_t num_layers);

}  // namespace gpt
