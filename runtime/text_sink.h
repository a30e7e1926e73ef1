// rp::TextSink and rp::TextPieces: an export handed out piece by piece (a trace, a report), so that
// its text is never held whole — e.g. written straight into an output's temporary file.
//
// TextPieces collects appended text and hands it to the sink whenever about kPiece bytes are
// waiting, and the rest at Finish; an appended text of kPiece bytes or more goes to the sink as it
// is, after what was waiting. The sink's first error is kept: later text is dropped without
// calling it again, and Finish returns that error.
//
// Thread safety: single-threaded (an export runs on one thread).
//
// Example:
//   TextPieces out([&](std::string_view piece) { return file.Write(piece); });
//   for (const Row& r : rows) out.Append(Format(r));
//   RP_RETURN_IF_ERROR(out.Finish());
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"

namespace rp {

// Receives an export's text piece by piece, in order; an error stops the export.
using TextSink = absl::FunctionRef<absl::Status(std::string_view)>;

class TextPieces {
 public:
  static constexpr size_t kPiece = size_t{1} << 20;

  explicit TextPieces(TextSink sink) : sink_(sink) { text_.reserve(kPiece + 4096); }
  TextPieces(const TextPieces&) = delete;
  TextPieces& operator=(const TextPieces&) = delete;

  void Append(std::string_view s) {
    if (s.size() >= kPiece) {  // a piece of its own, not copied
      Flush();
      if (status_.ok()) status_ = sink_(s);
      return;
    }
    text_ += s;
    if (text_.size() >= kPiece) Flush();
  }
  void Append(char c) {
    text_ += c;
    if (text_.size() >= kPiece) Flush();
  }
  // Hands out what is left; the sink's first error, if it returned one.
  absl::Status Finish() {
    Flush();
    return status_;
  }

 private:
  void Flush() {
    if (status_.ok() && !text_.empty()) status_ = sink_(text_);
    text_.clear();
  }
  TextSink sink_;
  std::string text_;
  absl::Status status_;
};

}  // namespace rp
