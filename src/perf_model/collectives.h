// Cost models of the collectives the trainer runs, for a group of n ranks over one kind of link
// (the standard ring/alpha-beta formulas, `bytes` the size of the whole tensor):
//   all-reduce       2 (n-1)/n bytes / bw + 2 (n-1) latency
//   reduce-scatter   (n-1)/n bytes / bw + (n-1) latency     (all-gather the same)
//   p2p              bytes / bw + latency
// and which link a group uses. Ranks are numbered in Megatron's order (rank = tp + TP (dp + DP pp),
// parallel/process_grid.h) and placed gpus_per_node to a node in rank order, so a group is the
// ranks first + stride k, k < size. A group inside one node runs at the intra-node (NVLink)
// bandwidth. A group that spans nodes sends each ring channel across every node boundary; with one
// NIC per GPU, NCCL spreads the channels over the NICs of the group's ranks on a node, so the
// bandwidth is min(intra-node, ranks of the group per node x inter-node per GPU), at inter-node
// latency.
#pragma once

#include "perf_model/cluster.h"

namespace gpt::perf {

struct Link {
  double bandwidth = 0;  // bytes/s, achieved (efficiency applied)
  double latency = 0;    // s per step
  bool inter_node = false;
};

double all_reduce_time(int ranks, double bytes, const Link& link);
double reduce_scatter_time(int ranks, double bytes, const Link& link);
double all_gather_time(int ranks, double bytes, const Link& link);
double p2p_time(double bytes, const Link& link);
// Each of `ranks` ranks sends 1 / ranks of its `bytes` to every other rank (context parallelism's
// all-to-all): (n - 1) / n of the bytes leave each rank, one message per peer.
double all_to_all_time(int ranks, double bytes, const Link& link);

// The expert dispatcher's all-to-all over `ranks` ranks `stride` apart, each sending `bytes` spread
// evenly over the group: the share bound for the ranks of its own node over NVLink, the rest
// through its own NIC (one per GPU), both at once; one latency step per peer.
double expert_all_to_all_time(const Cluster& cluster, int stride, int ranks, double bytes);

// True when ranks first, first + stride, ..., first + (size - 1) stride are not all on one node.
bool group_spans_nodes(int first, int stride, int size, int gpus_per_node);
// The link of the group of `size` ranks, `stride` apart, starting at rank 0 (every group of a
// parallel dimension is a translate of it when gpus_per_node divides or is a multiple of stride).
Link group_link(const Cluster& cluster, int stride, int size);

}  // namespace gpt::perf
