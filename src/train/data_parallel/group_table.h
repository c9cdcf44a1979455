// What the data-parallel strategies know of each parameter group of this rank's chunks (a group is
// the embedding, one transformer layer, or the output layer: model/param_observer.h), computed once
// at attach from the groups and the shard plan. Rows are indexed by group (the chunks one after
// another, forward order within a chunk) and counts by bucket, in vectors: the hooks, which run per
// group and microbatch, look up an index and allocate nothing.
#pragma once

#include <algorithm>
#include <array>
#include <span>
#include <utility>
#include <vector>

#include "model/gpt_model.h"
#include "model/param_observer.h"
#include "model/param_store.h"

namespace gpt {

class GroupTable {
 public:
  struct Row {
    // The buckets holding the group's parameters, each once, in the order of their first parameter
    // in the group: the order units take, gather and release them.
    std::vector<int> buckets;
    // The same buckets in the order of their last parameter in the group: the order in which the
    // group's report completes them (a bucket's reduction starts at its last parameter).
    std::vector<int> buckets_by_last_param;
    // Indices into ParamStore::params() of the group's parameters, in the group's order.
    std::vector<int> params;
    // The rows of the groups before ([0]) and after ([1]) this one in its chunk, or -1: what runs
    // next in backward and in forward (ZeRO-3's prefetch).
    std::array<int, 2> neighbours = {-1, -1};
  };

  GroupTable() = default;
  // Fatal unless every parameter of the store belongs to some group of `chunks` and every group's
  // parameters are the store's.
  GroupTable(std::span<GptModel* const> chunks, const ParamStore& params);

  // The group's row index; fatal for a group of no chunk given at construction. Linear in the
  // chunks (one, or a few virtual stages).
  int index(const ParamGroup& group) const;
  const Row& row(const ParamGroup& group) const { return rows_[static_cast<size_t>(index(group))]; }
  const Row& row(int index) const { return rows_.at(static_cast<size_t>(index)); }
  int size() const { return static_cast<int>(rows_.size()); }
  // [bucket] the groups writing its gradients (each group whose parameters it holds, once).
  const std::vector<int>& writers() const { return writers_; }

 private:
  struct Chunk {
    const ParamGroup* first;  // the chunk's parameter_groups().data()
    int groups;
    int first_row;
  };
  std::vector<Chunk> chunks_;
  std::vector<Row> rows_;
  std::vector<int> writers_;
};

// Per bucket, the groups that have reported since the bucket was last complete: a report
// completes the bucket when every writer has reported, and the count starts again from zero.
class BucketReports {
 public:
  BucketReports() = default;
  explicit BucketReports(std::vector<int> writers) : writers_(std::move(writers)), reported_(writers_.size(), 0) {}
  // Forgets every report (the start of an iteration).
  void clear() { std::fill(reported_.begin(), reported_.end(), 0); }
  // One writer of bucket b has reported; true when it was the last one.
  bool report(int bucket) {
    int& reported = reported_[static_cast<size_t>(bucket)];
    if (++reported != writers_[static_cast<size_t>(bucket)]) return false;
    reported = 0;
    return true;
  }

 private:
  std::vector<int> writers_;
  std::vector<int> reported_;
};

}  // namespace gpt
