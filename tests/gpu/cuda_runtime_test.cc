#include <vector>

#include "core/arena.h"
#include "core/context.h"
#include "core/memory.h"
#include "gpu/gpu_test_util.h"

namespace gpt {
namespace {

TEST(CudaRuntime, DeviceArenaRoundTripAndZeroing) {
  GPT_REQUIRE_GPU();
  Context ctx = Context::gpu(0);
  Arena arena(Device::kCuda, "gpu-test", 1 << 20);
  std::vector<float> host(1001), back(1001, -1.0f);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i) * 0.5f;
  Tensor device = arena.allocate(DType::kFloat32, {1001});
  copy_bytes(Device::kCuda, device.data(), Device::kCpu, host.data(), device.bytes());
  copy_bytes(Device::kCpu, back.data(), Device::kCuda, device.data(), device.bytes());
  EXPECT_EQ(host, back);
  zero_tensor(device);
  ctx.synchronize();
  copy_bytes(Device::kCpu, back.data(), Device::kCuda, device.data(), device.bytes());
  for (float v : back) ASSERT_EQ(v, 0.0f);
  EXPECT_FALSE(cuda::device_name(0).empty());
}

}  // namespace
}  // namespace gpt
