// generate/tensor_slice: every parameter's slices over the TP ranks tile the global tensor exactly
// (each element of a split parameter read by one rank once, replicated ones by every rank, vocabulary padding rows past the checkpoint's table left
// zero), the column-parallel QKV holds whole key/value groups, SwiGLU's fc1 is [gate_r; up_r], the
// row-parallel weights split their columns; sizes that do not divide the model are refused.
#include "generate/tensor_slice.h"

#include <vector>

#include "gtest/gtest.h"

namespace gpt {
namespace {

ModelConfig llama_like() {
  ModelConfig c;
  c.num_layers = 1;
  c.hidden_size = 16;
  c.ffn_hidden_size = 24;
  c.num_attention_heads = 8;
  c.num_query_groups = 4;
  c.kv_channels = 2;
  c.max_position_embeddings = 8;
  c.vocab_size = 201;
  c.padded_vocab_size = 201;  // --make-vocab-size-divisible-by 1: not a multiple of the TP size
  c.untie_embeddings_and_output_weights = true;
  c.position_embedding = PositionEmbedding::kRope;
  c.normalization = Normalization::kRMSNorm;
  c.swiglu = true;
  c.add_bias_linear = false;
  return c;
}

// For each global element, how many ranks read it; and the global row-major index of each local
// element (-1 where no box covers it).
void tile(const ParamSpec& spec, const ModelConfig& c, int tp, std::vector<int>& reads,
          std::vector<std::vector<int64_t>>& sources) {
  const int64_t columns = spec.global_shape.size() > 1 ? spec.global_shape[1] : 1;
  reads.assign(static_cast<size_t>(spec.global_numel()), 0);
  sources.assign(static_cast<size_t>(tp), {});
  for (int rank = 0; rank < tp; ++rank) {
    const ParamSlice slice = param_slice(spec, c, TensorSlice{.rank = rank, .size = tp});
    const int64_t local_columns = slice.local_shape.size() > 1 ? slice.local_shape[1] : 1;
    std::vector<int64_t>& source = sources[static_cast<size_t>(rank)];
    source.assign(static_cast<size_t>(slice.local_numel()), -1);
    for (const SliceBox& box : slice.boxes) {
      const int64_t box_columns = box.shape.size() > 1 ? box.shape[1] : 1;
      const int64_t first_column = box.offsets.size() > 1 ? box.offsets[1] : 0;
      for (int64_t r = 0; r < box.shape[0]; ++r) {
        for (int64_t col = 0; col < box_columns; ++col) {
          const int64_t global = (box.offsets[0] + r) * columns + first_column + col;
          ++reads[static_cast<size_t>(global)];
          // Boxes are written contiguously at local_offset (ReadRequest's layout).
          const int64_t local = box.local_offset + r * box_columns + col;
          ASSERT_LT(local, slice.local_numel()) << spec.name;
          EXPECT_EQ(box_columns == local_columns || box.shape.size() == 1, true) << spec.name;
          source[static_cast<size_t>(local)] = global;
        }
      }
    }
  }
}

TEST(TensorSlice, SlicesTileEveryParameter) {
  const ModelConfig c = llama_like();
  for (int tp : {1, 2, 4}) {
    for (const ParamSpec& spec : build_param_specs(c)) {
      std::vector<int> reads;
      std::vector<std::vector<int64_t>> sources;
      tile(spec, c, tp, reads, sources);
      // Split parameters: each element on one rank; replicated ones (norms) on every rank.
      const int want = spec.split == TensorSplit::kReplicated ? tp : 1;
      for (size_t i = 0; i < reads.size(); ++i) ASSERT_EQ(reads[i], want) << spec.name << " element " << i << " TP " << tp;
      int64_t uncovered = 0;
      for (const auto& source : sources) {
        for (int64_t s : source) uncovered += s < 0;
      }
      const bool vocabulary = spec.name == kWordEmbeddingName || spec.name == "output_layer.weight";
      // 201 rows: ceil(201 / 2) = 101 and ceil(201 / 4) = 51 per rank, the last rank's extra rows zero.
      const int64_t padding_rows = vocabulary ? vocab_rows_per_rank(201, tp) * tp - 201 : 0;
      EXPECT_EQ(uncovered, padding_rows * c.hidden_size) << spec.name << " TP " << tp;
    }
  }
}

TEST(TensorSlice, ColumnRowAndGatedLayouts) {
  const ModelConfig c = llama_like();
  const int tp = 2;
  for (const ParamSpec& spec : build_param_specs(c)) {
    std::vector<int> reads;
    std::vector<std::vector<int64_t>> sources;
    tile(spec, c, tp, reads, sources);
    const int64_t h = c.hidden_size;
    if (spec.name == "decoder.layers.0.self_attention.linear_qkv.weight") {
      // [groups, (q + 2) d] rows: rank 1 starts at group 2's first row.
      const int64_t group_rows = (c.queries_per_group() + 2) * c.kv_channels;
      EXPECT_EQ(sources[1][0], 2 * group_rows * h);
      EXPECT_EQ(static_cast<int64_t>(sources[1].size()), c.qkv_size() / tp * h);
    } else if (spec.name == "decoder.layers.0.mlp.linear_fc1.weight") {
      // Rank 1: gate rows 12..23, then up rows 24 + 12 .. 24 + 23.
      EXPECT_EQ(sources[1][0], 12 * h);
      EXPECT_EQ(sources[1][12 * h], (24 + 12) * h);
    } else if (spec.name == "decoder.layers.0.mlp.linear_fc2.weight") {
      // [h, ffn]: rank 1 holds columns 12..23 of every row.
      EXPECT_EQ(sources[1][0], 12);
      EXPECT_EQ(sources[1][12], 24 + 12);
    }
  }
}

TEST(TensorSlice, SizesThatDoNotDivideAreRefused) {
  const ModelConfig c = llama_like();
  EXPECT_TRUE(check_tensor_parallel(c, 4).ok());
  const absl::Status groups = check_tensor_parallel(c, 8);  // 8 heads, 4 groups
  EXPECT_FALSE(groups.ok());
  EXPECT_NE(std::string(groups.message()).find("4 key/value groups"), std::string::npos) << groups.message();
  ModelConfig odd_ffn = c;
  odd_ffn.ffn_hidden_size = 25;
  EXPECT_NE(std::string(check_tensor_parallel(odd_ffn, 2).message()).find("FFN"), std::string::npos);
  EXPECT_FALSE(check_tensor_parallel(c, 3).ok());
}

}  // namespace
}  // namespace gpt
