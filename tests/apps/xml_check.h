// A minimal XML well-formedness checker for the SVG tests (no XML library in the tree): one root
// element, properly nested and closed tags, quoted attribute values without '<', only the five
// predefined entities or numeric character references after '&', an optional <?xml ...?> prolog and
// comments. It also collects what the tests look at: element counts, attribute values and text.
#pragma once

#include <cctype>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace rp::apps::testing {

struct XmlDoc {
  bool ok = false;
  std::string error;                  // first problem, with its byte offset
  std::string root;                   // root element name
  std::map<std::string, int> elements;  // element name → count
  std::vector<std::pair<std::string, std::string>> attributes;  // (name, unescaped value), document order
  std::vector<std::string> texts;     // unescaped non-blank text nodes, document order
};

namespace xml_internal {

inline bool NameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == ':' || c == '.';
}

// Unescapes entity references in s; false on a bad or unknown reference or a raw '<'.
inline bool Unescape(std::string_view s, std::string* out) {
  out->clear();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') return false;
    if (s[i] != '&') {
      out->push_back(s[i]);
      continue;
    }
    const size_t semi = s.find(';', i);
    if (semi == std::string_view::npos) return false;
    const std::string_view ent = s.substr(i + 1, semi - i - 1);
    if (ent == "amp") out->push_back('&');
    else if (ent == "lt") out->push_back('<');
    else if (ent == "gt") out->push_back('>');
    else if (ent == "quot") out->push_back('"');
    else if (ent == "apos") out->push_back('\'');
    else if (ent.size() >= 2 && ent[0] == '#') {
      for (size_t k = 1; k < ent.size(); ++k) {
        if (!std::isxdigit(static_cast<unsigned char>(ent[k])) && !(k == 1 && ent[k] == 'x')) return false;
      }
      out->push_back('?');
    } else {
      return false;
    }
    i = semi;
  }
  return true;
}

}  // namespace xml_internal

inline XmlDoc ParseXml(std::string_view s) {
  using namespace xml_internal;
  XmlDoc doc;
  std::vector<std::string> stack;
  bool root_closed = false;
  size_t i = 0;
  auto fail = [&](const std::string& why) {
    doc.ok = false;
    doc.error = why + " at byte " + std::to_string(i);
    return doc;
  };
  auto skip_ws = [&] {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  };
  if (s.substr(0, 5) == "<?xml") {
    const size_t end = s.find("?>");
    if (end == std::string_view::npos) return fail("unterminated prolog");
    i = end + 2;
  }
  while (i < s.size()) {
    if (s[i] != '<') {
      const size_t next = s.find('<', i);
      const std::string_view text = s.substr(i, next == std::string_view::npos ? s.size() - i : next - i);
      std::string un;
      if (!Unescape(text, &un)) return fail("bad character or entity in text");
      bool blank = true;
      for (char c : un) blank = blank && std::isspace(static_cast<unsigned char>(c));
      if (!blank) {
        if (stack.empty()) return fail("text outside the root element");
        doc.texts.push_back(un);
      }
      i += text.size();
      continue;
    }
    if (s.substr(i, 4) == "<!--") {
      const size_t end = s.find("-->", i + 4);
      if (end == std::string_view::npos) return fail("unterminated comment");
      i = end + 3;
      continue;
    }
    if (s.substr(i, 2) == "</") {
      i += 2;
      const size_t start = i;
      while (i < s.size() && NameChar(s[i])) ++i;
      const std::string name(s.substr(start, i - start));
      skip_ws();
      if (i >= s.size() || s[i] != '>') return fail("bad closing tag");
      ++i;
      if (stack.empty() || stack.back() != name) return fail("closing </" + name + "> does not match");
      stack.pop_back();
      if (stack.empty()) root_closed = true;
      continue;
    }
    // Start tag.
    ++i;
    const size_t start = i;
    while (i < s.size() && NameChar(s[i])) ++i;
    if (i == start) return fail("empty element name");
    const std::string name(s.substr(start, i - start));
    if (stack.empty()) {
      if (root_closed || !doc.root.empty()) return fail("second root element <" + name + ">");
      doc.root = name;
    }
    ++doc.elements[name];
    std::map<std::string, bool> seen;
    while (true) {
      const bool had_ws = i < s.size() && std::isspace(static_cast<unsigned char>(s[i]));
      skip_ws();
      if (i >= s.size()) return fail("unterminated tag <" + name + ">");
      if (s[i] == '>') {
        ++i;
        stack.push_back(name);
        break;
      }
      if (s.substr(i, 2) == "/>") {
        i += 2;
        if (stack.empty()) root_closed = true;
        break;
      }
      if (!had_ws) return fail("attributes must be separated by whitespace in <" + name + ">");
      const size_t an = i;
      while (i < s.size() && NameChar(s[i])) ++i;
      if (i == an) return fail("bad attribute in <" + name + ">");
      const std::string attr(s.substr(an, i - an));
      if (seen[attr]) return fail("duplicate attribute " + attr);
      seen[attr] = true;
      skip_ws();
      if (i >= s.size() || s[i] != '=') return fail("attribute " + attr + " without '='");
      ++i;
      skip_ws();
      if (i >= s.size() || (s[i] != '"' && s[i] != '\'')) return fail("unquoted value of " + attr);
      const char q = s[i++];
      const size_t end = s.find(q, i);
      if (end == std::string_view::npos) return fail("unterminated value of " + attr);
      std::string un;
      if (!Unescape(s.substr(i, end - i), &un)) return fail("bad character or entity in " + attr);
      doc.attributes.emplace_back(attr, un);
      i = end + 1;
    }
  }
  if (!stack.empty()) return fail("<" + stack.back() + "> is not closed");
  if (doc.root.empty()) return fail("no root element");
  doc.ok = true;
  return doc;
}

// Values of attribute `name`, in document order.
inline std::vector<std::string> AttributeValues(const XmlDoc& doc, const std::string& name) {
  std::vector<std::string> out;
  for (const auto& [n, v] : doc.attributes) {
    if (n == name) out.push_back(v);
  }
  return out;
}

}  // namespace rp::apps::testing
