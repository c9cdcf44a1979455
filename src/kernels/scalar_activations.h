// The scalar activations of the MLP, listed once for both backends (op_list.inc declares their
// ops: gelu_exact_forward / _backward, squared_relu_forward / _backward). Each backend writes, per
// activation, a policy with forward(v) and backward(g, v) in FP32 (y = f(x), dx = dy f'(x)), and
// the two templates that run a policy over a tensor:
//   activation_forward<Policy>(ctx, y, x, name)
//   activation_backward<Policy>(ctx, dx, dy, x, name)
// then defines the ops with GPT_SCALAR_ACTIVATIONS(GPT_DEFINE_SCALAR_ACTIVATION) in its namespace.
// A new scalar activation: its two ops in op_list.inc, a row here, a policy per backend.
#pragma once

// X(op name, policy)
#define GPT_SCALAR_ACTIVATIONS(X) \
  X(gelu_exact, ExactGelu)        \
  X(squared_relu, SquaredRelu)

// The forward and backward ops of one activation, from the backend's templates and its policy.
#define GPT_DEFINE_SCALAR_ACTIVATION(op, Policy)                                         \
  void op##_forward(Context& ctx, const Tensor& y, const Tensor& x) {                    \
    activation_forward<Policy>(ctx, y, x, #op);                                          \
  }                                                                                      \
  void op##_backward(Context& ctx, const Tensor& dx, const Tensor& dy, const Tensor& x) { \
    activation_backward<Policy>(ctx, dx, dy, x, #op);                                    \
  }
