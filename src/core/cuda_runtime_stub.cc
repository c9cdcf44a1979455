// CPU-only builds: the CUDA runtime seam reports no devices; anything else is a broken
// invariant, because a CUDA context can never be created without the backend.
#include "core/cuda_runtime.h"

#include "core/check.h"

namespace gpt::cuda {
namespace {
[[noreturn]] void no_backend(const char* call) {
  GPT_FATAL() << call << ": this build has no CUDA backend (nvcc was not found at configure time)";
  fatal_exit(1);
}
}  // namespace

int device_count() { return 0; }
void set_device(int) { no_backend("set_device"); }
int current_device() { no_backend("current_device"); }
std::string device_name(int) { no_backend("device_name"); }
std::string device_uuid(int) { no_backend("device_uuid"); }
void* malloc_device(size_t) { no_backend("malloc_device"); }
void free_device(void*) { no_backend("free_device"); }
void* malloc_pinned_host(size_t) { no_backend("malloc_pinned_host"); }
void free_pinned_host(void*) { no_backend("free_pinned_host"); }
void memcpy_sync(void*, const void*, size_t, CopyKind) { no_backend("memcpy_sync"); }
void memcpy_on_stream(const DeviceContext&, void*, const void*, size_t, CopyKind) { no_backend("memcpy_on_stream"); }
void memset_device(void*, int, size_t) { no_backend("memset_device"); }
void synchronize_device() { no_backend("synchronize_device"); }
size_t device_synchronizations() { return 0; }
size_t device_memory_used_bytes() { return 0; }
size_t device_memory_total_bytes(int) { return 0; }

}  // namespace gpt::cuda
