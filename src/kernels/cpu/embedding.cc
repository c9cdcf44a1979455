// Token (vocab-parallel) and learned absolute position embeddings.
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/element.h"

namespace gpt::cpu {

void embedding_forward(Context& ctx, const Tensor& out, const Tensor& tokens, const Tensor& table, int64_t vocab_start) {
  const int64_t rows = tokens.numel(), h = table.cols(), local_vocab = table.rows();
  GPT_CHECK(out.rows() == rows && out.cols() == h && out.dtype() == table.dtype()) << "embedding output";
  const int32_t* ids = tokens.data_as<int32_t>();
  dispatch_float_type(table.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* weights = table.data_as<T>();
    T* result = out.data_as<T>();
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t local = static_cast<int64_t>(ids[r]) - vocab_start;
      const bool here = local >= 0 && local < local_vocab;
      for (int64_t j = 0; j < h; ++j) result[r * h + j] = here ? weights[local * h + j] : T(0.0f);
    }
  });
}

void embedding_backward(Context& ctx, const Tensor& dtable, const Tensor& dout, const Tensor& tokens, int64_t vocab_start) {
  const int64_t rows = tokens.numel(), h = dtable.cols(), local_vocab = dtable.rows();
  GPT_CHECK(dout.rows() == rows && dout.cols() == h) << "embedding backward shapes";
  const int32_t* ids = tokens.data_as<int32_t>();
  float* grad = dtable.data_as<float>();
  dispatch_float_type(dout.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* d = dout.data_as<T>();
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t local = static_cast<int64_t>(ids[r]) - vocab_start;
      if (local < 0 || local >= local_vocab) continue;
      for (int64_t j = 0; j < h; ++j) grad[local * h + j] += load(d, r * h + j);
    }
  });
}

void position_embedding_forward(Context& ctx, const Tensor& out, const Tensor& table, int64_t batch,
                                int64_t position_offset) {
  const int64_t rows = out.rows(), h = out.cols();
  GPT_CHECK(table.cols() == h && rows % batch == 0 && position_offset + rows / batch <= table.rows())
      << "position embedding: " << out.to_string() << " with table " << table.to_string();
  dispatch_float_type(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* weights = table.data_as<T>();
    T* result = out.data_as<T>();
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t position = position_offset + r / batch;
      for (int64_t j = 0; j < h; ++j) store(result, r * h + j, load(result, r * h + j) + load(weights, position * h + j));
    }
  });
}

void position_embedding_backward(Context& ctx, const Tensor& dtable, const Tensor& dout, int64_t batch,
                                 int64_t position_offset) {
  const int64_t rows = dout.rows(), h = dout.cols();
  GPT_CHECK(dtable.cols() == h && rows % batch == 0 && position_offset + rows / batch <= dtable.rows())
      << "position embedding backward shapes";
  float* grad = dtable.data_as<float>();
  dispatch_float_type(dout.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* d = dout.data_as<T>();
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t position = position_offset + r / batch;
      for (int64_t j = 0; j < h; ++j) grad[position * h + j] += load(d, r * h + j);
    }
  });
}

}  // namespace gpt::cpu
