// absl::Status helpers. Recoverable conditions (configuration, files, data) are returned as
// absl::Status / absl::StatusOr and reach the user as one message; broken invariants use
// GPT_CHECK (core/check.h).
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/check.h"

#define GPT_STATUS_CONCAT_INNER(a, b) a##b
#define GPT_STATUS_CONCAT(a, b) GPT_STATUS_CONCAT_INNER(a, b)

#define GPT_RETURN_IF_ERROR(expr)                    \
  do {                                               \
    ::absl::Status gpt_status_ = (expr);             \
    if (!gpt_status_.ok()) return gpt_status_;       \
  } while (false)

#define GPT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

#define GPT_ASSIGN_OR_RETURN(lhs, expr) \
  GPT_ASSIGN_OR_RETURN_IMPL(GPT_STATUS_CONCAT(gpt_statusor_, __LINE__), lhs, expr)

// Ends the process with the status message if it is not OK (for places where an error can only
// be a broken invariant, e.g. inside tests or after validation already passed).
#define GPT_CHECK_OK(expr)                                                    \
  do {                                                                        \
    ::absl::Status gpt_status_ = (expr);                                      \
    GPT_CHECK(gpt_status_.ok()) << gpt_status_.message();                     \
  } while (false)
