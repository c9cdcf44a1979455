#include "train/data_parallel/gradient_sums.h"

#include <numeric>

#include "core/check.h"
#include "kernels/ops.h"

namespace gpt {

bool summed_over_tensor_parallel(const ParamSpec& spec, const TensorParallel& tp) {
  return spec.summed_over_tensor_parallel(tp.size(), tp.sequence_parallel());
}

std::vector<const Param*> tensor_parallel_summed(const ParamStore& params, const TensorParallel& tp) {
  std::vector<const Param*> summed;
  for (const Param& param : params.params()) {
    if (summed_over_tensor_parallel(*param.spec, tp)) summed.push_back(&param);
  }
  return summed;
}

void append_owned_pieces(const ShardPlan& plan, Range flat, std::vector<Range>& pieces) {
  for (const Range& shard : plan.owned()) {
    const Range mine = flat.intersect(shard);
    if (!mine.empty()) pieces.push_back(mine);
  }
}

TensorParallelSum::TensorParallelSum(const TensorParallel& tp, const ParamStore& params, std::vector<Range> pieces,
                                     Arena& arena)
    : tp_(tp), params_(params), pieces_(std::move(pieces)), summed_(pieces_.size(), 0), all_(pieces_.size()) {
  // Sized for the whole parameters, also where the pieces are their parts in the shards.
  int64_t elements = 0;
  for (const Param* param : tensor_parallel_summed(params, tp)) elements += param->numel();
  int64_t pieces_elements = 0;
  for (const Range& piece : pieces_) pieces_elements += piece.size();
  GPT_CHECK_LE(pieces_elements, elements) << "pieces summed over TP outside the summed parameters";
  if (elements > 0) staging_ = arena.allocate(DType::kFloat32, {elements});
  std::iota(all_.begin(), all_.end(), 0);
  pending_.reserve(pieces_.size());
}

void TensorParallelSum::start_iteration() { std::fill(summed_.begin(), summed_.end(), 0); }

void TensorParallelSum::sum(Context& ctx, std::span<const int> indices) {
  pending_.clear();
  int64_t elements = 0;
  for (int index : indices) {
    char& summed = summed_.at(static_cast<size_t>(index));
    if (summed) continue;
    summed = 1;
    pending_.push_back(index);
    elements += pieces_[static_cast<size_t>(index)].size();
  }
  if (elements == 0) return;
  int64_t offset = 0;
  for (int index : pending_) {
    const Range& piece = pieces_[static_cast<size_t>(index)];
    ops::copy(ctx, staging_.flat_range(offset, piece.size()), params_.grads_in(piece));
    offset += piece.size();
  }
  tp_.group().all_reduce(ctx, staging_.flat_range(0, elements), ReduceOp::kSum);
  offset = 0;
  for (int index : pending_) {
    const Range& piece = pieces_[static_cast<size_t>(index)];
    ops::copy(ctx, params_.grads_in(piece), staging_.flat_range(offset, piece.size()));
    offset += piece.size();
  }
}

void TensorParallelSum::sum_remaining(Context& ctx) { sum(ctx, all_); }

TiedEmbeddingSum::TiedEmbeddingSum(ProcessGrid& grid, const ParamStore& params, bool tied_across_stages,
                                   bool in_shards)
    : grid_(grid), params_(params) {
  if (!tied_across_stages || grid.embedding().size() == 1) return;
  const Param* word = nullptr;
  for (const Param& param : params.params()) {
    if (param.name() == kWordEmbeddingName) word = &param;
  }
  GPT_CHECK(word != nullptr) << kWordEmbeddingName << " absent from a rank of the embedding group";
  const Range flat = params.range_of(*word);
  if (in_shards) {
    append_owned_pieces(params.plan(), flat, pieces_);
  } else {
    pieces_.push_back(flat);
  }
}

void TiedEmbeddingSum::sum(Context& ctx) {
  if (summed_) return;
  summed_ = true;
  for (const Range& piece : pieces_) grid_.embedding().all_reduce(ctx, params_.grads_in(piece), ReduceOp::kSum);
}

}  // namespace gpt
