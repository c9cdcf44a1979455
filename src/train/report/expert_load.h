// Expert-parallel load imbalance, what users tune the capacity factor and EP with: per MoE layer,
// the routed pairs each expert-parallel rank's experts receive (EP rank r holds the experts
// [r E / EP, (r + 1) E / EP)), and the busiest rank's over the mean. From the tokens per expert
// summed over every data-parallel replica (so a rank's figure is the mean over the expert
// data-parallel groups' copies of it, up to the constant replica count, which cancels in the ratio).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gpt {

// [EP] the sum of each EP rank's experts' tokens.
std::vector<double> tokens_per_expert_parallel_rank(const std::vector<double>& tokens_per_expert,
                                                    int64_t expert_model_parallel);
// The busiest rank's tokens over the mean (NaN without tokens).
double busiest_over_mean(const std::vector<double>& tokens);

// The closing line of a run with EP > 1 from the run's tokens per expert of each MoE layer:
// "> expert-parallel load over N iterations (EP 4): busiest rank / mean 1.31 (layer 2); per layer: 1.12 1.31".
// Empty without MoE layers or iterations.
std::string expert_parallel_load_line(const std::vector<std::pair<int64_t, std::vector<double>>>& tokens,
                                      int64_t expert_model_parallel, int64_t iterations);

}  // namespace gpt
