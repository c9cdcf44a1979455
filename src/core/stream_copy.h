// Copies between host memory and tensors for the training step, queued on the context's stream
// behind the work already there, so the host never waits for the whole device (core/memory.h's
// copy_bytes does, and is for set-up only). The caller decides when to wait:
//
//   copy_to_device(ctx, tokens, std::span<const int32_t>(ids));  // ids may be refilled at once
//   copy_to_host(ctx, &loss, loss_sum);
//   ctx.synchronize();                                           // waits for this stream only
//   use(loss);
//
// On the CPU backend both are immediate copies.
#pragma once

#include <span>

#include "core/check.h"
#include "core/context.h"
#include "core/tensor.h"

namespace gpt {

// dst <- dst.bytes() bytes at `host`. CUDA stages pageable host memory before the call returns,
// so `host` may be reused at once; page-locked memory (core/host_staging.h) is read by the copy
// itself and must stay unchanged until the context's stream has passed it.
void copy_to_device(const Context& ctx, const Tensor& dst, const void* host);

template <typename T>
void copy_to_device(const Context& ctx, const Tensor& dst, std::span<const T> host) {
  GPT_CHECK_EQ(host.size_bytes(), dst.bytes()) << "host data for " << dst.to_string();
  copy_to_device(ctx, dst, static_cast<const void*>(host.data()));
}

// src.bytes() bytes at `host` <- src. Valid only once the context's stream has reached the copy:
// call ctx.synchronize() (a wait for this stream, not the device) before reading `host`.
void copy_to_host(const Context& ctx, void* host, const Tensor& src);

}  // namespace gpt
