// Fatal checks for broken invariants. A failing check prints the rank, the condition, the file and
// line and the streamed message, then ends the process through the fatal handler (which the
// parallel layer points at MPI_Abort so that the whole job stops, not just this rank).
//
//   GPT_CHECK(x.numel() == y.numel()) << "shapes " << x.shape_string() << " vs " << ...;
//   GPT_CHECK_EQ(a, b);
#pragma once

#include <sstream>
#include <string>

namespace gpt {

using FatalHandler = void (*)(int exit_code);
// Replaces the function that ends the process after a fatal message (default: std::abort).
void set_fatal_handler(FatalHandler handler);
[[noreturn]] void fatal_exit(int exit_code);

namespace internal {

class FatalMessage {
 public:
  FatalMessage(const char* file, int line, const char* condition);
  [[noreturn]] ~FatalMessage();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Lets GPT_CHECK be used as a statement that also accepts `<< message`.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace internal
}  // namespace gpt

#define GPT_CHECK(condition)                                   \
  (condition) ? (void)0                                        \
              : ::gpt::internal::Voidify() &                   \
                    ::gpt::internal::FatalMessage(__FILE__, __LINE__, #condition).stream()

#define GPT_CHECK_OP(op, a, b)                                                                  \
  ((a)op(b)) ? (void)0                                                                          \
             : ::gpt::internal::Voidify() &                                                     \
                   ::gpt::internal::FatalMessage(__FILE__, __LINE__, #a " " #op " " #b).stream() \
                       << "(" << (a) << " vs " << (b) << ") "

#define GPT_CHECK_EQ(a, b) GPT_CHECK_OP(==, a, b)
#define GPT_CHECK_NE(a, b) GPT_CHECK_OP(!=, a, b)
#define GPT_CHECK_LE(a, b) GPT_CHECK_OP(<=, a, b)
#define GPT_CHECK_LT(a, b) GPT_CHECK_OP(<, a, b)
#define GPT_CHECK_GE(a, b) GPT_CHECK_OP(>=, a, b)
#define GPT_CHECK_GT(a, b) GPT_CHECK_OP(>, a, b)

#define GPT_FATAL() ::gpt::internal::FatalMessage(__FILE__, __LINE__, nullptr).stream()
