// The shard plan (model/shard_plan.h) over a table of layouts: TP 1/2/4 x DP 1/2/4 x FP32/BF16,
// with and without the distributed optimizer, one bucket or many, both model families. For each:
// parameters placed once each, 64-aligned, in reverse order of first use; buckets tiling the flat
// buffers (padded to lcm(DP, 128) when sharded); every bucket's shards partitioning it over the DP
// ranks; and, over all TP x DP ranks, the owned ranges' global rectangles covering every element of
// every global tensor exactly once (TP duplicates excluded), each rectangle's elements checked
// against an independent element-by-element mapping of the TP split. The store and the optimizer
// built from a plan take exactly the bytes the plan says.
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "core/arena.h"
#include "gtest/gtest.h"
#include "support/tiny_model.h"
#include "model/param_store.h"
#include "optim/adamw.h"

namespace gpt {
namespace {

ModelConfig model(bool llama) {
  const ModelConfig c = testing_support::tiny_model(2, 6, /*pad_tp=*/4);
  return llama ? testing_support::llama_style(c, /*query_groups=*/4) : c;
}

// Local element (r, c) of a TP slice -> its global (row, column), written from the split rules
// alone (param_registry.h), independently of the plan's row blocks.
std::pair<int64_t, int64_t> global_of(const ParamSpec& spec, int tp_rank, int tp, int64_t r, int64_t c) {
  const int64_t rows = spec.global_shape[0];
  const int64_t cols = spec.global_shape.size() == 2 ? spec.global_shape[1] : 1;
  switch (spec.split) {
    case TensorSplit::kReplicated: return {r, c};
    case TensorSplit::kRows: return {tp_rank * (rows / tp) + r, c};
    case TensorSplit::kColumns: return {r, tp_rank * (cols / tp) + c};
    case TensorSplit::kGatedRows: {
      const int64_t half = rows / (2 * tp);
      return {r < half ? tp_rank * half + r : rows / 2 + tp_rank * half + (r - half), c};
    }
  }
  return {-1, -1};
}

struct Case {
  int tp, dp;
  DType dtype;
  bool distributed, llama;
  int64_t bucket_size;
};

std::string describe(const Case& c) {
  return "tp" + std::to_string(c.tp) + " dp" + std::to_string(c.dp) + (c.dtype == DType::kFloat32 ? " fp32" : " bf16") +
         (c.distributed ? " zero1" : "") + (c.llama ? " llama" : " gpt") + " bucket " + std::to_string(c.bucket_size);
}

TEST(ShardPlan, TableOfLayouts) {
  std::vector<Case> cases;
  for (int tp : {1, 2, 4}) {
    for (int dp : {1, 2, 4}) {
      for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
        for (bool distributed : {false, true}) {
          for (bool llama : {false, true}) {
            for (int64_t bucket : {int64_t{0}, int64_t{300}}) cases.push_back({tp, dp, dtype, distributed, llama, bucket});
          }
        }
      }
    }
  }
  Context ctx = Context::cpu(1);
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c));
    const std::vector<ParamSpec> specs = build_param_specs(model(c.llama));
    // [parameter name][global element] -> how many ranks own it (counted replicas only).
    std::map<std::string, std::vector<int>> owners;
    for (const ParamSpec& spec : specs) {
      int64_t n = 1;
      for (int64_t d : spec.global_shape) n *= d;
      owners[spec.name].assign(static_cast<size_t>(n), 0);
    }
    for (int tp_rank = 0; tp_rank < c.tp; ++tp_rank) {
      std::vector<int> bucket_owner;  // per flat element, which DP rank's shard holds it
      for (int dp_rank = 0; dp_rank < c.dp; ++dp_rank) {
        const ShardPlanConfig config{.tensor_parallel_rank = tp_rank,
                                     .tensor_parallel_size = c.tp,
                                     .data_parallel_rank = dp_rank,
                                     .data_parallel_size = c.dp,
                                     .distributed_optimizer = c.distributed,
                                     .bucket_size = c.bucket_size,
                                     .own_bucket = {kWordEmbeddingName}};
        const ShardPlan plan(specs, config);
        // Placement: every spec once, reverse order, 64-aligned, disjoint and increasing.
        ASSERT_EQ(plan.params().size(), specs.size());
        int64_t end = 0, used = 0;
        for (size_t i = 0; i < plan.params().size(); ++i) {
          const ParamPlacement& p = plan.params()[i];
          EXPECT_EQ(p.spec->name, specs[specs.size() - 1 - i].name);
          EXPECT_EQ(p.flat_offset % 64, 0) << p.spec->name;
          EXPECT_GE(p.flat_offset, end) << p.spec->name;
          end = p.flat_offset + p.numel();
          used += p.numel();
          const BucketPlan& bucket = plan.buckets()[static_cast<size_t>(p.bucket)];
          EXPECT_TRUE(p.range().intersect(bucket.range) == p.range()) << p.spec->name << " outside its bucket";
        }
        EXPECT_EQ(plan.padding_elements(), plan.flat_elements() - used);
        // Buckets tile the buffers; the word embedding is alone in its bucket; padding when sharded.
        int64_t next = 0;
        for (const BucketPlan& bucket : plan.buckets()) {
          EXPECT_EQ(bucket.range.begin, next);
          next = bucket.range.end;
          if (c.distributed && c.dp > 1) EXPECT_EQ(bucket.range.size() % std::lcm(c.dp, 128), 0);
          for (size_t i : bucket.params) {
            if (plan.params()[i].spec->name == kWordEmbeddingName) EXPECT_EQ(bucket.params.size(), 1u);
          }
          if (c.bucket_size == 0) EXPECT_LE(plan.buckets().size(), 3u);  // [output], [embedding], [rest]
        }
        EXPECT_EQ(next, plan.flat_elements());
        // Shards: over the DP ranks, each flat element in exactly one (every rank: all of them).
        bucket_owner.resize(static_cast<size_t>(plan.flat_elements()), -1);
        for (const Range& owned : plan.owned()) {
          for (int64_t i = owned.begin; i < owned.end; ++i) {
            if (!c.distributed) continue;
            EXPECT_EQ(bucket_owner[static_cast<size_t>(i)], -1) << "element " << i << " in two shards";
            bucket_owner[static_cast<size_t>(i)] = dp_rank;
          }
        }
        if (!c.distributed) EXPECT_EQ(plan.owned(), (std::vector<Range>{{0, plan.flat_elements()}}));
        // Global coverage of the counted replicas, through the plan's rectangles.
        for (const Range& owned : plan.owned()) {
          for (const ParamPlacement& p : plan.params()) {
            const Range mine = p.range().intersect(owned);
            if (mine.empty()) continue;
            const int64_t cols = p.spec->global_shape.size() == 2 ? p.spec->global_shape[1] : 1;
            const int64_t local_cols = p.slice.local_shape.rank() == 2 ? p.slice.local_shape[1] : 1;
            int64_t covered = 0;
            for (const GlobalRectangle& rect : plan.global_rectangles(p, mine)) {
              covered += rect.numel();
              const int64_t rect_cols = rect.counts.size() == 2 ? rect.counts[1] : 1;
              for (int64_t k = 0; k < rect.numel(); ++k) {
                // The k-th element of the rectangle, row-major, and where the plan says it sits.
                const int64_t row = rect.offsets[0] + k / rect_cols;
                const int64_t col = (rect.offsets.size() == 2 ? rect.offsets[1] : 0) + k % rect_cols;
                const int64_t local = rect.flat_begin + k - p.flat_offset;
                const auto expected = global_of(*p.spec, tp_rank, c.tp, local / local_cols, local % local_cols);
                ASSERT_EQ(std::make_pair(row, col), expected) << p.spec->name << " local element " << local;
                if (p.counts_in_grad_norm && (c.distributed || dp_rank == 0)) {
                  ++owners[p.spec->name][static_cast<size_t>(row * cols + col)];
                }
              }
            }
            EXPECT_EQ(covered, mine.size()) << p.spec->name;
          }
        }
        // The store and the optimizer take what the plan says.
        Arena arena(Device::kCpu, "plan");
        const int64_t flat = plan.flat_elements();
        std::vector<Range> owned = plan.owned();
        int64_t owned_elements = 0;
        for (const Range& r : owned) owned_elements += r.size();
        ParamStore store(ShardPlan(specs, config), c.dtype, arena);
        EXPECT_EQ(store.flat_values().numel(), flat);
        EXPECT_EQ(store.flat_grads().numel(), flat);
        const int64_t store_bytes = static_cast<int64_t>(arena.used_bytes());
        EXPECT_EQ(store_bytes, Arena::aligned_bytes(c.dtype, Shape({flat})) + Arena::aligned_bytes(DType::kFloat32, Shape({flat})));
        AdamW adam(ctx, store, {}, arena, owned);
        const int64_t state_arrays = c.dtype == DType::kFloat32 ? 2 : 3;  // moments (+ master weights)
        EXPECT_EQ(static_cast<int64_t>(arena.used_bytes()) - store_bytes,
                  state_arrays * Arena::aligned_bytes(DType::kFloat32, Shape({owned_elements})));
      }
      if (c.distributed) {
        for (int who : bucket_owner) EXPECT_GE(who, 0) << "a flat element in no shard";
      }
    }
    for (const auto& [name, counts] : owners) {
      for (size_t i = 0; i < counts.size(); ++i) {
        ASSERT_EQ(counts[i], 1) << name << " global element " << i << " owned " << counts[i] << " times";
      }
    }
  }
}

// Megatron-FSDP's units: a bucket never splits a unit (a layer, the embedding, the output layer),
// alone every unit is its own bucket (the word embedding alone too when named), merged units reach
// the suggested size; ZeRO-2's store holds the shards only, and grads_in finds every shard's
// elements in them.
TEST(ShardPlan, UnitBucketsAndGradientShards) {
  const std::vector<ParamSpec> specs = build_param_specs(model(false));
  std::set<std::string> units;
  for (const ParamSpec& spec : specs) units.insert(param_unit(spec.name));
  EXPECT_EQ(units, (std::set<std::string>{"embedding", "layer 0", "layer 1", "output"}));
  EXPECT_EQ(param_unit("decoder.layers.12.mlp.linear_fc1.weight"), "layer 12");
  Context ctx = Context::cpu(1);
  for (int64_t suggested : {int64_t{0}, int64_t{1}, int64_t{5000}, int64_t{1} << 40}) {
    for (int dp : {1, 2, 4}) {
      SCOPED_TRACE("unit size " + std::to_string(suggested) + " dp " + std::to_string(dp));
      const ShardPlanConfig config{.data_parallel_rank = dp - 1,
                                   .data_parallel_size = dp,
                                   .distributed_optimizer = true,
                                   .bucket_size = suggested,
                                   .own_bucket = {kWordEmbeddingName},
                                   .unit_buckets = true,
                                   .shard_gradients = true};
      const ShardPlan plan(specs, config);
      std::map<std::string, std::set<int>> buckets_of_unit;
      for (const ParamPlacement& p : plan.params()) buckets_of_unit[param_unit(p.spec->name)].insert(p.bucket);
      for (const auto& [unit, buckets] : buckets_of_unit) {
        // Only the embedding unit is split, by the word embedding's own bucket.
        EXPECT_EQ(buckets.size(), unit == "embedding" ? 2u : 1u) << unit;
      }
      for (size_t b = 0; b + 1 < plan.buckets().size(); ++b) {
        const BucketPlan& bucket = plan.buckets()[b];
        int64_t used = 0;
        for (size_t i : bucket.params) used += plan.params()[i].numel();
        const bool alone =
            bucket.params.size() == 1 && plan.params()[bucket.params[0]].spec->name == kWordEmbeddingName;
        const bool before_alone = plan.buckets()[b + 1].params.size() == 1 &&
                                  plan.params()[plan.buckets()[b + 1].params[0]].spec->name == kWordEmbeddingName;
        if (!alone && !before_alone) EXPECT_GE(bucket.range.size(), suggested) << "bucket " << b << " closed early";
      }
      if (suggested <= 1) EXPECT_EQ(plan.buckets().size(), 5u);  // output, 2 layers, position, word
      if (suggested == int64_t{1} << 40) EXPECT_EQ(plan.buckets().size(), 2u);  // [output, layers, position], [word]
      EXPECT_EQ(plan.sharded_gradients(), dp > 1);
      Arena arena(Device::kCpu, "plan");
      ParamStore store(ShardPlan(specs, config), DType::kFloat32, arena);
      int64_t shards = 0;
      for (const Range& r : plan.owned()) shards += r.size();
      EXPECT_EQ(shards * dp, plan.flat_elements());
      EXPECT_EQ(static_cast<int64_t>(arena.used_bytes()), ParamStore::bytes(plan, DType::kFloat32));
      EXPECT_EQ(store.gradient_storage().numel(), dp > 1 ? shards : plan.flat_elements());
      // Every shard's elements, in order, one after another in the storage.
      int64_t next = 0;
      for (const Range& r : plan.owned()) {
        const Tensor piece = store.grads_in(r);
        EXPECT_EQ(piece.data_as<float>(), store.gradient_storage().data_as<float>() + (dp > 1 ? next : r.begin));
        next += r.size();
      }
      for (const Param& param : store.params()) EXPECT_EQ(param.grad.defined(), dp == 1) << param.name();
    }
  }
}

// ZeRO-3: each data-parallel rank's store holds its shards of the values only; initialised, the
// shards of all ranks put together are the unsharded store's values bit for bit, and the
// checkpoint pieces of all ranks cover every element of every parameter exactly once, with the
// values the unsharded store holds there.
TEST(ShardPlan, ParameterShardsAssembleTheWholeModel) {
  const std::vector<ParamSpec> specs = build_param_specs(model(false));
  Arena whole_arena(Device::kCpu, "whole");
  ParamStore whole(ShardPlan(specs, {}), DType::kFloat32, whole_arena);
  whole.initialize(7);
  for (int dp : {2, 4}) {
    SCOPED_TRACE("dp " + std::to_string(dp));
    std::map<std::string, std::vector<int>> covered;  // parameter -> times each global element was written
    for (int rank = 0; rank < dp; ++rank) {
      const ShardPlanConfig config{.data_parallel_rank = rank,
                                   .data_parallel_size = dp,
                                   .distributed_optimizer = true,
                                   .own_bucket = {kWordEmbeddingName},
                                   .unit_buckets = true,
                                   .shard_gradients = true,
                                   .shard_parameters = true};
      Arena arena(Device::kCpu, "zero3");
      ParamStore store(ShardPlan(specs, config), DType::kFloat32, arena);
      ASSERT_TRUE(store.sharded_parameters());
      EXPECT_EQ(static_cast<int64_t>(arena.used_bytes()), ParamStore::bytes(store.plan(), DType::kFloat32));
      EXPECT_EQ(store.value_storage().numel() * dp, store.plan().flat_elements());
      for (const Param& param : store.params()) EXPECT_FALSE(param.value.defined()) << param.name();
      store.initialize(7);
      for (const ShardedTensor& piece : store.sharded_tensors()) {
        EXPECT_FALSE(piece.replicated_over_data_parallel);
        const Param& reference = whole.get(piece.key.substr(6));
        const int64_t cols = piece.global_shape.size() == 2 ? piece.global_shape[1] : 1;
        const int64_t rows = piece.local_shape[0], width = piece.local_shape.size() == 2 ? piece.local_shape[1] : 1;
        std::vector<int>& count = covered[piece.key];
        count.resize(static_cast<size_t>(reference.numel()));
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < width; ++c) {
            const int64_t global = (piece.offsets[0] + r) * cols + (piece.offsets.size() == 2 ? piece.offsets[1] : 0) + c;
            ++count[static_cast<size_t>(global)];
            ASSERT_EQ(piece.data.data_as<float>()[r * width + c], reference.value.data_as<float>()[global])
                << piece.key << " element " << global << " on rank " << rank;
          }
        }
      }
    }
    for (const Param& param : whole.params()) {
      const std::vector<int>& count = covered["model/" + param.name()];
      ASSERT_EQ(count.size(), static_cast<size_t>(param.numel())) << param.name();
      for (size_t i = 0; i < count.size(); ++i) ASSERT_EQ(count[i], 1) << param.name() << " element " << i;
    }
  }
}

}  // namespace
}  // namespace gpt
