// A checkpoint's saved arguments (the "--flag canonical-value" lines canonical_arguments writes, or
// the subset ckpt_tool import writes) read back into Arguments and put through the model part of
// pretrain_gpt's own validation (validate_model_arguments and each row's declared constraint): one
// set of rules for a flag typed on the command line, a value an import takes from config.json, and
// a checkpoint generate or the trainer is about to load. A value the flags would refuse (a norm
// epsilon of -1, a RoPE base of 0, a non-finite number, a size that overflows) is refused with one
// line naming the flag.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "train/args/arguments.h"
#include "train/args/flag_table.h"

namespace gpt {

// The saved text as Arguments: each line whose flag has a row sets that row's field (lines of
// flags this program does not know, such as ckpt_tool import's tokenizer ids, are skipped); the
// rest keep their defaults; nothing counts as given. A value that is not of its field's type (or a
// non-finite number) is an error naming the flag.
// `stated` (optional) receives the rows the text gives a value.
absl::StatusOr<Arguments> arguments_from_saved(const std::string& saved,
                                               std::vector<const FlagRow*>* stated = nullptr);

// arguments_from_saved, resolve_defaults, every row's constraint and validate_model_arguments.
absl::Status validate_saved_arguments(const std::string& saved);

}  // namespace gpt
