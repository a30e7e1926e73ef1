// The SVG elements both kinds of chart draw (apps/svg_primitives.h).
#include "apps/svg_primitives.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "apps/svg.h"

namespace rp::apps::svg::primitives {
namespace {

constexpr const char* kFont = "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\"";

}  // namespace

std::string Num(double x) { return absl::StrFormat("%.2f", x); }

std::string Header(int width, int height) {
  return absl::StrCat("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n",
                      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"", width,
                      "\" height=\"", height, "\" viewBox=\"0 0 ", width, " ", height, "\" ", kFont,
                      ">\n<rect x=\"0\" y=\"0\" width=\"", width, "\" height=\"", height,
                      "\" fill=\"#ffffff\"/>\n");
}

std::string Text(double x, double y, std::string_view text, int size, const char* anchor, const char* extra) {
  return absl::StrCat("<text x=\"", Num(x), "\" y=\"", Num(y), "\" font-size=\"", size, "\" text-anchor=\"",
                      anchor, "\"", extra, ">", Escape(text), "</text>\n");
}

std::string Line(double x1, double y1, double x2, double y2, const char* stroke, double width,
                 const char* extra) {
  return absl::StrCat("<line x1=\"", Num(x1), "\" y1=\"", Num(y1), "\" x2=\"", Num(x2), "\" y2=\"", Num(y2),
                      "\" stroke=\"", stroke, "\" stroke-width=\"", Num(width), "\"", extra, "/>\n");
}

std::string Title(double x, double y, std::string_view text, int size, double width) {
  constexpr double kEm = 0.66;
  constexpr int kMinSize = 8;
  const double avail = std::max(1.0, width - 16);
  const double chars = static_cast<double>(std::max<size_t>(1, text.size()));
  int fit = std::min(size, static_cast<int>(std::floor(avail / (kEm * chars))));
  std::string shown(text);
  if (fit < kMinSize) {
    fit = kMinSize;
    size_t keep = static_cast<size_t>(avail / (kEm * kMinSize));
    keep = keep > 3 ? keep - 3 : 0;
    while (keep > 0 && (static_cast<unsigned char>(shown[keep]) & 0xc0) == 0x80) --keep;  // not inside a character
    shown = shown.substr(0, keep) + "...";
  }
  return Text(x, y, shown, fit, "middle", " font-weight=\"bold\"");
}

}  // namespace rp::apps::svg::primitives
