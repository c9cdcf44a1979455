#include "kernels/cuda/cudnn_graph.h"

#include <algorithm>
#include <sstream>

namespace gpt::cudnn_graph {

std::string describe(cudnnStatus_t status) {
  char message[1024] = {0};
  cudnnGetLastErrorString(message, sizeof(message));
  std::string text = cudnnGetErrorString(status);
  if (message[0] != '\0') text += std::string(" (") + message + ")";
  return text;
}

std::vector<int64_t> packed_strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * dims[i + 1];
  return strides;
}

// ---- Descriptor ----------------------------------------------------------------------------------

Descriptor::Descriptor(cudnnBackendDescriptorType_t type) {
  GPT_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &descriptor_));
}

Descriptor::~Descriptor() {
  if (descriptor_ != nullptr) cudnnBackendDestroyDescriptor(descriptor_);
}

Descriptor& Descriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                            const void* values) {
  const cudnnStatus_t status = cudnnBackendSetAttribute(descriptor_, name, type, count, values);
  GPT_CHECK(status == CUDNN_STATUS_SUCCESS) << "cuDNN attribute " << static_cast<int>(name) << ": " << describe(status);
  return *this;
}

Descriptor& Descriptor::set(cudnnBackendAttributeName_t name, const Descriptor& value) {
  cudnnBackendDescriptor_t raw = value.get();
  return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
}

Descriptor& Descriptor::set(cudnnBackendAttributeName_t name, int64_t value) {
  return set(name, CUDNN_TYPE_INT64, 1, &value);
}

Descriptor& Descriptor::set(cudnnBackendAttributeName_t name, cudnnDataType_t value) {
  return set(name, CUDNN_TYPE_DATA_TYPE, 1, &value);
}

void Descriptor::finalize() { GPT_CUDNN_CHECK(cudnnBackendFinalize(descriptor_)); }

cudnnStatus_t Descriptor::try_finalize() { return cudnnBackendFinalize(descriptor_); }

// ---- Graph ---------------------------------------------------------------------------------------

TensorId Graph::add_tensor(int64_t uid, cudnnDataType_t type, Dims dims, Dims strides, bool is_virtual,
                           bool by_value, float value) {
  GPT_CHECK(dims.size() == strides.size() && !dims.empty()) << "cuDNN tensor rank";
  auto d = std::make_shared<Descriptor>(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t alignment = 16;
  d->set(CUDNN_ATTR_TENSOR_DATA_TYPE, type)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, static_cast<int64_t>(dims.size()), dims.data())
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, static_cast<int64_t>(strides.size()), strides.data())
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, alignment)
      .set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual)
      .set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
  d->finalize();
  tensors_.push_back({std::move(d), uid, by_value, value});
  return TensorId{static_cast<int>(tensors_.size()) - 1};
}

TensorId Graph::tensor(int64_t uid, cudnnDataType_t type, Dims dims, Dims strides) {
  GPT_CHECK(uid > 0 && uid < (int64_t{1} << 40)) << "cuDNN tensor uid " << uid;
  for (const TensorInfo& t : tensors_) GPT_CHECK_NE(t.uid, uid) << "duplicate cuDNN tensor uid";
  return add_tensor(uid, type, std::move(dims), std::move(strides), false, false, 0.0f);
}

TensorId Graph::virtual_tensor(cudnnDataType_t type, Dims dims, Dims strides) {
  return add_tensor(next_virtual_uid_++, type, std::move(dims), std::move(strides), true, false, 0.0f);
}

TensorId Graph::virtual_tensor(cudnnDataType_t type, const Dims& dims) {
  return virtual_tensor(type, dims, packed_strides(dims));
}

TensorId Graph::scalar(float value) {
  return add_tensor(next_virtual_uid_++, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true, value);
}

const Descriptor& Graph::desc(TensorId id) const {
  GPT_CHECK(id.index >= 0 && id.index < static_cast<int>(tensors_.size())) << "cuDNN tensor id";
  return *tensors_[static_cast<size_t>(id.index)].descriptor;
}

void Graph::add_pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t compute, int64_t axis,
                          std::initializer_list<std::pair<cudnnBackendAttributeName_t, TensorId>> ports) {
  auto pw = std::make_shared<Descriptor>(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw->set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode).set(CUDNN_ATTR_POINTWISE_MATH_PREC, compute);
  if (mode == CUDNN_POINTWISE_GEN_INDEX) pw->set(CUDNN_ATTR_POINTWISE_AXIS, axis);
  pw->finalize();
  auto op = std::make_shared<Descriptor>(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op->set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, *pw);
  for (const auto& [port, id] : ports) op->set(port, desc(id));
  const float one = 1.0f;
  op->set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one)
      .set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
  op->finalize();
  keep_alive_.push_back(std::move(pw));
  operations_.push_back(std::move(op));
}

void Graph::pointwise(cudnnPointwiseMode_t mode, TensorId x, TensorId y, cudnnDataType_t compute) {
  add_pointwise(mode, compute, 0, {{CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x}, {CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y}});
}

void Graph::pointwise(cudnnPointwiseMode_t mode, TensorId x, TensorId b, TensorId y, cudnnDataType_t compute) {
  add_pointwise(mode, compute, 0,
                {{CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x},
                 {CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b},
                 {CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y}});
}

void Graph::pointwise(cudnnPointwiseMode_t mode, TensorId x, TensorId b, TensorId t, TensorId y) {
  add_pointwise(mode, CUDNN_DATA_FLOAT, 0,
                {{CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x},
                 {CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b},
                 {CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t},
                 {CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y}});
}

void Graph::gen_index(TensorId x, int64_t axis, TensorId y) {
  add_pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, axis,
                {{CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x}, {CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y}});
}

void Graph::matmul(TensorId a, TensorId b, TensorId c) {
  auto mm = std::make_shared<Descriptor>(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  mm->set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT).finalize();
  auto op = std::make_shared<Descriptor>(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  op->set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, desc(a))
      .set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, desc(b))
      .set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, desc(c))
      .set(CUDNN_ATTR_OPERATION_MATMUL_DESC, *mm);
  op->finalize();
  keep_alive_.push_back(std::move(mm));
  operations_.push_back(std::move(op));
}

void Graph::reduction(cudnnReduceTensorOp_t reduce, TensorId x, TensorId y) {
  auto r = std::make_shared<Descriptor>(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  r->set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce)
      .set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT)
      .finalize();
  auto op = std::make_shared<Descriptor>(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  op->set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, desc(x))
      .set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, desc(y))
      .set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, *r);
  op->finalize();
  keep_alive_.push_back(std::move(r));
  operations_.push_back(std::move(op));
}

void Graph::reshape(TensorId x, TensorId y) {
  auto op = std::make_shared<Descriptor>(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  op->set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, desc(x)).set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, desc(y));
  op->finalize();
  operations_.push_back(std::move(op));
}

namespace {

// The engine configurations the heuristics propose for `graph` in `mode`, best first.
std::vector<std::shared_ptr<Descriptor>> engine_configs(const Descriptor& graph, cudnnBackendHeurMode_t mode) {
  Descriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heuristics.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)
      .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (heuristics.try_finalize() != CUDNN_STATUS_SUCCESS) return {};
  int64_t count = 0;
  GPT_CUDNN_CHECK(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                           CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
  std::vector<std::shared_ptr<Descriptor>> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    configs.push_back(std::make_shared<Descriptor>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(configs.back()->get());
  }
  int64_t returned = 0;
  if (count > 0) {
    GPT_CUDNN_CHECK(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                             CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &returned, raw.data()));
  }
  configs.resize(static_cast<size_t>(std::min(returned, count)));
  return configs;
}

struct EngineFacts {
  int64_t global_index = -1;
  bool nondeterministic = false;
  std::string notes;
};

EngineFacts engine_facts(const Descriptor& config) {
  EngineFacts facts;
  Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t raw = engine.get();
  int64_t count = 0;
  if (cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count,
                               &raw) != CUDNN_STATUS_SUCCESS) {
    return facts;
  }
  cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &count,
                           &facts.global_index);
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  int64_t note_count = 0;
  if (cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &note_count, notes) == CUDNN_STATUS_SUCCESS) {
    for (int64_t i = 0; i < note_count; ++i) {
      if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) facts.nondeterministic = true;
      facts.notes += " note" + std::to_string(static_cast<int>(notes[i]));
    }
  }
  return facts;
}

}  // namespace

ExecutionPlan Graph::build(cudnnHandle_t handle, bool deterministic, const std::string& name) {
  auto graph_holder = std::make_shared<Descriptor>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  Descriptor& graph = *graph_holder;
  std::vector<cudnnBackendDescriptor_t> ops;
  for (const auto& op : operations_) ops.push_back(op->get());
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops.size()), ops.data());
  // The handle attribute is deprecated (optional since cuDNN 9.8) but still required by older 9.x.
  graph.set(static_cast<cudnnBackendAttributeName_t>(800) /* CUDNN_ATTR_OPERATIONGRAPH_HANDLE */, CUDNN_TYPE_HANDLE,
            1, &handle);
  const cudnnStatus_t graph_status = graph.try_finalize();
  GPT_CHECK(graph_status == CUDNN_STATUS_SUCCESS)
      << "cuDNN does not accept the " << name << " operation graph: " << describe(graph_status);

  std::ostringstream refused;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    for (const std::shared_ptr<Descriptor>& config : engine_configs(graph, mode)) {
      const EngineFacts facts = engine_facts(*config);
      if (deterministic && facts.nondeterministic) {
        refused << " engine " << facts.global_index << ": nondeterministic;";
        continue;
      }
      auto plan = std::make_shared<Descriptor>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan->set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, *config)
          .set(static_cast<cudnnBackendAttributeName_t>(400) /* CUDNN_ATTR_EXECUTION_PLAN_HANDLE */,
               CUDNN_TYPE_HANDLE, 1, &handle);
      const cudnnStatus_t status = plan->try_finalize();
      if (status != CUDNN_STATUS_SUCCESS) {
        refused << " engine " << facts.global_index << ": " << describe(status) << ";";
        continue;
      }
      int64_t workspace = 0, count = 0;
      GPT_CUDNN_CHECK(cudnnBackendGetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                               CUDNN_TYPE_INT64, 1, &count, &workspace));
      std::vector<std::pair<int64_t, float>> by_value;
      for (const TensorInfo& t : tensors_) {
        if (t.by_value) by_value.emplace_back(t.uid, t.value);
      }
      // The plan refers to the engine configuration, the graph and through it every descriptor.
      struct Resources {
        std::vector<TensorInfo> tensors;
        std::vector<std::shared_ptr<Descriptor>> descriptors;
      };
      auto resources = std::make_shared<Resources>();
      resources->tensors = tensors_;
      resources->descriptors = keep_alive_;
      resources->descriptors.insert(resources->descriptors.end(), operations_.begin(), operations_.end());
      resources->descriptors.push_back(graph_holder);
      resources->descriptors.push_back(config);
      return ExecutionPlan(std::move(plan), std::move(resources), workspace,
                           "engine " + std::to_string(facts.global_index) + facts.notes, std::move(by_value));
    }
  }
  GPT_FATAL() << "no cuDNN engine runs the " << name << " graph:" << refused.str();
}

void ExecutionPlan::execute(cudnnHandle_t handle, const std::vector<std::pair<int64_t, void*>>& bindings,
                            void* workspace) const {
  std::vector<int64_t> uids;
  std::vector<void*> pointers;
  for (const auto& [uid, pointer] : bindings) {
    uids.push_back(uid);
    pointers.push_back(pointer);
  }
  // By-value scalars: cuDNN reads the host value at this call.
  std::vector<float> values;
  values.reserve(by_value_.size());
  for (const auto& [uid, value] : by_value_) {
    values.push_back(value);
    uids.push_back(uid);
    pointers.push_back(&values.back());
  }
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()), uids.data())
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(pointers.size()),
           pointers.data())
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize();
  GPT_CUDNN_CHECK(cudnnBackendExecute(handle, plan_->get(), pack.get()));
}

}  // namespace gpt::cudnn_graph
