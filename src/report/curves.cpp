// Training curves as an SVG chart (report/curves.h): the axes, the three
// panels and their legends; reading the run folder is in curves_read.cpp,
// the PNG in curves_png.cpp.
#include "shardtrain/report/curves.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <sstream>

#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/log.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

// ---- drawing ------------------------------------------------------------------

const char* const kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                               "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
const char* const kDashes[] = {"", "7 4", "2 3", "10 3 2 3", "4 2 4 6"};
constexpr int kNumColors = sizeof(kColors) / sizeof(kColors[0]);
constexpr int kNumDashes = sizeof(kDashes) / sizeof(kDashes[0]);

constexpr double kWidth = 960, kPanelHeight = 270, kTop = 50;
constexpr double kLeft = 86, kRight = 230, kPanelTop = 34, kPanelBottom = 46;
// Series with few points (the reports of result.jsonl) get a dot at each one.
constexpr size_t kMaxMarkedPoints = 20;

// The length of the UTF-8 sequence at text[i] when it encodes a character XML
// 1.0 allows in text (no C0/C1 controls, surrogates, U+FFFE/U+FFFF, overlong
// forms); 0 when it does not.
size_t curves_xml_char_length(const std::string& text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  size_t n;
  uint32_t cp;
  if (b0 < 0x80) n = 1, cp = b0;
  else if (b0 >= 0xC2 && b0 <= 0xDF) n = 2, cp = b0 & 0x1Fu;
  else if (b0 >= 0xE0 && b0 <= 0xEF) n = 3, cp = b0 & 0x0Fu;
  else if (b0 >= 0xF0 && b0 <= 0xF4) n = 4, cp = b0 & 0x07u;
  else return 0;
  if (i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3Fu);
  }
  const uint32_t min_of_length[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min_of_length[n] || cp > 0x10FFFF) return 0;                    // overlong or past Unicode
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F)) return 0;                   // control characters
  if ((cp >= 0xD800 && cp <= 0xDFFF) || cp == 0xFFFE || cp == 0xFFFF) return 0;  // not XML characters
  return n;
}

// `text` (a title, a run folder's name: bytes from the user) as SVG text:
// every byte that does not start an allowed character (curves_xml_char_length)
// becomes U+FFFD, markup characters are escaped, and at most `max_chars`
// characters are kept ("..." marks a cut, which falls between characters).
// The result is always well-formed XML character data.
std::string escape(const std::string& text, size_t max_chars = std::string::npos) {
  std::string out;
  size_t chars = 0;
  for (size_t i = 0; i < text.size();) {
    if (chars + 1 > max_chars) {
      out += "...";
      break;
    }
    const size_t n = curves_xml_char_length(text, i);
    const char c = text[i];
    if (n == 0) out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
    else if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '"') out += "&quot;";
    else if (c == '\'') out += "&apos;";
    else out.append(text, i, n);
    i += n == 0 ? 1 : n;
    ++chars;
  }
  return out;
}

// The number of characters escape() sees in `text` (an invalid byte counts as one).
size_t curves_char_count(const std::string& text) {
  size_t chars = 0;
  for (size_t i = 0; i < text.size(); ++chars) {
    const size_t n = curves_xml_char_length(text, i);
    i += n == 0 ? 1 : n;
  }
  return chars;
}

// Legend text is not measured: long names are shortened to what fits, 30
// characters (not bytes: a cut never splits a UTF-8 character).
std::string legend_text(const std::string& text) {
  constexpr size_t kMaxChars = 30;
  return escape(text, curves_char_count(text) <= kMaxChars ? kMaxChars : kMaxChars - 3);
}

std::string label_of(const std::string& series) {
  if (series == "train_loss") return "train loss";
  if (series == "eval_loss") return "eval loss";
  if (series == "lr") return "learning rate";
  if (series.rfind("eval_", 0) == 0) return series.substr(5);
  return series;
}

// 1, 2 or 5 times a power of ten, about range / 5 (range > 0 and finite).
double nice_step(double range) {
  const double raw = range / 5;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (raw <= m * power * 1.0000001) return m * power;
  return 10 * power;
}

using Axis = CurveAxis;

// (v - lo) / (hi - lo) without overflow when hi - lo exceeds the largest double.
double axis_fraction(const Axis& a, double v) {
  const double span = a.hi - a.lo;
  if (std::isfinite(span)) return (v - a.lo) / span;
  return (v / 2 - a.lo / 2) / (a.hi / 2 - a.lo / 2);
}

std::string tick_text(double value, double step) {
  if (std::fabs(value) < step * 1e-6) return "0";
  const double magnitude = std::max(std::fabs(value), step);
  if (magnitude >= 1e-3 && magnitude < 1e6) {
    const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
    return str_format("%.*f", decimals, value);
  }
  // Enough digits that neighbouring ticks differ (curve_axis keeps step >= 1e-9 x magnitude).
  const int digits = std::clamp(static_cast<int>(std::floor(std::log10(magnitude)) - std::floor(std::log10(step))) + 1,
                                1, 12);
  return str_format("%.*g", digits, value);
}

struct Panel {
  std::string title, y_label, empty_note;
  std::vector<CurveSeries> RunCurves::*member;
};

// Where a panel is drawn: its plot area, and the axes that place values in it.
struct PanelArea {
  double left, right, top, bottom;
  const Axis& x;
  Axis y;
  double px(double v) const { return left + axis_fraction(x, v) * (right - left); }
  double py(double v) const { return bottom - axis_fraction(y, v) * (bottom - top); }
};

// How the curves are told apart: by colour, and by dash pattern.
struct PanelStyle {
  const std::vector<RunCurves>& runs;
  bool one_run, dashed_runs;
  const char* color_of(size_t run, size_t series) const { return kColors[(one_run ? series : run) % kNumColors]; }
  const char* run_dash(size_t run) const { return runs[run].dashed ? kDashes[1] : ""; }
  const char* dash_of(size_t series) const { return one_run || dashed_runs ? "" : kDashes[series % kNumDashes]; }
};

// Series names in first-seen order over all runs (one dash pattern each), and
// the range of their finite values (lo > hi when there is none).
struct PanelSeries {
  std::vector<std::string> names;
  double lo = INFINITY, hi = -INFINITY;
};

PanelSeries panel_series(const Panel& panel, const std::vector<RunCurves>& runs) {
  PanelSeries series;
  std::vector<std::string>& names = series.names;
  double& lo = series.lo;
  double& hi = series.hi;
  for (const RunCurves& run : runs)
    for (const CurveSeries& s : run.*panel.member) {
      if (std::find(names.begin(), names.end(), s.name) == names.end()) names.push_back(s.name);
      for (const CurvePoint& p : s.points)
        if (std::isfinite(p.value)) {
          lo = std::min(lo, p.value);
          hi = std::max(hi, p.value);
        }
    }
  return series;
}

// Grid, ticks and tick labels, the frame and the axis labels; the panel's note
// when it has no data.
void draw_axes(std::ostringstream& svg, const Panel& panel, const PanelArea& area, bool has_data) {
  const double plot_left = area.left, plot_right = area.right, plot_top = area.top, plot_bottom = area.bottom;
  const Axis& x = area.x;
  const Axis& y = area.y;
  svg << "<g class=\"grid\">\n";
  for (double t : x.ticks)
    svg << str_format("<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n", area.px(t), plot_top, area.px(t),
                      plot_bottom);
  if (has_data)
    for (double t : y.ticks)
      svg << str_format("<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n", plot_left, area.py(t), plot_right,
                        area.py(t));
  svg << "</g>\n<g class=\"tick-labels\">\n";
  for (double t : x.ticks)
    svg << str_format("<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">%s</text>\n", area.px(t), plot_bottom + 16,
                      tick_text(t, x.step).c_str());
  if (has_data)
    for (double t : y.ticks)
      svg << str_format("<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\">%s</text>\n", plot_left - 6, area.py(t) + 4,
                        tick_text(t, y.step).c_str());
  svg << "</g>\n";
  svg << str_format("<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" class=\"frame\"/>\n", plot_left,
                    plot_top, plot_right - plot_left, plot_bottom - plot_top);
  svg << str_format("<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" class=\"axis-label\">step</text>\n",
                    (plot_left + plot_right) / 2, plot_bottom + 36);
  svg << str_format("<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" class=\"axis-label\" "
                    "transform=\"rotate(-90 %.2f %.2f)\">%s</text>\n",
                    plot_left - 64, (plot_top + plot_bottom) / 2, plot_left - 64, (plot_top + plot_bottom) / 2,
                    escape(panel.y_label).c_str());
  if (!has_data)
    svg << str_format("<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" class=\"note\">%s</text>\n",
                      (plot_left + plot_right) / 2, (plot_top + plot_bottom) / 2, escape(panel.empty_note).c_str());
}

// The curves: a polyline per finite stretch, and dots where points are sparse (reports).
void draw_curves(std::ostringstream& svg, const Panel& panel, const PanelArea& area, const PanelStyle& style,
                 const std::vector<std::string>& names) {
  const std::vector<RunCurves>& runs = style.runs;
  for (size_t r = 0; r < runs.size(); ++r)
    for (const CurveSeries& s : runs[r].*panel.member) {
      const size_t k = std::find(names.begin(), names.end(), s.name) - names.begin();
      const char* dash = style.dashed_runs ? style.run_dash(r) : style.dash_of(k);
      svg << str_format("<g stroke=\"%s\" fill=\"%s\"%s%s>\n", style.color_of(r, k), style.color_of(r, k),
                        *dash ? " stroke-dasharray=\"" : "", *dash ? (std::string(dash) + "\"").c_str() : "");
      std::string points;
      auto flush_line = [&] {
        if (std::count(points.begin(), points.end(), ',') >= 2)
          svg << "<polyline fill=\"none\" stroke-width=\"1.8\" points=\"" << points << "\"/>\n";
        points.clear();
      };
      for (const CurvePoint& p : s.points) {
        if (!std::isfinite(p.value)) {
          flush_line();
          continue;
        }
        points += str_format("%s%.2f,%.2f", points.empty() ? "" : " ", area.px(p.step), area.py(p.value));
      }
      flush_line();
      if (s.points.size() <= kMaxMarkedPoints)
        for (const CurvePoint& p : s.points)
          if (std::isfinite(p.value))
            svg << str_format("<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\" stroke=\"none\"/>\n", area.px(p.step),
                              area.py(p.value));
      svg << "</g>\n";
    }
}

// Legend, right of the plot: series (one run), or runs then series (several).
void draw_legend(std::ostringstream& svg, const PanelArea& area, const PanelStyle& style,
                 const std::vector<std::string>& names) {
  const std::vector<RunCurves>& runs = style.runs;
  double ly = area.top + 12;
  const double lx = area.right + 16;
  auto entry = [&](const std::string& text, const char* color, const char* dash) {
    svg << str_format("<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" "
                      "stroke-width=\"2.5\"%s%s/>\n",
                      lx, ly - 4, lx + 26, ly - 4, color, *dash ? " stroke-dasharray=\"" : "",
                      *dash ? (std::string(dash) + "\"").c_str() : "");
    svg << str_format("<text x=\"%.2f\" y=\"%.2f\" class=\"legend\">%s</text>\n", lx + 32, ly,
                      legend_text(text).c_str());
    ly += 17;
  };
  if (style.one_run) {
    for (size_t k = 0; k < names.size(); ++k) entry(label_of(names[k]), style.color_of(0, k), "");
  } else {
    for (size_t r = 0; r < runs.size(); ++r) entry(runs[r].name, style.color_of(r, 0), style.run_dash(r));
    ly += 6;
    for (size_t k = 0; k < names.size(); ++k) entry(label_of(names[k]), "#444444", style.dash_of(k));
  }
}

void draw_panel(std::ostringstream& svg, const Panel& panel, const std::vector<RunCurves>& runs, double top,
                const Axis& x) {
  const double plot_left = kLeft, plot_right = kWidth - kRight;
  const double plot_top = top + kPanelTop, plot_bottom = top + kPanelHeight - kPanelBottom;
  svg << str_format("<text x=\"%.1f\" y=\"%.1f\" class=\"panel-title\">%s</text>\n", plot_left, top + 20,
                    escape(panel.title).c_str());
  const PanelSeries series = panel_series(panel, runs);
  const bool has_data = series.lo <= series.hi;
  const PanelArea area{plot_left, plot_right, plot_top, plot_bottom, x,
                       curve_axis(has_data ? series.lo : 0, has_data ? series.hi : 1, panel.member == &RunCurves::lr)};
  draw_axes(svg, panel, area, has_data);
  if (!has_data) return;
  const bool one_run = runs.size() == 1;
  const bool dashed_runs = std::any_of(runs.begin(), runs.end(), [](const RunCurves& run) { return run.dashed; });
  const PanelStyle style{runs, one_run, dashed_runs};
  draw_curves(svg, panel, area, style, series.names);
  draw_legend(svg, area, style, series.names);
}

}  // namespace

CurveAxis curve_axis(double lo, double hi, bool from_zero) {
  ST_ASSERT(std::isfinite(lo) && std::isfinite(hi) && lo <= hi, "curve_axis needs finite lo <= hi");
  if (from_zero) lo = std::min(lo, 0.0);
  // Below a relative width of 1e-9 (one ulp apart, or equal) the values cannot
  // be told apart by tick labels: widen around their middle to at least that.
  const double mid = lo / 2 + hi / 2;
  const double min_width = std::max(std::fabs(mid) * 1e-9, 1e-300);
  if (!(hi / 2 - lo / 2 >= min_width / 2)) {
    lo = std::max(mid - min_width, -std::numeric_limits<double>::max());
    hi = std::min(mid + min_width, std::numeric_limits<double>::max());
  }
  CurveAxis a;
  const double width = hi - lo;  // may round to infinity from +-1.7e308
  a.step = std::isfinite(width) ? nice_step(width) : 2 * nice_step(hi / 2 - lo / 2);
  if (!std::isfinite(a.step)) a.step = nice_step(hi / 2 - lo / 2);
  // Round out to whole steps where that stays finite.
  a.lo = std::floor(lo / a.step + 1e-9) * a.step;
  a.hi = std::ceil(hi / a.step - 1e-9) * a.step;
  if (!std::isfinite(a.lo) || a.lo > lo) a.lo = lo;
  if (!std::isfinite(a.hi) || a.hi < hi) a.hi = hi;
  // Ticks by index from the first multiple of the step: never an accumulating
  // sum that stops advancing. nice_step aims at 5 intervals, so this bound
  // (and the loop) ends after a dozen ticks at most.
  const double first = std::ceil(a.lo / a.step - 1e-9);
  for (int i = 0; i <= 12; ++i) {
    const double t = (first + i) * a.step;
    if (!std::isfinite(t) || t > a.hi + std::fabs(a.step) * 1e-6) break;
    if (a.ticks.empty() || t > a.ticks.back()) a.ticks.push_back(t);
  }
  return a;
}

std::string render_curves_svg(const std::vector<RunCurves>& runs, const std::string& title) {
  const Panel panels[] = {
      {"Loss", "loss", "no loss yet (progress.csv, result.jsonl)", &RunCurves::loss},
      {"Evaluation metrics", "metric", "no eval metrics in result.jsonl", &RunCurves::metrics},
      {"Learning rate", "learning rate", "no learning rate in progress.csv", &RunCurves::lr},
  };
  // One step axis for every panel, so that they line up.
  double max_step = 0;
  for (const RunCurves& run : runs)
    for (const Panel& panel : panels)
      for (const CurveSeries& s : run.*panel.member)
        for (const CurvePoint& p : s.points)
          if (std::isfinite(p.step)) max_step = std::max(max_step, p.step);
  const Axis x = curve_axis(0, std::max(max_step, 1.0), true);

  std::string heading = title;
  if (heading.empty()) {
    heading = "shardtrain: ";
    for (size_t r = 0; r < runs.size(); ++r) heading += (r ? ", " : "") + runs[r].name;
  }
  const int num_panels = sizeof(panels) / sizeof(panels[0]);
  const double height = kTop + num_panels * kPanelHeight + 10;
  std::ostringstream svg;
  svg << str_format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f "
                    "%.0f\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n",
                    kWidth, height, kWidth, height);
  svg << "<style>\n"
         ".title { font-size: 17px; font-weight: bold; }\n"
         ".panel-title { font-size: 14px; font-weight: bold; }\n"
         ".axis-label { font-size: 12px; fill: #333333; }\n"
         ".tick-labels text { font-size: 11px; fill: #444444; }\n"
         ".grid line { stroke: #e3e3e3; stroke-width: 1; }\n"
         ".frame { fill: none; stroke: #888888; stroke-width: 1; }\n"
         ".legend { font-size: 12px; fill: #222222; }\n"
         ".note { font-size: 13px; fill: #888888; font-style: italic; }\n"
         "</style>\n";
  svg << str_format("<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"#ffffff\"/>\n", kWidth, height);
  svg << str_format("<text x=\"%.1f\" y=\"30\" class=\"title\">%s</text>\n", kLeft, escape(heading).c_str());
  for (int i = 0; i < num_panels; ++i) draw_panel(svg, panels[i], runs, kTop + i * kPanelHeight, x);
  svg << "</svg>\n";
  return svg.str();
}

void write_run_curves_svg(const std::string& run_dir) {
  const std::string svg = render_curves_svg({read_run_curves(run_dir)});
  write_file_atomic((fs::path(run_dir) / "curves.svg").string(), svg);
}

}  // namespace shardtrain
