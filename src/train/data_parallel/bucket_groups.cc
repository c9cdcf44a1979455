#include "train/data_parallel/bucket_groups.h"

#include "core/check.h"

namespace gpt {

BucketGroups bucket_groups(const ShardPlan& plan, Communicator& dense, Communicator& expert) {
  if (plan.has_expert_domain()) {
    const DomainGroup laid_out = plan.group(ParamDomain::kExpert);
    GPT_CHECK(laid_out.size == expert.size() && laid_out.rank == expert.rank())
        << "shard plan for expert data-parallel rank " << laid_out.rank << " of " << laid_out.size << ", the group's "
        << expert.rank() << " of " << expert.size();
  }
  BucketGroups groups;
  for (const BucketPlan& bucket : plan.buckets()) {
    groups.push_back(bucket.domain == ParamDomain::kExpert ? &expert : &dense);
  }
  return groups;
}

BucketGroups bucket_groups(const ShardPlan& plan, Communicator& dense, const ProcessGrid& grid) {
  return bucket_groups(plan, dense, grid.expert_data());
}

}  // namespace gpt
