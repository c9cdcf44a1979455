#include "model/config.h"

namespace gpt {

int64_t padded_vocab_size(int64_t vocab_size, int64_t divisible_by, int64_t tensor_parallel_size) {
  const int64_t multiple = divisible_by * tensor_parallel_size;
  return (vocab_size + multiple - 1) / multiple * multiple;
}

}  // namespace gpt
