// Shared by the GPU tests: skip cleanly when no GPU is visible (ctest label gpu).
#pragma once

#include "core/cuda_runtime.h"
#include "gtest/gtest.h"

#define GPT_REQUIRE_GPU()                                                        \
  do {                                                                           \
    if (::gpt::cuda::device_count() == 0) GTEST_SKIP() << "no GPU on this machine"; \
  } while (false)
