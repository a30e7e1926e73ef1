// LazyJson (apps/lazy_json.h): nlohmann's serializer for the values, the same layout around them for
// the lazy arrays and objects.
#include "apps/lazy_json.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <future>
#include <memory>
#include <string>

namespace rp::apps {

using json = nlohmann::json;

namespace {

// nlohmann's serializer writes through an output adapter; this one hands the text on in pieces.
class Pieces : public nlohmann::detail::output_adapter_protocol<char> {
 public:
  explicit Pieces(TextSink sink) : text(sink) {}
  void write_character(char c) override { text.Append(c); }
  void write_characters(const char* s, std::size_t length) override { text.Append(std::string_view(s, length)); }
  TextPieces text;
};

}  // namespace

// Writes a node where nlohmann's dump would write it: `level` is the current indent (spaces).
class LazyJsonWriter {
 public:
  LazyJsonWriter(TextSink sink, int indent, int threads = 1)
      : out_(std::make_shared<Pieces>(sink)),
        serializer_(out_, ' ', json::error_handler_t::replace),
        pretty_(indent >= 0),
        step_(static_cast<unsigned>(std::max(indent, 0))),
        threads_(std::max(threads, 1)) {}

  void Value(const json& v, unsigned level) { serializer_.dump(v, pretty_, false, step_, level); }

  void Write(const LazyJson& node, unsigned level) {
    switch (node.kind_) {
      case LazyJson::Kind::kValue: Value(node.value_, level); break;
      case LazyJson::Kind::kArray: Array(node, level); break;
      case LazyJson::Kind::kObject: Object(node, level); break;
    }
  }

  absl::Status Finish() {
    out_->text.Append('\n');
    return out_->text.Finish();
  }

 private:
  // Before the n-th item (0-based) of an array or object opened with `open`.
  void Item(size_t n, char open, unsigned level) {
    if (n == 0) {
      out_->text.Append(open);
      if (pretty_) out_->text.Append('\n');
    } else {
      out_->text.Append(pretty_ ? ",\n" : ",");
    }
    Indent(level + step_);
  }
  // After `items` items: nlohmann writes an empty array or object as "[]" or "{}".
  void Close(size_t items, char open, char close, unsigned level) {
    if (items == 0) {
      out_->text.Append(open);
    } else if (pretty_) {
      out_->text.Append('\n');
      Indent(level);
    }
    out_->text.Append(close);
  }
  void Indent(unsigned spaces) {
    if (pretty_) out_->text.Append(std::string(spaces, ' '));
  }

  // The items of elements [begin, end) of an array at `level`, each after its separator (",\n"
  // and the indent; compact: ","): what Array writes for them after the array's first item.
  std::string Block(const LazyJson& node, size_t begin, size_t end, unsigned level) const {
    std::string text;
    text.reserve(block_bytes_.load(std::memory_order_relaxed));  // about the last block's size
    nlohmann::detail::serializer<json> s(nlohmann::detail::output_adapter<char>(text), ' ',
                                         json::error_handler_t::replace);
    for (size_t i = begin; i < end; ++i) {
      const json e = node.element_(i);
      if (e.is_null()) continue;
      text += pretty_ ? ",\n" : ",";
      if (pretty_) text.append(level + step_, ' ');
      s.dump(e, pretty_, false, step_, level + step_);
    }
    block_bytes_.store(text.size() + text.size() / 8, std::memory_order_relaxed);
    return text;
  }

  // Array's text rendered by threads_ helper threads, a block each, while this thread hands the
  // finished blocks on in order (writing a large file is itself about a third of the work).
  void ParallelArray(const LazyJson& node, unsigned level) {
    const size_t n = node.size_, blocks = (n + LazyJson::kBlock - 1) / LazyJson::kBlock;
    auto render = [this, &node, level, n](size_t b) {
      return Block(node, b * LazyJson::kBlock, std::min(n, (b + 1) * LazyJson::kBlock), level);
    };
    std::deque<std::future<std::string>> ahead;
    size_t next = 0;  // the next block to hand to a helper
    bool any = false;
    for (size_t b = 0; b < blocks; ++b) {
      while (ahead.size() < static_cast<size_t>(threads_) && next < blocks) {
        ahead.push_back(std::async(std::launch::async, render, next++));
      }
      const std::string text = ahead.front().get();
      ahead.pop_front();
      if (text.empty()) continue;
      // The block's text starts with a separator; the array's first item opens the array instead.
      const size_t sep = pretty_ ? 2 : 1;
      if (!any) {
        out_->text.Append('[');
        if (pretty_) out_->text.Append('\n');
        out_->text.Append(std::string_view(text).substr(sep));
      } else {
        out_->text.Append(text);
      }
      any = true;
    }
    Close(any ? 1 : 0, '[', ']', level);
  }

  void Array(const LazyJson& node, unsigned level) {
    if (threads_ > 1 && node.size_ >= LazyJson::kParallelElements) {
      ParallelArray(node, level);
      return;
    }
    size_t items = 0;
    for (size_t i = 0; i < node.size_; ++i) {
      const json e = node.element_(i);
      if (e.is_null()) continue;
      Item(items++, '[', level);
      Value(e, level + step_);
    }
    Close(items, '[', ']', level);
  }

  // The plain and the lazy members merged in key order (both are sorted; a lazy one wins a tie).
  void Object(const LazyJson& node, unsigned level) {
    size_t items = 0;
    auto it = node.value_.cbegin();  // an object (LazyJson::Object)
    const auto end = node.value_.cend();
    auto lazy = node.lazy_.begin();
    while (it != end || lazy != node.lazy_.end()) {
      const bool take_lazy = it == end || (lazy != node.lazy_.end() && lazy->first <= it.key());
      const std::string& key = take_lazy ? lazy->first : it.key();
      Item(items++, '{', level);
      Value(json(key), level + step_);
      out_->text.Append(pretty_ ? ": " : ":");
      if (take_lazy) {
        if (it != end && it.key() == lazy->first) ++it;
        Write(lazy->second, level + step_);
        ++lazy;
      } else {
        Value(*it, level + step_);
        ++it;
      }
    }
    Close(items, '{', '}', level);
  }

  std::shared_ptr<Pieces> out_;
  nlohmann::detail::serializer<json> serializer_;
  const bool pretty_;
  const unsigned step_;
  const int threads_;
  mutable std::atomic<size_t> block_bytes_{0};  // a hint for the next block's text
};

LazyJson::LazyJson(json value) : value_(std::move(value)) {}

LazyJson LazyJson::Array(size_t size, Element element, Element digest) {
  LazyJson node;
  node.kind_ = Kind::kArray;
  node.size_ = size;
  node.element_ = std::move(element);
  node.digest_ = std::move(digest);
  return node;
}

LazyJson LazyJson::Object(json members, Members lazy) {
  LazyJson node(members.is_object() ? std::move(members) : json::object());
  node.kind_ = Kind::kObject;
  // nlohmann's objects order their keys as std::string's operator< does.
  std::stable_sort(lazy.begin(), lazy.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  node.lazy_ = std::move(lazy);
  return node;
}

const LazyJson* LazyJson::lazy(std::string_view key) const {
  for (const auto& [k, v] : lazy_) {
    if (k == key) return &v;
  }
  return nullptr;
}

json LazyJson::ToJson() const {
  switch (kind_) {
    case Kind::kValue: return value_;
    case Kind::kArray: {
      json a = json::array();
      for (size_t i = 0; i < size_; ++i) {
        json e = element_(i);
        if (!e.is_null()) a.push_back(std::move(e));
      }
      return a;
    }
    case Kind::kObject: {
      json o = value_;
      for (const auto& [k, v] : lazy_) o[k] = v.ToJson();
      return o;
    }
  }
  return nullptr;
}

absl::Status LazyJson::Stream(int indent, TextSink sink, int threads) const {
  LazyJsonWriter writer(sink, indent, threads);
  writer.Write(*this, 0);
  return writer.Finish();
}

absl::Status StreamJson(const json& j, int indent, TextSink sink) {
  LazyJsonWriter writer(sink, indent);
  writer.Value(j, 0);
  return writer.Finish();
}

}  // namespace rp::apps
