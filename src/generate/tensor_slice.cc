#include "generate/tensor_slice.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/check.h"

namespace gpt {

int64_t vocab_rows_per_rank(int64_t padded_vocab, int tensor_parallel) {
  return (padded_vocab + tensor_parallel - 1) / tensor_parallel;
}

absl::Status check_tensor_parallel(const ModelConfig& c, int tp) {
  if (tp < 1) return absl::InvalidArgumentError(absl::StrCat("--tensor-model-parallel-size ", tp, " is not positive"));
  auto refuse = [&](int64_t count, const char* what) {
    return absl::InvalidArgumentError(absl::StrCat("--tensor-model-parallel-size ", tp, " does not divide the model's ",
                                                   count, " ", what));
  };
  if (c.num_attention_heads % tp != 0) return refuse(c.num_attention_heads, "attention heads");
  if (c.query_groups() % tp != 0) {
    return refuse(c.query_groups(), "key/value groups (--num-query-groups; each rank holds whole groups)");
  }
  if (c.ffn_hidden_size % tp != 0) return refuse(c.ffn_hidden_size, "FFN width (--ffn-hidden-size)");
  if (c.moe.enabled() && c.moe.ffn_hidden_size % tp != 0) {
    return refuse(c.moe.ffn_hidden_size, "expert FFN width (--moe-ffn-hidden-size)");
  }
  if (c.moe.shared_expert_size % tp != 0) {
    return refuse(c.moe.shared_expert_size, "shared expert width (--moe-shared-expert-intermediate-size)");
  }
  return absl::OkStatus();
}

int64_t ParamSlice::local_numel() const {
  int64_t n = 1;
  for (int64_t d : local_shape) n *= d;
  return n;
}

ParamSlice param_slice(const ParamSpec& spec, const ModelConfig& config, TensorSlice slice) {
  const std::vector<int64_t>& global = spec.global_shape;
  const int64_t tp = slice.size, r = slice.rank;
  const int64_t columns = global.size() > 1 ? global[1] : 1;
  ParamSlice out;
  out.local_shape = global;
  auto rows_box = [&](int64_t first, int64_t count, int64_t local_row) {
    SliceBox box{.offsets = std::vector<int64_t>(global.size(), 0), .shape = global, .local_offset = local_row * columns};
    box.offsets[0] = first;
    box.shape[0] = count;
    out.boxes.push_back(std::move(box));
  };
  switch (spec.split) {
    case TensorSplit::kReplicated:
      rows_box(0, global[0], 0);
      break;
    case TensorSplit::kRows: {
      const bool vocabulary = spec.name == kWordEmbeddingName || spec.name == "output_layer.weight";
      if (vocabulary) {
        const int64_t rows = vocab_rows_per_rank(config.padded_vocab_size, slice.size);
        out.local_shape[0] = rows;
        const int64_t first = r * rows, count = std::min(rows, global[0] - first);
        if (count > 0) rows_box(first, count, 0);
      } else {
        GPT_CHECK_EQ(global[0] % tp, 0) << spec.name << " split over " << tp << " ranks";
        const int64_t rows = global[0] / tp;
        out.local_shape[0] = rows;
        rows_box(r * rows, rows, 0);
      }
      break;
    }
    case TensorSplit::kColumns: {
      GPT_CHECK(global.size() == 2 && global[1] % tp == 0) << spec.name << " split over " << tp << " ranks";
      const int64_t local_columns = global[1] / tp;
      out.local_shape[1] = local_columns;
      out.boxes.push_back({.offsets = {0, r * local_columns}, .shape = {global[0], local_columns}, .local_offset = 0});
      break;
    }
    case TensorSplit::kGatedRows: {
      // [gate; up] globally, [gate_r; up_r] on rank r.
      GPT_CHECK_EQ(global[0] % (2 * tp), 0) << spec.name << " split over " << tp << " ranks";
      const int64_t half = global[0] / 2, rows = half / tp;
      out.local_shape[0] = 2 * rows;
      rows_box(r * rows, rows, 0);
      rows_box(half + r * rows, rows, rows);
      break;
    }
  }
  return out;
}

}  // namespace gpt
