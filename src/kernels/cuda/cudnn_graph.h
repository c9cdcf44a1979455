// A small builder over cuDNN 9's backend (graph) API, enough to express fused attention: tensors,
// pointwise, matmul, reduction and reshape operations, an operation graph, engine choice by the
// heuristics, and execution. The cuDNN frontend headers are not on these machines; this is the
// part of them the project needs, with every backend call checked.
//
// Usage: declare tensors (real ones carry a uid that binds a device pointer at execution; virtual
// ones live only inside the fused kernel; by-value scalars carry their host value), chain
// operations, then build() an ExecutionPlan once per shape and execute() it many times.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"

namespace gpt::cudnn_graph {

// Fatal check of a cuDNN call, with cuDNN's last error message.
#define GPT_CUDNN_CHECK(call)                                                                  \
  do {                                                                                         \
    const cudnnStatus_t gpt_cudnn_status_ = (call);                                            \
    if (gpt_cudnn_status_ != CUDNN_STATUS_SUCCESS) {                                           \
      GPT_FATAL() << #call << " failed: " << ::gpt::cudnn_graph::describe(gpt_cudnn_status_); \
    }                                                                                          \
  } while (false)

// The status name and cuDNN's last error message.
std::string describe(cudnnStatus_t status);

// An owned backend descriptor (cudnnBackendDescriptor_t).
class Descriptor {
 public:
  explicit Descriptor(cudnnBackendDescriptorType_t type);
  ~Descriptor();
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return descriptor_; }
  Descriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                  const void* values);
  Descriptor& set(cudnnBackendAttributeName_t name, const Descriptor& value);
  Descriptor& set(cudnnBackendAttributeName_t name, int64_t value);
  Descriptor& set(cudnnBackendAttributeName_t name, cudnnDataType_t value);
  void finalize();
  // Finalize that may fail (an engine configuration that does not support the graph).
  cudnnStatus_t try_finalize();

 private:
  cudnnBackendDescriptor_t descriptor_ = nullptr;
};

// Index of a tensor within a Graph.
struct TensorId {
  int index = -1;
};

// One planned graph, ready to run: the plan, its workspace size and the uids it binds.
class ExecutionPlan {
 public:
  ExecutionPlan(std::shared_ptr<Descriptor> plan, std::shared_ptr<const void> resources, int64_t workspace_bytes,
                std::string engine, std::vector<std::pair<int64_t, float>> by_value)
      : plan_(std::move(plan)), resources_(std::move(resources)), workspace_bytes_(workspace_bytes),
        engine_(std::move(engine)), by_value_(std::move(by_value)) {}

  int64_t workspace_bytes() const { return workspace_bytes_; }
  // The chosen engine (global index and notes), for logs.
  const std::string& engine() const { return engine_; }
  // Runs on the handle's stream: `bindings` give a device pointer for every real tensor's uid;
  // `workspace` holds at least workspace_bytes().
  void execute(cudnnHandle_t handle, const std::vector<std::pair<int64_t, void*>>& bindings, void* workspace) const;

 private:
  std::shared_ptr<Descriptor> plan_;
  std::shared_ptr<const void> resources_;  // the graph, its tensors and the engine config, kept alive
  int64_t workspace_bytes_;
  std::string engine_;
  std::vector<std::pair<int64_t, float>> by_value_;  // uid -> host value, bound at every run
};

class Graph {
 public:
  using Dims = std::vector<int64_t>;

  // A real tensor bound to device memory at execution under `uid` (> 0, unique in the graph).
  TensorId tensor(int64_t uid, cudnnDataType_t type, Dims dims, Dims strides);
  // A tensor that exists only inside the fused kernel.
  TensorId virtual_tensor(cudnnDataType_t type, Dims dims, Dims strides);
  // A virtual tensor with packed row-major strides.
  TensorId virtual_tensor(cudnnDataType_t type, const Dims& dims);
  // A float scalar passed by value (shape [1, 1, 1, 1]), broadcast against the other operand.
  TensorId scalar(float value);

  // y = mode(x [, b [, t]]). `compute` is the math precision (float unless a comparison wants
  // boolean). `axis` is GEN_INDEX's dimension.
  void pointwise(cudnnPointwiseMode_t mode, TensorId x, TensorId y, cudnnDataType_t compute = CUDNN_DATA_FLOAT);
  void pointwise(cudnnPointwiseMode_t mode, TensorId x, TensorId b, TensorId y,
                 cudnnDataType_t compute = CUDNN_DATA_FLOAT);
  void pointwise(cudnnPointwiseMode_t mode, TensorId x, TensorId b, TensorId t, TensorId y);
  void gen_index(TensorId x, int64_t axis, TensorId y);
  // c [.., m, n] = a [.., m, k] @ b [.., k, n] in FP32.
  void matmul(TensorId a, TensorId b, TensorId c);
  // y = reduce(x) over the dimensions where y has size 1, in FP32.
  void reduction(cudnnReduceTensorOp_t op, TensorId x, TensorId y);
  // y = x seen with other dims/strides (a transpose is a reshape with swapped strides).
  void reshape(TensorId x, TensorId y);

  // Finalizes the operation graph and picks the first engine configuration of the heuristics
  // (mode A, then the fallback list) that supports it; with `deterministic`, engines carrying the
  // NONDETERMINISTIC numerical note are skipped. Fatal with the reasons if none does; `name`
  // labels the messages.
  ExecutionPlan build(cudnnHandle_t handle, bool deterministic, const std::string& name);

 private:
  struct TensorInfo {
    std::shared_ptr<Descriptor> descriptor;
    int64_t uid;
    bool by_value;
    float value;
  };
  const Descriptor& desc(TensorId id) const;
  TensorId add_tensor(int64_t uid, cudnnDataType_t type, Dims dims, Dims strides, bool is_virtual, bool by_value,
                      float value);
  void add_pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t compute, int64_t axis,
                     std::initializer_list<std::pair<cudnnBackendAttributeName_t, TensorId>> ports);

  std::vector<TensorInfo> tensors_;
  std::vector<std::shared_ptr<Descriptor>> keep_alive_;  // op descriptors (pointwise, matmul, ...)
  std::vector<std::shared_ptr<Descriptor>> operations_;
  int64_t next_virtual_uid_ = int64_t{1} << 40;
};

// Packed row-major strides of `dims`.
std::vector<int64_t> packed_strides(const std::vector<int64_t>& dims);

}  // namespace gpt::cudnn_graph
