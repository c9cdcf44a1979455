#include "perf_model/collectives.h"

#include <algorithm>

namespace gpt::perf {

double all_reduce_time(int ranks, double bytes, const Link& link) {
  if (ranks <= 1) return 0;
  const double n = ranks;
  return 2 * (n - 1) / n * bytes / link.bandwidth + 2 * (n - 1) * link.latency;
}

double reduce_scatter_time(int ranks, double bytes, const Link& link) {
  if (ranks <= 1) return 0;
  const double n = ranks;
  return (n - 1) / n * bytes / link.bandwidth + (n - 1) * link.latency;
}

double all_gather_time(int ranks, double bytes, const Link& link) { return reduce_scatter_time(ranks, bytes, link); }

double p2p_time(double bytes, const Link& link) { return bytes / link.bandwidth + link.latency; }

double all_to_all_time(int ranks, double bytes, const Link& link) { return reduce_scatter_time(ranks, bytes, link); }

double expert_all_to_all_time(const Cluster& cluster, int stride, int ranks, double bytes) {
  if (ranks <= 1) return 0;
  const double n = ranks;
  const double per_node = std::max(1, std::min(ranks, cluster.gpus_per_node / std::max(1, stride)));
  const double intra = (per_node - 1) / n * bytes / (cluster.intra_node_bandwidth * cluster.intra_node_efficiency);
  if (per_node >= n) return intra + (n - 1) * cluster.intra_node_latency;
  const double inter = (n - per_node) / n * bytes / (cluster.inter_node_bandwidth * cluster.inter_node_efficiency);
  return std::max(intra, inter) + (n - 1) * cluster.inter_node_latency;
}

bool group_spans_nodes(int first, int stride, int size, int gpus_per_node) {
  const long long first_node = first / gpus_per_node;
  const long long last_node = (first + static_cast<long long>(stride) * (size - 1)) / gpus_per_node;
  return first_node != last_node;
}

Link group_link(const Cluster& cluster, int stride, int size) {
  const double intra = cluster.intra_node_bandwidth * cluster.intra_node_efficiency;
  if (!group_spans_nodes(0, stride, size, cluster.gpus_per_node)) return {intra, cluster.intra_node_latency, false};
  // Members of the group on the first node: the ring's channels leave the node through their NICs.
  const int per_node = std::max(1, std::min(size, cluster.gpus_per_node / std::max(1, stride)));
  const double inter = per_node * cluster.inter_node_bandwidth * cluster.inter_node_efficiency;
  return {std::min(intra, inter), cluster.inter_node_latency, true};
}

}  // namespace gpt::perf
