#include "train/data_parallel/group_table.h"

#include <algorithm>
#include <functional>

#include "core/check.h"

namespace gpt {
namespace {

void add_once(std::vector<int>& list, int value) {
  if (std::find(list.begin(), list.end(), value) == list.end()) list.push_back(value);
}

}  // namespace

GroupTable::GroupTable(std::span<GptModel* const> chunks, const ParamStore& params) {
  const std::vector<Param>& store = params.params();
  writers_.assign(params.plan().buckets().size(), 0);
  std::vector<char> listed(store.size(), 0);  // [parameter] in some group
  for (GptModel* chunk : chunks) {
    const std::vector<ParamGroup>& groups = chunk->parameter_groups();
    const int first_row = static_cast<int>(rows_.size());
    chunks_.push_back({groups.data(), static_cast<int>(groups.size()), first_row});
    for (size_t i = 0; i < groups.size(); ++i) {
      Row row;
      const int here = first_row + static_cast<int>(i);
      row.neighbours = {i > 0 ? here - 1 : -1, i + 1 < groups.size() ? here + 1 : -1};
      for (const Param* param : groups[i].params) {
        const auto index = static_cast<size_t>(param - store.data());
        GPT_CHECK_LT(index, store.size())
            << param->name() << " of " << groups[i].name << " is not a parameter of this store";
        row.params.push_back(static_cast<int>(index));
        listed[index] = 1;
        add_once(row.buckets, param->placement->bucket);
      }
      // The order of last parameters: the first-appearance order of the reversed list, reversed.
      for (auto it = row.params.rbegin(); it != row.params.rend(); ++it) {
        add_once(row.buckets_by_last_param, store[static_cast<size_t>(*it)].placement->bucket);
      }
      std::reverse(row.buckets_by_last_param.begin(), row.buckets_by_last_param.end());
      for (int bucket : row.buckets) ++writers_[static_cast<size_t>(bucket)];
      rows_.push_back(std::move(row));
    }
  }
  for (size_t i = 0; i < store.size(); ++i) {
    GPT_CHECK(listed[i]) << store[i].name() << " belongs to no layer of this rank's chunks";
  }
}

int GroupTable::index(const ParamGroup& group) const {
  // std::less: a total order over pointers into different chunks' group vectors.
  const std::less<const ParamGroup*> before;
  for (const Chunk& chunk : chunks_) {
    if (!before(&group, chunk.first) && before(&group, chunk.first + chunk.groups)) {
      return chunk.first_row + static_cast<int>(&group - chunk.first);
    }
  }
  GPT_CHECK(false) << "parameter group " << group.name << " of no attached chunk";
  return -1;
}

}  // namespace gpt
