// Status helpers used across ringpipe.
//
// Abseil 20220623 (Debian 12) ships neither status macros nor absl/log, so ringpipe defines its own:
//
//   RP_RETURN_IF_ERROR(expr)        evaluates `expr` (an absl::Status); returns it if not OK.
//   RP_ASSIGN_OR_RETURN(lhs, expr)  evaluates `expr` (an absl::StatusOr<T>); returns its status if
//                                   not OK, else moves the value into `lhs` (a declaration or an
//                                   lvalue), e.g. RP_ASSIGN_OR_RETURN(auto comm, Comm::Create(o));
//   RP_CHECK(cond) << "why"         if `cond` is false, returns absl::InternalError naming the
//                                   condition, file and line (plus the streamed text) from the
//                                   enclosing Status/StatusOr-returning function. An internal
//                                   invariant, not input validation: the library never aborts or
//                                   prints, so a broken invariant is still a Status.
//
// Each macro evaluates its argument exactly once.
#pragma once

#include <sstream>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define RP_CONCAT_INNER_(a, b) a##b
#define RP_CONCAT_(a, b) RP_CONCAT_INNER_(a, b)

#define RP_RETURN_IF_ERROR(expr)                             \
  do {                                                       \
    ::absl::Status rp_status_internal_ = (expr);             \
    if (!rp_status_internal_.ok()) return rp_status_internal_; \
  } while (0)

#define RP_ASSIGN_OR_RETURN(lhs, expr) \
  RP_ASSIGN_OR_RETURN_IMPL_(RP_CONCAT_(rp_statusor_internal_, __LINE__), lhs, expr)

#define RP_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return std::move(tmp).status();  \
  lhs = std::move(tmp).value()

namespace rp::internal {
// Collects the text streamed after RP_CHECK and converts to an InternalError.
class CheckFailure {
 public:
  CheckFailure(const char* cond, const char* file, int line) {
    os_ << "RP_CHECK failed: " << cond << " at " << file << ":" << line;
  }
  template <typename T>
  CheckFailure& operator<<(const T& v) {
    if (!has_text_) {
      os_ << ": ";
      has_text_ = true;
    }
    os_ << v;
    return *this;
  }
  operator absl::Status() const { return absl::InternalError(os_.str()); }  // NOLINT
  template <typename T>
  operator absl::StatusOr<T>() const {  // NOLINT
    return absl::StatusOr<T>(absl::InternalError(os_.str()));
  }

 private:
  std::ostringstream os_;
  bool has_text_ = false;
};
}  // namespace rp::internal

#define RP_CHECK(cond) \
  if (cond) {          \
  } else               \
    return ::rp::internal::CheckFailure(#cond, __FILE__, __LINE__)
