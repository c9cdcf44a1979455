// Occupancy of the grid-stride kernels, asked of the runtime once per (kernel, block size, shared
// memory, device) and cached: launchers size their grids from it on every call.
#include <map>
#include <mutex>
#include <tuple>

#include "kernels/cuda/vector_io.cuh"

namespace gpt::cuda_kernels {

int blocks_per_multiprocessor(Context& ctx, const void* kernel, int threads_per_block, size_t dynamic_smem) {
  using Key = std::tuple<const void*, int, size_t, int>;
  static std::mutex mutex;
  static std::map<Key, int> cache;
  const Key key{kernel, threads_per_block, dynamic_smem, ctx.cuda().device_index()};
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) {
    int blocks = 0;
    GPT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads_per_block, dynamic_smem));
    GPT_CHECK(blocks > 0) << "a kernel cannot run with " << threads_per_block << " threads and " << dynamic_smem
                          << " bytes of shared memory per block";
    it = cache.emplace(key, blocks).first;
  }
  return it->second;
}

}  // namespace gpt::cuda_kernels
