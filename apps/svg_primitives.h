// The SVG elements that apps/svg.cc (line and bar charts) and apps/svg_gantt.cc (Gantt charts) both
// draw: the document header, text, lines and a title that fits its width. Internal to apps/svg*.cc;
// callers use apps/svg.h. Every text is escaped (svg::Escape); numbers are written with 2 decimals.
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>

namespace rp::apps::svg::primitives {

// `x` with two decimals ("12.50"): every coordinate and size written.
std::string Num(double x);
// The XML declaration, the <svg> element of `width` × `height` px (DejaVu Sans) and a white background.
std::string Header(int width, int height);
// A <text> at (x, y) of `size` px, `anchor` "start" | "middle" | "end"; `extra` is appended to its
// attributes as given (e.g. " font-weight=\"bold\"").
std::string Text(double x, double y, std::string_view text, int size, const char* anchor, const char* extra = "");
// A <line> from (x1, y1) to (x2, y2); `extra` as Text's.
std::string Line(double x1, double y1, double x2, double y2, const char* stroke, double width,
                 const char* extra = "");
// A bold title centred at `x` on a line `width` px wide: its font (at most `size` px) shrinks so that
// the text fits (DejaVu Sans Bold: at most 0.66 em a character on average), down to 8 px; a title
// still too long is cut with "...".
std::string Title(double x, double y, std::string_view text, int size, double width);

}  // namespace rp::apps::svg::primitives
