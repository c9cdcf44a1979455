// Validation of the mixture-of-experts flags (Megatron's moe group, train/args/flag_rows_moe.cc),
// with Megatron's rules (megatron/training/arguments.py, TransformerConfig.__post_init__) and this
// program's refusals of what it has not built, each naming the flag.
#pragma once

#include <vector>

#include "core/status.h"
#include "train/args/arguments.h"

namespace gpt {

absl::Status validate_moe_arguments(const Arguments& args);

// --moe-aux-loss-coeff's values, one per --moe-router-load-balancing-type (a single value applies
// to a single type), each finite and >= 0.
absl::StatusOr<std::vector<double>> moe_aux_loss_coefficients(const Arguments& args);

}  // namespace gpt
