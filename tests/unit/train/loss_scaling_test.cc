// The trainer's loss scaling from arguments and its checkpoint records.
#include "train/loss_scaling.h"

#include <map>
#include <string>

#include "gtest/gtest.h"

namespace gpt {
namespace {

Arguments with_given(Arguments a, std::initializer_list<const char*> flags) {
  for (const char* flag : flags) a.given.insert(flag);
  return a;
}

TEST(LossScaling, WhichScalerFollowsMegatron) {
  Arguments a;
  EXPECT_EQ(LossScaling::from_arguments(a), nullptr);  // FP32: none
  a.bf16 = true;
  EXPECT_EQ(LossScaling::from_arguments(a), nullptr);  // BF16 without --loss-scale: none
  a.loss_scale = 64.0;
  const auto constant = LossScaling::from_arguments(with_given(a, {"--loss-scale"}));
  ASSERT_NE(constant, nullptr);
  EXPECT_FALSE(constant->scaler().dynamic());
  EXPECT_EQ(constant->scale(), 64.0f);
  Arguments f;
  f.fp16 = true;
  const auto dynamic = LossScaling::from_arguments(f);
  ASSERT_NE(dynamic, nullptr);
  EXPECT_TRUE(dynamic->scaler().dynamic());
  EXPECT_EQ(dynamic->scale(), 4294967296.0f);
  EXPECT_EQ(dynamic->scaler().state().hysteresis_tracker, 2);
}

TEST(LossScaling, RecordsRoundTripExactly) {
  // A scale with every mantissa bit in use, restored bit for bit through the text record.
  const float scale = 1.2345679e-3f;
  LossScaling original({.dynamic = true, .initial_scale = 3.0e-3f, .min_scale = 1e-6f, .window = 5, .hysteresis = 3});
  ASSERT_TRUE(original
                  .load_records({{"loss_scaler/scale", "0.0012345679"},
                                 {"loss_scaler/growth_tracker", "4"},
                                 {"loss_scaler/hysteresis_tracker", "-7"},
                                 {"loss_scaler/skipped_updates", "11"}})
                  .ok());
  ASSERT_EQ(original.scale(), scale);
  std::map<std::string, std::string> records;
  original.save_records(records);
  EXPECT_EQ(records.size(), 4u);
  LossScaling restored({.dynamic = true, .initial_scale = 8.0f, .min_scale = 1.0f, .window = 5, .hysteresis = 3});
  ASSERT_TRUE(restored.load_records(records).ok());
  EXPECT_EQ(restored.scale(), scale);
  EXPECT_EQ(restored.scaler().state().growth_tracker, 4);
  EXPECT_EQ(restored.scaler().state().hysteresis_tracker, -7);
  EXPECT_EQ(restored.skipped_updates(), 11);
}

TEST(LossScaling, MissingRecordsKeepTheStartAndMalformedOnesAreErrors) {
  LossScaling scaling({.dynamic = true, .initial_scale = 1024.0f});
  EXPECT_TRUE(scaling.load_records({{"other/key", "1"}}).ok());
  EXPECT_EQ(scaling.scale(), 1024.0f);
  std::map<std::string, std::string> records = {{"loss_scaler/scale", "512"},
                                                {"loss_scaler/growth_tracker", "x"},
                                                {"loss_scaler/hysteresis_tracker", "1"},
                                                {"loss_scaler/skipped_updates", "3"}};
  const absl::Status bad = scaling.load_records(records);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("loss_scaler/growth_tracker"), std::string::npos) << bad.message();
  records["loss_scaler/growth_tracker"] = "2";
  records["loss_scaler/scale"] = "inf";
  EXPECT_NE(scaling.load_records(records).message().find("loss_scaler/scale"), std::string::npos);
  records["loss_scaler/scale"] = "512";
  ASSERT_TRUE(scaling.load_records(records).ok());
  EXPECT_EQ(scaling.scale(), 512.0f);
  EXPECT_EQ(scaling.skipped_updates(), 3);
}

}  // namespace
}  // namespace gpt
