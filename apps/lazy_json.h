// rp::apps::LazyJson: a JSON document whose large arrays are made one element at a time, where they
// are read — written to a file in pieces (Stream) or walked by the text report — so that neither
// holds them whole. A `predict` of 2^20 devices has one report object per device: held as one
// nlohmann document they took 2.9 GB and most of the command's time.
//
// A node is one of
//   - a value: a nlohmann document, written as it is;
//   - an array of `size` elements made by a function when they are read (an element made null is
//     left out of the array);
//   - an object: a document's members and lazy members (nodes), written in nlohmann's key order.
// Stream writes exactly the text of nlohmann's dump of ToJson(), indent for indent, with the same
// replacement of bytes that are not UTF-8 (DumpJson, apps/report.h).
//
// Thread safety: const methods may run concurrently where the element functions may; an element
// function must give the same element each time (the text report and the file each read them).
//
// Example:
//   LazyJson doc = LazyJson::Object({{"schema", "x"}},
//                                   {{"devices", LazyJson::Array(n, [&](size_t i) { return Device(i); })}});
//   absl::Status st = doc.Stream(2, [&](std::string_view piece) { return file.Write(piece); });
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "runtime/text_sink.h"

namespace rp::apps {

class LazyJson {
 public:
  using Element = std::function<nlohmann::json(size_t index)>;
  using Members = std::vector<std::pair<std::string, LazyJson>>;

  // A value node.
  LazyJson(nlohmann::json value = nullptr);  // NOLINT(google-explicit-constructor): a value is a node
  // An array node of `size` elements, element i made by `element(i)` when read (null: left out).
  // `digest` (optional): element i with only some of its members, the same values — what a reader
  // that needs a few fields of every element reads instead (the text report's maxima over the
  // devices of a 2^20-device prediction: a whole object a device was half of `predict`'s time).
  static LazyJson Array(size_t size, Element element, Element digest = nullptr);
  // An object node: `members`' (an object) and the `lazy` ones (a key in both: the lazy member).
  static LazyJson Object(nlohmann::json members, Members lazy = {});

  // The whole document, every element made.
  nlohmann::json ToJson() const;
  // ToJson()'s text (nlohmann's dump with `indent`; < 0: compact) and a newline, handed to `sink` in
  // pieces (rp::TextPieces) as it is made. The sink's first error.
  // `threads` > 1: an array of at least kParallelElements elements is made and rendered in blocks
  // of kBlock elements by that many helper threads, while the calling thread hands each block's
  // text on in order — the same text; its element functions are then called concurrently and out
  // of order, so they must be safe to (a report's are: they read an immutable plan and
  // prediction). `sink` is only ever called from the calling thread.
  static constexpr size_t kBlock = 4096;
  static constexpr size_t kParallelElements = 2 * kBlock;
  absl::Status Stream(int indent, TextSink sink, int threads = 1) const;

  // An object's plain members (a value node's value; an array's: null) and its lazy member `key`
  // (nullptr: none, or not an object).
  const nlohmann::json& members() const { return value_; }
  const LazyJson* lazy(std::string_view key) const;
  // An array node's size, and its element i (made now; null if left out).
  size_t size() const { return size_; }
  nlohmann::json at(size_t i) const { return element_(i); }
  // Element i's digest (Array's `digest`), or the element itself without one.
  nlohmann::json digest(size_t i) const { return digest_ ? digest_(i) : element_(i); }

 private:
  friend class LazyJsonWriter;
  enum class Kind { kValue, kArray, kObject };
  Kind kind_ = Kind::kValue;
  nlohmann::json value_;
  size_t size_ = 0;
  Element element_, digest_;
  Members lazy_;  // sorted by key
};

// `json`'s text followed by a newline, handed to `sink` in pieces (a value node's Stream, without
// copying the document).
absl::Status StreamJson(const nlohmann::json& json, int indent, TextSink sink);

}  // namespace rp::apps
