#include "generate/checkpoint_moe.h"

#include "model/param_registry.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "train/args/moe_layer_pattern.h"

namespace gpt {
namespace {

absl::Status malformed(const std::string& flag, const std::string& value, const std::string& why) {
  return absl::DataLossError(
      absl::StrCat("the checkpoint's saved arguments have ", flag, " '", value, "': ", why));
}

// A saved flag's text, or `fallback` when the saving run predates the flag.
std::string text(const std::map<std::string, std::string>& args, const std::string& flag, const std::string& fallback) {
  auto it = args.find(flag);
  return it == args.end() ? fallback : it->second;
}

absl::StatusOr<int64_t> integer(const std::map<std::string, std::string>& args, const std::string& flag,
                                int64_t fallback) {
  const std::string value = text(args, flag, std::to_string(fallback));
  int64_t n = 0;
  if (!absl::SimpleAtoi(value, &n) || n < 0) return malformed(flag, value, "not a non-negative integer");
  return n;
}

absl::StatusOr<double> number(const std::map<std::string, std::string>& args, const std::string& flag,
                              double fallback) {
  const std::string value = text(args, flag, absl::StrCat(fallback));
  double x = 0;
  if (!absl::SimpleAtod(value, &x)) return malformed(flag, value, "not a number");
  return x;
}

bool flag_true(const std::map<std::string, std::string>& args, const std::string& flag) {
  return text(args, flag, "false") == "true";
}

// A saved list flag's items (a list is saved as its items, each quoted or not, space-separated).
std::vector<std::string> items(const std::map<std::string, std::string>& args, const std::string& flag,
                               const std::string& fallback) {
  std::vector<std::string> out;
  for (absl::string_view item : absl::StrSplit(text(args, flag, fallback), ' ', absl::SkipWhitespace())) {
    absl::ConsumePrefix(&item, "'");
    absl::ConsumeSuffix(&item, "'");
    out.emplace_back(item);
  }
  return out;
}

// The auxiliary losses with their coefficients (what ckpt_tool export turns into Hugging Face's
// router_aux_loss_coef); z-loss and sinkhorn aside. Empty when the lists do not pair up.
std::vector<MoeLoss> saved_losses(const std::map<std::string, std::string>& args) {
  const std::vector<std::string> types = items(args, "--moe-router-load-balancing-type", "aux_loss");
  const std::vector<std::string> coefficients = items(args, "--moe-aux-loss-coeff", "0");
  std::vector<MoeLoss> losses;
  if (coefficients.size() != types.size() && coefficients.size() != 1) return losses;
  for (size_t i = 0; i < types.size(); ++i) {
    double value = 0;
    if (!absl::SimpleAtod(coefficients[coefficients.size() == 1 ? 0 : i], &value)) return {};
    if (types[i] == "aux_loss") losses.push_back({.type = LoadBalancing::kAuxLoss, .coefficient = value});
    if (types[i] == "seq_aux_loss") losses.push_back({.type = LoadBalancing::kSeqAuxLoss, .coefficient = value});
    if (types[i] == "global_aux_loss") losses.push_back({.type = LoadBalancing::kGlobalAuxLoss, .coefficient = value});
  }
  return losses;
}

}  // namespace

absl::StatusOr<MoeConfig> saved_moe_config(const std::map<std::string, std::string>& args, int64_t num_layers,
                                           int64_t ffn_hidden_size) {
  MoeConfig m;
  GPT_ASSIGN_OR_RETURN(m.num_experts, integer(args, "--num-experts", 0));
  if (m.num_experts == 0) return m;
  GPT_ASSIGN_OR_RETURN(const int64_t ffn, integer(args, "--moe-ffn-hidden-size", 0));
  m.ffn_hidden_size = ffn > 0 ? ffn : ffn_hidden_size;  // Megatron's default: --ffn-hidden-size
  const std::string freq = text(args, "--moe-layer-freq", "1");
  absl::StatusOr<std::vector<bool>> pattern = moe_layer_pattern(freq, num_layers);
  if (!pattern.ok()) return malformed("--moe-layer-freq", freq, std::string(pattern.status().message()));
  m.moe_layers = *std::move(pattern);
  GPT_ASSIGN_OR_RETURN(m.shared_expert_size, integer(args, "--moe-shared-expert-intermediate-size", 0));
  GPT_ASSIGN_OR_RETURN(m.topk, integer(args, "--moe-router-topk", 2));
  const std::string score = text(args, "--moe-router-score-function", "softmax");
  if (score != "softmax" && score != "sigmoid") return malformed("--moe-router-score-function", score, "not softmax or sigmoid");
  m.score = score == "sigmoid" ? RouterScore::kSigmoid : RouterScore::kSoftmax;
  m.pre_softmax = flag_true(args, "--moe-router-pre-softmax");
  GPT_ASSIGN_OR_RETURN(const double scaling, number(args, "--moe-router-topk-scaling-factor", 0.0));
  m.topk_scaling_factor = scaling > 0 ? scaling : 1.0;  // 0 / None: no scaling
  const std::string dtype = text(args, "--moe-router-dtype", "");
  if (dtype == "fp64") return malformed("--moe-router-dtype", dtype, "this program's router runs in FP32");
  GPT_ASSIGN_OR_RETURN(m.num_groups, integer(args, "--moe-router-num-groups", 0));
  GPT_ASSIGN_OR_RETURN(m.group_topk, integer(args, "--moe-router-group-topk", 0));
  m.expert_bias = flag_true(args, "--moe-router-enable-expert-bias");
  GPT_ASSIGN_OR_RETURN(m.capacity_factor, number(args, "--moe-expert-capacity-factor", -1.0));
  m.losses = saved_losses(args);
  // Megatron routes by sinkhorn only when it is the one type; in evaluation, the top-k of its weights.
  m.sinkhorn = items(args, "--moe-router-load-balancing-type", "aux_loss") == std::vector<std::string>{"sinkhorn"};
  GPT_ASSIGN_OR_RETURN(m.z_loss_coeff, number(args, "--moe-z-loss-coeff", 0.0));
  // What pretrain_gpt's validation guarantees; checked again so that a damaged file stops here.
  if (m.topk < 1 || m.topk > m.num_experts) {
    return malformed("--moe-router-topk", std::to_string(m.topk), absl::StrCat("not in [1, ", m.num_experts, "] experts"));
  }
  if (m.group_topk > 0 && (m.num_groups < 1 || m.num_experts % m.num_groups != 0 || m.group_topk > m.num_groups ||
                           m.group_topk * (m.num_experts / m.num_groups) < m.topk)) {
    return malformed("--moe-router-group-topk", std::to_string(m.group_topk),
                     absl::StrCat("does not fit --moe-router-num-groups ", m.num_groups, " of ", m.num_experts, " experts"));
  }
  if (m.ffn_hidden_size < 1) return malformed("--moe-ffn-hidden-size", std::to_string(ffn), "no expert width");
  return m;
}

absl::Status read_expert_biases(CheckpointReader& reader, const ModelConfig& c,
                                std::map<std::string, std::vector<float>>& params) {
  if (!c.moe.expert_bias) return absl::OkStatus();
  const int64_t experts = c.moe.num_experts;
  std::vector<CheckpointReader::ReadRequest> requests;
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    if (!c.moe.is_moe_layer(layer)) continue;
    const std::string name = expert_bias_name(layer), key = "model/" + name;
    std::vector<float>& values = params[name];
    values.assign(static_cast<size_t>(experts), 0.0f);
    if (!reader.contains(key)) continue;
    if (reader.global_shape(key) != std::vector<int64_t>{experts}) {
      return absl::DataLossError(absl::StrCat("checkpoint ", reader.directory(), ": tensor '", key,
                                              "' is not [", experts, "] (--num-experts)"));
    }
    requests.push_back({.key = key, .global_shape = {experts}, .offsets = {0}, .shape = {experts},
                        .dtype = DType::kFloat32, .out = values.data()});
  }
  return requests.empty() ? absl::OkStatus() : reader.read_many(requests);
}

}  // namespace gpt
