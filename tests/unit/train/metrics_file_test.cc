// --metrics-file's JSON formatting (train/report/metrics_file.h): escaping, non-finite numbers as null,
// exact round-tripping numbers, the records' fields, truncate/append and the open error.
#include "train/report/metrics_file.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "gtest/gtest.h"
#include "train/report/expert_load.h"

namespace gpt {
namespace {

TEST(MetricsFile, StringsAreEscaped) {
  EXPECT_EQ(json_string("plain"), "\"plain\"");
  EXPECT_EQ(json_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(json_string("\n\t\r\b\f"), "\"\\n\\t\\r\\b\\f\"");
  EXPECT_EQ(json_string(std::string("\x01\x1f", 2)), "\"\\u0001\\u001f\"");
  EXPECT_EQ(json_string(std::string("a\0b", 3)), "\"a\\u0000b\"");
  EXPECT_EQ(json_string("caf\xc3\xa9"), "\"caf\xc3\xa9\"");  // UTF-8 passes through
  EXPECT_EQ(json_string("/"), "\"/\"");
}

TEST(MetricsFile, NonFiniteNumbersAreNull) {
  EXPECT_EQ(json_number(NAN), "null");
  EXPECT_EQ(json_number(INFINITY), "null");
  EXPECT_EQ(json_number(-INFINITY), "null");
}

TEST(MetricsFile, NumbersRoundTrip) {
  EXPECT_EQ(json_number(0.0), "0");
  EXPECT_EQ(json_number(1.5), "1.5");
  EXPECT_EQ(json_number(-2.0), "-2");
  EXPECT_EQ(json_number(1e-5), "1e-05");
  EXPECT_EQ(json_number(0.1 + 0.2), "0.30000000000000004");  // 17 digits where 15 do not read back
  for (const double v : {0.1, 1.0 / 3.0, 6.158036, 110.614, 1e300, 5e-324, 123456789.123456789}) {
    EXPECT_EQ(std::strtod(json_number(v).c_str(), nullptr), v) << json_number(v);
  }
}

TEST(MetricsFile, ObjectsKeepOrderAndNest) {
  JsonObject inner;
  inner.add("min", 1.5).add("max", 2.0);
  JsonObject o;
  o.add("i", int64_t{3}).add("b", false).add("s", "x\"y").add("o", inner).add_null("n").add("nan", NAN);
  EXPECT_EQ(o.str(), "{\"i\": 3, \"b\": false, \"s\": \"x\\\"y\", \"o\": {\"min\": 1.5, \"max\": 2}, \"n\": null, "
                     "\"nan\": null}");
  EXPECT_EQ(JsonObject().str(), "{}");
}

TEST(MetricsFile, IterationRecord) {
  IterationMetrics m;
  m.log.iteration = 2;
  m.log.train_iters = 6;
  m.log.consumed_samples = 8;
  m.log.elapsed_ms_per_iteration = 250.0;
  m.log.tflops_per_gpu = 0.5;
  m.log.learning_rate = 0.25;
  m.log.global_batch_size = 4;
  m.log.lm_loss = NAN;
  m.log.grad_norm = INFINITY;
  m.log.skipped_iterations = 1;
  m.log.nan_iterations = 2;
  m.timestamp = "2025-02-20 11:18:37";
  m.tokens_per_second = 1024.0;
  m.world_size = 4;
  m.tensor_parallel = 2;
  m.data_parallel = 2;
  m.timers = {{"forward-backward", 1.0, 2.0}, {"optimizer", 0.5, 0.75}};
  m.arena_bytes = 4096;
  EXPECT_EQ(iteration_record(m),
            "{\"iteration\": 2, \"train_iters\": 6, \"consumed_samples\": 8, \"elapsed_time_per_iteration_ms\": 250, "
            "\"throughput_tflops_per_gpu\": 0.5, \"tokens_per_second\": 1024, \"learning_rate\": 0.25, "
            "\"global_batch_size\": 4, \"lm_loss\": null, \"loss_scale\": 1, \"grad_norm\": null, "
            "\"skipped_iterations\": 1, \"nan_iterations\": 2, \"timestamp\": \"2025-02-20 11:18:37\", "
            "\"world_size\": 4, \"tensor_model_parallel_size\": 2, \"pipeline_model_parallel_size\": 1, "
            "\"data_parallel_size\": 2, \"timers_ms\": {\"forward-backward\": {\"min\": 1, \"max\": 2}, "
            "\"optimizer\": {\"min\": 0.5, \"max\": 0.75}}, \"memory\": {\"arena_bytes\": 4096}}");
  m.timers.clear();
  m.device_memory_bytes = 1 << 20;
  const std::string record = iteration_record(m);
  EXPECT_EQ(record.find("timers_ms"), std::string::npos);
  EXPECT_NE(record.find("\"memory\": {\"arena_bytes\": 4096, \"device_memory_bytes\": 1048576}"), std::string::npos);
}

TEST(MetricsFile, ValidationRecord) {
  EXPECT_EQ(validation_record("valid", 3, false, 2.0),
            "{\"validation\": true, \"split\": \"valid\", \"iteration\": 3, \"end_of_training\": false, "
            "\"lm_loss\": 2, \"lm_loss_ppl\": " + json_number(std::exp(2.0)) + "}");
  EXPECT_NE(validation_record("test", 6, true, NAN).find("\"lm_loss\": null, \"lm_loss_ppl\": null"),
            std::string::npos);
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(MetricsFile, TruncatesOrAppendsAndFlushesEachLine) {
  char dir[] = "/tmp/metrics_file_test_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/m.jsonl";
  {
    auto file = MetricsFile::open(path, false);
    ASSERT_TRUE(file.ok()) << file.status();
    (*file)->write("{\"a\": 1}");
    EXPECT_EQ(read_all(path), "{\"a\": 1}\n");  // flushed before the file is closed
  }
  {
    auto file = MetricsFile::open(path, true);
    ASSERT_TRUE(file.ok());
    (*file)->write("{\"a\": 2}");
  }
  EXPECT_EQ(read_all(path), "{\"a\": 1}\n{\"a\": 2}\n");
  {
    auto file = MetricsFile::open(path, false);
    ASSERT_TRUE(file.ok());
    (*file)->write("{\"a\": 3}");
  }
  EXPECT_EQ(read_all(path), "{\"a\": 3}\n");
  const auto missing = MetricsFile::open(std::string(dir) + "/no/such/dir/m.jsonl", false);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("--metrics-file " + std::string(dir) + "/no/such/dir/m.jsonl"),
            std::string::npos);
  EXPECT_NE(missing.status().message().find("No such file or directory"), std::string::npos);
  std::remove(path.c_str());
  rmdir(dir);
}

// Expert-parallel load: EP rank r sums its experts [r E / EP, (r + 1) E / EP).
TEST(ExpertLoad, BusiestExpertParallelRankOverMean) {
  const std::vector<double> tokens = {10, 30, 20, 20, 5, 15, 0, 60};  // E = 8
  EXPECT_EQ(tokens_per_expert_parallel_rank(tokens, 2), (std::vector<double>{80, 80}));
  EXPECT_EQ(tokens_per_expert_parallel_rank(tokens, 4), (std::vector<double>{40, 40, 20, 60}));
  EXPECT_DOUBLE_EQ(busiest_over_mean(tokens_per_expert_parallel_rank(tokens, 4)), 60.0 / 40.0);
  EXPECT_TRUE(std::isnan(busiest_over_mean({0, 0})));
  const std::string line = expert_parallel_load_line({{1, tokens}, {3, {1, 1, 1, 1, 1, 1, 1, 1}}}, 4, 7);
  EXPECT_NE(line.find("over 7 iterations (EP 4)"), std::string::npos) << line;
  EXPECT_NE(line.find("mean 1.500 (layer 1)"), std::string::npos) << line;
  EXPECT_NE(line.find("per MoE layer: 1.500 1.000"), std::string::npos) << line;
  EXPECT_EQ(expert_parallel_load_line({}, 4, 7), "");
}

}  // namespace
}  // namespace gpt
