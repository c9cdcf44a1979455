#include "kernels/attention_backend.h"

namespace gpt {

bool fused_attention_built() {
#ifdef GPT_WITH_CUDNN
  return true;
#else
  return false;
#endif
}

}  // namespace gpt
