#include "model/moe_all_to_all.h"

#include "core/check.h"

namespace gpt {

AllToAllPlan plan_all_to_all(std::span<const int32_t> group_indices, std::span<const float> group_weights,
                             int64_t rows_per_member, int64_t k, int member, int expert_tensor_size,
                             int expert_model_size, int64_t local_experts) {
  const int64_t members = int64_t{expert_tensor_size} * expert_model_size, r = rows_per_member;
  GPT_CHECK(static_cast<int64_t>(group_indices.size()) == members * r * k && group_weights.size() == group_indices.size() &&
            member >= 0 && member < members && local_experts >= 1)
      << "alltoall plan of member " << member << " of " << members << ", " << r << " rows each, top-" << k;
  auto first_expert = [&](int64_t m) { return (m / expert_tensor_size) * local_experts; };
  auto pair_at = [&](int64_t m, int64_t t, int64_t j) { return static_cast<size_t>((m * r + t) * k + j); };
  AllToAllPlan plan;
  plan.send_rows.assign(static_cast<size_t>(members), 0);
  plan.receive_rows.assign(static_cast<size_t>(members), 0);
  // Sent: to each member, its experts' pairs of this member's rows, by expert then row.
  for (int64_t m = 0; m < members; ++m) {
    for (int64_t e = first_expert(m); e < first_expert(m) + local_experts; ++e) {
      for (int64_t t = 0; t < r; ++t) {
        for (int64_t j = 0; j < k; ++j) {
          if (group_indices[pair_at(member, t, j)] != e) continue;
          plan.send_source.push_back(static_cast<int32_t>(t));
          plan.send_pair.push_back(static_cast<int32_t>(t * k + j));
          ++plan.send_rows[static_cast<size_t>(m)];
        }
      }
    }
  }
  // Received: from each member, this member's experts' pairs of its rows, in the same order; each
  // expert's list then takes them source by source (expert-major: expert, source, row).
  const int64_t mine = first_expert(member);
  std::vector<std::vector<int32_t>> by_expert(static_cast<size_t>(local_experts));
  std::vector<std::vector<float>> weights_by_expert(static_cast<size_t>(local_experts));
  int32_t received = 0;
  for (int64_t m = 0; m < members; ++m) {
    for (int64_t e = 0; e < local_experts; ++e) {
      for (int64_t t = 0; t < r; ++t) {
        for (int64_t j = 0; j < k; ++j) {
          if (group_indices[pair_at(m, t, j)] != mine + e) continue;
          by_expert[static_cast<size_t>(e)].push_back(received++);
          weights_by_expert[static_cast<size_t>(e)].push_back(group_weights[pair_at(m, t, j)]);
          ++plan.receive_rows[static_cast<size_t>(m)];
        }
      }
    }
  }
  plan.experts.expert_rows.assign(static_cast<size_t>(local_experts), 0);
  plan.received_row.assign(static_cast<size_t>(received), -1);
  for (int64_t e = 0; e < local_experts; ++e) {
    const std::vector<int32_t>& rows = by_expert[static_cast<size_t>(e)];
    for (size_t i = 0; i < rows.size(); ++i) {
      plan.received_row[static_cast<size_t>(rows[i])] = static_cast<int32_t>(plan.experts.source.size());
      plan.experts.source.push_back(rows[i]);
      plan.experts.row_weights.push_back(weights_by_expert[static_cast<size_t>(e)][i]);
    }
    plan.experts.expert_rows[static_cast<size_t>(e)] = static_cast<int64_t>(rows.size());
  }
  // Returned rows line up with the sent ones: each own row's returned rows and their weights.
  plan.return_width = k * expert_tensor_size;
  plan.return_rows.assign(static_cast<size_t>(r * plan.return_width), -1);
  plan.return_weights.assign(plan.return_rows.size(), 0.0f);
  plan.pair_rows.assign(plan.return_rows.size(), -1);
  std::vector<int64_t> filled(static_cast<size_t>(r), 0), pair_filled(static_cast<size_t>(r * k), 0);
  for (size_t q = 0; q < plan.send_source.size(); ++q) {
    const int64_t t = plan.send_source[q], pair = plan.send_pair[q];
    const auto at = static_cast<size_t>(t * plan.return_width + filled[static_cast<size_t>(t)]++);
    plan.return_rows[at] = static_cast<int32_t>(q);
    plan.return_weights[at] = group_weights[pair_at(member, 0, 0) + static_cast<size_t>(pair)];
    plan.pair_rows[static_cast<size_t>(pair * expert_tensor_size + pair_filled[static_cast<size_t>(pair)]++)] =
        static_cast<int32_t>(q);
  }
  return plan;
}

}  // namespace gpt
