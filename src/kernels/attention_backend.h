// Whether this build carries cuDNN's fused attention (the GPU backend with cuDNN found at
// configure time). Where it does not, the GPU runs the exact reference attention kernels.
#pragma once

namespace gpt {

bool fused_attention_built();

}  // namespace gpt
