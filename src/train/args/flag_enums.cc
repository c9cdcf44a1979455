#include "train/args/flag_enums.h"

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "train/args/flag_table.h"

namespace gpt {
namespace {

template <typename E>
E checked_enum(const std::string& text, ArgumentField field) {
  const std::optional<E> value = parse_flag_enum<E>(text);
  GPT_CHECK(value.has_value()) << flag_name(field) << " '" << text << "' was not validated";
  return *value;
}

}  // namespace

std::string names_for_message(std::span<const std::string_view> names) {
  std::vector<std::string_view> shown;
  for (std::string_view name : names) {
    if (!name.empty()) shown.push_back(name);
  }
  std::string out;
  for (size_t i = 0; i < shown.size(); ++i) {
    if (i > 0) out += i + 1 == shown.size() ? " or " : ", ";
    out += shown[i];
  }
  return out;
}

std::vector<ContextCommType> cp_comm_types(const Arguments& a) {
  std::vector<ContextCommType> types;
  for (const std::string& type : a.cp_comm_type) {
    types.push_back(checked_enum<ContextCommType>(type, &Arguments::cp_comm_type));
  }
  return types;
}

bool uses_cp_comm_type(const Arguments& a, ContextCommType type) {
  for (const std::string& text : a.cp_comm_type) {
    if (parse_flag_enum<ContextCommType>(text) == type) return true;
  }
  return false;
}

PositionEmbedding position_embedding(const Arguments& a) {
  return checked_enum<PositionEmbedding>(a.position_embedding_type, &Arguments::position_embedding_type);
}
Normalization normalization(const Arguments& a) {
  return checked_enum<Normalization>(a.normalization, &Arguments::normalization);
}
RecomputeGranularity recompute_granularity(const Arguments& a) {
  return checked_enum<RecomputeGranularity>(a.recompute_granularity, &Arguments::recompute_granularity);
}
RecomputeMethod recompute_method(const Arguments& a) {
  return checked_enum<RecomputeMethod>(a.recompute_method, &Arguments::recompute_method);
}
AttentionBackend attention_backend(const Arguments& a) {
  return checked_enum<AttentionBackend>(a.attention_backend, &Arguments::attention_backend);
}
ShardingStrategy sharding_strategy(const Arguments& a) {
  return checked_enum<ShardingStrategy>(a.data_parallel_sharding_strategy, &Arguments::data_parallel_sharding_strategy);
}
RerunMode rerun_mode(const Arguments& a) { return checked_enum<RerunMode>(a.rerun_mode, &Arguments::rerun_mode); }
PipelineScheduleFlag pipeline_schedule_flag(const Arguments& a) {
  return parse_flag_enum<PipelineScheduleFlag>(a.pipeline_schedule).value_or(PipelineScheduleFlag::kDefault);
}
LrDecayStyle lr_decay_style(const Arguments& a) {
  return checked_enum<LrDecayStyle>(a.lr_decay_style, &Arguments::lr_decay_style);
}

RouterScore router_score(const Arguments& a) {
  return checked_enum<RouterScore>(a.moe_router_score_function, &Arguments::moe_router_score_function);
}

TokenDropPolicy token_drop_policy(const Arguments& a) {
  return checked_enum<TokenDropPolicy>(a.moe_token_drop_policy, &Arguments::moe_token_drop_policy);
}

TokenDispatcher token_dispatcher(const Arguments& a) {
  return checked_enum<TokenDispatcher>(a.moe_token_dispatcher_type, &Arguments::moe_token_dispatcher_type);
}

RouterDtype router_dtype(const Arguments& a) {
  return checked_enum<RouterDtype>(a.moe_router_dtype, &Arguments::moe_router_dtype);
}

std::vector<LoadBalancing> load_balancing_types(const Arguments& a) {
  std::vector<LoadBalancing> types;
  for (const std::string& type : a.moe_router_load_balancing_type) {
    types.push_back(checked_enum<LoadBalancing>(type, &Arguments::moe_router_load_balancing_type));
  }
  return types;
}

}  // namespace gpt
