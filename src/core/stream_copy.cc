#include "core/stream_copy.h"

#include <cstring>

#include "core/cuda_runtime.h"

namespace gpt {

void copy_to_device(const Context& ctx, const Tensor& dst, const void* host) {
  GPT_CHECK(dst.device() == ctx.device()) << "copy into " << dst.to_string() << " on a " << device_name(ctx.device())
                                          << " context";
  if (dst.bytes() == 0) return;
  if (dst.device() == Device::kCpu) {
    std::memmove(dst.data(), host, dst.bytes());
    return;
  }
  cuda::memcpy_on_stream(ctx.cuda(), dst.data(), host, dst.bytes(), cuda::CopyKind::kHostToDevice);
}

void copy_to_host(const Context& ctx, void* host, const Tensor& src) {
  GPT_CHECK(src.device() == ctx.device()) << "copy from " << src.to_string() << " on a " << device_name(ctx.device())
                                          << " context";
  if (src.bytes() == 0) return;
  if (src.device() == Device::kCpu) {
    std::memmove(host, src.data(), src.bytes());
    return;
  }
  cuda::memcpy_on_stream(ctx.cuda(), host, src.data(), src.bytes(), cuda::CopyKind::kDeviceToHost);
}

}  // namespace gpt
