// A chunk's scratch (model/layer_shapes.h's LayerWorkspace) is shared by its layers and by the
// blocks of each layer: a buffer written by one step is read by a later one (the MLP block's input
// gradient read by the second norm, d_residual kept in local_b through the whole attention block's
// backward). A Borrow states such a hold in code: taken when the holder first writes the buffer,
// given back when it goes out of scope. In debug builds (or built with GPT_CHECK_BORROWS) a borrow
// that overlaps one still held (two users of the same bytes: a view overlaps the buffer it is a
// view of) stops the process with both holders' names; in release builds a Borrow is the reference
// it wraps and checks nothing.
#pragma once

#include "core/tensor.h"

#if !defined(NDEBUG) || defined(GPT_CHECK_BORROWS)
#define GPT_WORKSPACE_BORROWS_CHECKED 1
#endif

namespace gpt {

class Borrow {
 public:
  // `holder`: a string literal naming who holds the buffer (for the debug check's message).
  Borrow(const Tensor& buffer, const char* holder) : buffer_(buffer) {
#ifdef GPT_WORKSPACE_BORROWS_CHECKED
    acquire(holder);
#else
    (void)holder;
#endif
  }
  ~Borrow() {
#ifdef GPT_WORKSPACE_BORROWS_CHECKED
    release();
#endif
  }
  Borrow(const Borrow&) = delete;
  Borrow& operator=(const Borrow&) = delete;

  const Tensor& operator*() const { return buffer_; }
  const Tensor* operator->() const { return &buffer_; }

 private:
#ifdef GPT_WORKSPACE_BORROWS_CHECKED
  void acquire(const char* holder);
  void release();
#endif
  Tensor buffer_;  // a view of the workspace buffer held
};

}  // namespace gpt
