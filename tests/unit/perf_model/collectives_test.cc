// The collective cost formulas and the choice of link by node placement.
#include "perf_model/collectives.h"

#include <gtest/gtest.h>

namespace gpt::perf {
namespace {

Cluster two_level_cluster() {
  Cluster c;
  c.gpus_per_node = 8;
  c.intra_node_bandwidth = 400e9;
  c.inter_node_bandwidth = 50e9;
  c.intra_node_latency = 2e-6;
  c.inter_node_latency = 10e-6;
  c.intra_node_efficiency = 0.5;
  c.inter_node_efficiency = 0.8;
  return c;
}

TEST(Collectives, RingFormulas) {
  const Link link{100e9, 5e-6, false};
  const double bytes = 1e9;
  for (int n : {2, 4, 8, 48}) {
    EXPECT_DOUBLE_EQ(all_reduce_time(n, bytes, link), 2.0 * (n - 1) / n * bytes / 100e9 + 2.0 * (n - 1) * 5e-6);
    EXPECT_DOUBLE_EQ(reduce_scatter_time(n, bytes, link), 1.0 * (n - 1) / n * bytes / 100e9 + (n - 1) * 5e-6);
    EXPECT_DOUBLE_EQ(all_gather_time(n, bytes, link), reduce_scatter_time(n, bytes, link));
    // An all-reduce is a reduce-scatter followed by an all-gather.
    EXPECT_DOUBLE_EQ(all_reduce_time(n, bytes, link),
                     reduce_scatter_time(n, bytes, link) + all_gather_time(n, bytes, link));
  }
  EXPECT_EQ(all_reduce_time(1, bytes, link), 0);
  EXPECT_EQ(reduce_scatter_time(1, bytes, link), 0);
  EXPECT_DOUBLE_EQ(p2p_time(bytes, link), bytes / 100e9 + 5e-6);
}

TEST(Collectives, GroupSpansNodes) {
  EXPECT_FALSE(group_spans_nodes(0, 1, 8, 8));
  EXPECT_TRUE(group_spans_nodes(0, 1, 16, 8));
  EXPECT_TRUE(group_spans_nodes(4, 1, 8, 8));
  EXPECT_FALSE(group_spans_nodes(0, 2, 4, 8));
  EXPECT_TRUE(group_spans_nodes(0, 8, 2, 8));
}

TEST(Collectives, LinkByPlacement) {
  const Cluster c = two_level_cluster();
  // TP 8 inside a node: NVLink at its efficiency.
  Link tp = group_link(c, 1, 8);
  EXPECT_FALSE(tp.inter_node);
  EXPECT_DOUBLE_EQ(tp.bandwidth, 200e9);
  EXPECT_DOUBLE_EQ(tp.latency, 2e-6);
  // DP with stride 8: one rank per node, one NIC.
  Link dp = group_link(c, 8, 4);
  EXPECT_TRUE(dp.inter_node);
  EXPECT_DOUBLE_EQ(dp.bandwidth, 40e9);
  EXPECT_DOUBLE_EQ(dp.latency, 10e-6);
  // DP with stride 2: four ranks per node share their four NICs.
  EXPECT_DOUBLE_EQ(group_link(c, 2, 16).bandwidth, 160e9);
  // Eight ranks per node would exceed NVLink: capped there.
  EXPECT_DOUBLE_EQ(group_link(c, 1, 16).bandwidth, 200e9);
}

}  // namespace
}  // namespace gpt::perf
