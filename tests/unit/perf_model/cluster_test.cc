// Cluster files: the shipped ones parse, every malformed input names its line and key.
#include "perf_model/cluster.h"

#include <gtest/gtest.h>

#include <string>

namespace gpt::perf {
namespace {

const char* kMinimal = R"(# a comment
name = test
gpus_per_node = 4
peak_tflops = 100          # trailing comment
memory_gib = 16
memory_bandwidth_GBps = 1000
intra_node_bandwidth_GBps = 200
inter_node_bandwidth_GBps = 25
gemm_efficiency = 1e9:0.5, 1e11:0.7
attention_forward_efficiency = 0.4
attention_backward_efficiency = 0.3
)";

std::string message_of(const std::string& text) {
  absl::StatusOr<Cluster> c = parse_cluster(text, "f.conf");
  EXPECT_FALSE(c.ok());
  return std::string(c.status().message());
}

TEST(Cluster, ParsesUnitsAndDefaults) {
  absl::StatusOr<Cluster> c = parse_cluster(kMinimal, "f.conf");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name, "test");
  EXPECT_EQ(c->gpus_per_node, 4);
  EXPECT_EQ(c->compute_slots_per_node, 4);
  EXPECT_DOUBLE_EQ(c->peak_flops, 100e12);
  EXPECT_DOUBLE_EQ(c->memory_bytes, 16.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(c->inter_node_bandwidth, 25e9);
  EXPECT_DOUBLE_EQ(c->memory_bandwidth_efficiency, 1.0);
  // Interpolated in log(flops), flat outside the table.
  EXPECT_DOUBLE_EQ(c->gemm_efficiency_at(1e8), 0.5);
  EXPECT_NEAR(c->gemm_efficiency_at(1e10), 0.6, 1e-12);
  EXPECT_DOUBLE_EQ(c->gemm_efficiency_at(1e13), 0.7);
}

TEST(Cluster, Errors) {
  const std::string base = kMinimal;
  EXPECT_EQ(message_of(base + "warp_speed = 9\n"), "f.conf:12: unknown key warp_speed");
  EXPECT_EQ(message_of(base + "peak_tflops = 5\n"), "f.conf:12: peak_tflops is given twice (first on line 4)");
  EXPECT_EQ(message_of(base + "just words\n"), "f.conf:12: expected key = value (got \"just words\")");
  EXPECT_EQ(message_of(base + "kernel_overhead_us =\n"), "f.conf:12: kernel_overhead_us has no value");
  EXPECT_EQ(message_of(base + "memory_bandwidth_efficiency = 1.5\n"),
            "f.conf:12: memory_bandwidth_efficiency must be in (0, 1] (got 1.5)");
  EXPECT_EQ(message_of(base + "kernel_overhead_us = fast\n"),
            "f.conf:12: kernel_overhead_us must be a number (got \"fast\")");
  EXPECT_EQ(message_of(base + "compute_slots_per_node = 0\n"),
            "f.conf:12: compute_slots_per_node must be a positive integer (got \"0\")");
  EXPECT_EQ(message_of(base + "tp_comm_overlap_fraction = 2\n"),
            "f.conf:12: tp_comm_overlap_fraction must be in [0, 1] (got 2)");
  // Issue 44: magnitudes that would overflow or make every time infinite once used.
  EXPECT_EQ(message_of(base + "memory_reserved_gib = 1e300\n"), "f.conf:12: memory_reserved_gib must be at most 1e18 (got 1e300)");
  EXPECT_EQ(message_of(base + "host_link_bandwidth_GBps = 1e-300\n"),
            "f.conf:12: host_link_bandwidth_GBps must be at least 1e-9 (got 1e-300)");
  EXPECT_EQ(message_of(base + "kernel_overhead_us = nan\n"), "f.conf:12: kernel_overhead_us must be a number (got \"nan\")");
  EXPECT_EQ(message_of(base + "kernel_overhead_us = 1e400\n"), "f.conf:12: kernel_overhead_us must be a number (got \"1e400\")");
  std::string unsorted = base;
  unsorted.replace(unsorted.find("1e9:0.5, 1e11:0.7"), 17, "1e11:0.5, 1e9:0.7");
  EXPECT_EQ(message_of(unsorted), "f.conf:9: gemm_efficiency flops must be ascending");
  std::string missing = base;
  missing.erase(missing.find("peak_tflops"), missing.find("memory_gib") - missing.find("peak_tflops"));
  EXPECT_EQ(message_of(missing), "f.conf: missing peak_tflops");
  EXPECT_EQ(message_of(""), "f.conf: missing name, gpus_per_node, gemm_efficiency, peak_tflops, memory_gib, "
                            "memory_bandwidth_GBps, intra_node_bandwidth_GBps, inter_node_bandwidth_GBps, "
                            "attention_forward_efficiency, attention_backward_efficiency");
}

TEST(Cluster, ShippedFilesLoadByName) {
  for (const char* name : {"dgx-h100", "dgx-a100", "cpu"}) {
    absl::StatusOr<Cluster> c = load_cluster(name, "");
    ASSERT_TRUE(c.ok()) << name << ": " << c.status();
    EXPECT_EQ(c->name, name);
  }
  absl::StatusOr<Cluster> h100 = load_cluster("dgx-h100", "");
  EXPECT_DOUBLE_EQ(h100->peak_flops, 989e12);
  EXPECT_EQ(h100->gpus_per_node, 8);
}

TEST(Cluster, UnknownNameAndMissingFile) {
  absl::StatusOr<Cluster> c = load_cluster("dgx-z9000", "");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("unknown cluster dgx-z9000 (shipped: "), std::string::npos)
      << c.status();
  EXPECT_NE(std::string(c.status().message()).find("dgx-h100"), std::string::npos);
  absl::StatusOr<Cluster> file = load_cluster("/nonexistent/x.conf", "");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().message(), "cannot read cluster file /nonexistent/x.conf");
}

}  // namespace
}  // namespace gpt::perf
