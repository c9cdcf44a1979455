// How this program stands to each Megatron-LM flag, beyond "same name, same meaning" (the default
// for every flag pretrain_gpt accepts). The source of docs/MEGATRON_FLAGS.md (scripts/
// megatron_flags.py joins it with Megatron's own parser) and of the reason pretrain_gpt prints for
// a Megatron flag it refuses, instead of "unknown option".
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

struct MegatronFlagNote {
  std::string_view flag;
  FlagStatus status;
  // Why: required for refusals; for accepted flags empty means "see the flag's --help".
  std::string_view note;
  // False for refused flags pretrain_gpt does not declare (it refuses them before parsing).
  bool declared = true;
};

// Every flag whose status is not kSame.
std::span<const MegatronFlagNote> megatron_flag_notes();
const MegatronFlagNote* find_megatron_flag_note(std::string_view flag);

// The refusal message for an undeclared refused Megatron flag among `argv` (the first one), or
// nullopt. "--flag=value" spellings count.
std::optional<std::string> undeclared_refused_flag(std::span<const std::string> argv);

}  // namespace gpt
