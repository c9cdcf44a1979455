// How this program stands to each Megatron-LM flag, beyond "same name, same meaning" (the default
// for every flag pretrain_gpt accepts): the statuses a flag's row (train/flag_table.h) names, and
// the Megatron flags refused without a row. With the rows, the source of docs/MEGATRON_FLAGS.md
// (scripts/megatron_flags.py joins them with Megatron's own parser) and of the reason pretrain_gpt
// prints for a Megatron flag it refuses, instead of "unknown option".
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace gpt {

enum class FlagStatus {
  kSame,             // accepted, Megatron's meaning
  kImplementation,   // accepted; an implementation choice whose meaning here its help says
  kRefusedAtValues,  // accepted; some values (or combinations) are refused with a reason
  kRefused,          // refused with a reason (declared, so --help lists it, or not)
  kOwn,              // this program's flag, not Megatron's
};

std::string_view flag_status_name(FlagStatus status);

// A Megatron-LM flag pretrain_gpt refuses without declaring it (it is refused before parsing,
// with the reason, instead of "unknown option"). The flags it declares carry their status in their
// row of the flag table (train/flag_rows_*.cc).
struct RefusedMegatronFlag {
  std::string_view flag;
  std::string_view reason;
};

std::span<const RefusedMegatronFlag> undeclared_refused_megatron_flags();

// The refusal message for an undeclared refused Megatron flag among `argv` (the first one), or
// nullopt. "--flag=value" spellings count.
std::optional<std::string> undeclared_refused_flag(std::span<const std::string> argv);

}  // namespace gpt
