// A range of elements [begin, end) of a flat buffer: how buckets, data-parallel shards and the
// optimizer's state are described (Megatron's Range, llm.c's ShardInfo), publicly, so that the
// optimizer, the gradient reduction and checkpoints agree on who owns what.
#pragma once

#include <algorithm>
#include <cstdint>

namespace gpt {

struct Range {
  int64_t begin = 0;
  int64_t end = 0;

  int64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
  // The part of this range inside `other` (empty when they do not meet).
  Range intersect(const Range& other) const {
    const Range r{std::max(begin, other.begin), std::min(end, other.end)};
    return r.empty() ? Range{begin, begin} : r;
  }
  bool operator==(const Range&) const = default;
};

// A bucket of the flat buffers and this rank's part of it (the whole bucket when unsharded), as the
// shard plan (model/shard_plan.h) decides them.
struct BucketShard {
  Range bucket;
  Range shard;
  bool operator==(const BucketShard&) const = default;
};

}  // namespace gpt
