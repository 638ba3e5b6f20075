#include "shardtrain/report/curves.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <filesystem>
#include <memory>
#include <sstream>

#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/log.h"

#ifdef SHARDTRAIN_HAVE_RSVG
#include <cairo.h>
#include <librsvg/rsvg.h>
#endif

namespace shardtrain {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// ---- reading ------------------------------------------------------------------

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
    start = end + 1;
  }
  return lines;
}

std::vector<std::string> split_commas(const std::string& line) {
  std::vector<std::string> fields;
  size_t start = 0;
  for (;;) {
    const size_t comma = line.find(',', start);
    fields.push_back(line.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return fields;
}

bool parse_number(const std::string& text, double* out) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return false;
  errno = 0;
  char* end = nullptr;
  *out = std::strtod(text.c_str(), &end);
  return *end == '\0' && errno != ERANGE;
}

CurveSeries* series_named(std::vector<CurveSeries>& list, const std::string& name) {
  for (auto& s : list)
    if (s.name == name) return &s;
  list.push_back({name, {}});
  return &list.back();
}

void read_progress(const std::string& path, RunCurves& run) {
  const std::vector<std::string> lines = split_lines(read_file(path, "curves"));
  if (lines.empty())
    throw Error(path + ":1: empty file; expected the header line step,epoch,loss,lr,grad_norm,samples_per_s,"
                       "tokens_per_s,elapsed_s,loss_scale,skipped_steps");
  const std::vector<std::string> header = split_commas(lines[0]);
  auto column = [&](const char* name) -> int {
    const auto it = std::find(header.begin(), header.end(), name);
    return it == header.end() ? -1 : static_cast<int>(it - header.begin());
  };
  const int step_column = column("step"), loss_column = column("loss"), lr_column = column("lr");
  if (step_column < 0)
    throw Error(path + ":1: the header '" + lines[0] + "' has no 'step' column (shardtrain's is step,epoch,loss,lr,"
                       "grad_norm,samples_per_s,tokens_per_s,elapsed_s,loss_scale,skipped_steps)");
  CurveSeries train_loss{"train_loss", {}}, lr{"lr", {}};
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string where = path + ":" + std::to_string(i + 1);
    if (lines[i].empty()) throw Error(where + ": empty line");
    const std::vector<std::string> fields = split_commas(lines[i]);
    if (fields.size() != header.size())
      throw Error(str_format("%s: expected %zu comma-separated values (%s), got %zu", where.c_str(), header.size(),
                             lines[0].c_str(), fields.size()));
    for (size_t f = 0; f < fields.size(); ++f) {
      double value = 0;
      if (!parse_number(fields[f], &value))
        throw Error(where + ": " + header[f] + " = '" + fields[f] + "' is not a number");
    }
    double step = 0;
    parse_number(fields[step_column], &step);
    if (!(step >= 0) || !std::isfinite(step) || step != std::floor(step))
      throw Error(where + ": step = '" + fields[step_column] + "' is not a step number (an integer >= 0)");
    double value = 0;
    if (loss_column >= 0 && parse_number(fields[loss_column], &value)) train_loss.points.push_back({step, value});
    if (lr_column >= 0 && parse_number(fields[lr_column], &value)) lr.points.push_back({step, value});
  }
  if (!train_loss.points.empty()) run.loss.push_back(std::move(train_loss));
  if (!lr.points.empty()) run.lr.push_back(std::move(lr));
}

void read_results(const std::string& path, RunCurves& run, bool want_train_loss) {
  const std::vector<std::string> lines = split_lines(read_file(path, "curves"));
  std::vector<CurveSeries> loss;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string where = path + ":" + std::to_string(i + 1);
    if (lines[i].empty()) throw Error(where + ": empty line");
    Json line;
    try {
      line = Json::parse(lines[i]);
    } catch (const Json::exception& e) {
      throw Error(where + ": not JSON (" + e.what() + ")");
    }
    if (!line.is_object()) throw Error(where + ": expected a JSON object {\"step\": ..., metrics}");
    const auto step = line.find("step");
    if (step == line.end() || !step->is_number_integer() || step->get<int64_t>() < 0)
      throw Error(where + ": no \"step\" (an integer >= 0)");
    const double x = static_cast<double>(step->get<int64_t>());
    for (const auto& item : line.items()) {
      const std::string& key = item.key();
      if (!item.value().is_number()) continue;  // "checkpoint", or null for a metric that was NaN
      const double y = item.value().get<double>();
      if (key == "eval_loss" || (key == "train_loss" && want_train_loss))
        series_named(loss, key)->points.push_back({x, y});
      else if (key.rfind("eval_", 0) == 0 && key != "eval_seconds")
        series_named(run.metrics, key)->points.push_back({x, y});
    }
  }
  // train loss first, then eval loss, whatever order the JSON keys came in.
  std::sort(loss.begin(), loss.end(), [](const CurveSeries& a, const CurveSeries& b) { return a.name > b.name; });
  for (auto& s : loss) run.loss.push_back(std::move(s));
}

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

void draw_panel(std::ostringstream& svg, const Panel& panel, const std::vector<RunCurves>& runs, double top,
                const Axis& x) {
  const double plot_left = kLeft, plot_right = kWidth - kRight;
  const double plot_top = top + kPanelTop, plot_bottom = top + kPanelHeight - kPanelBottom;
  svg << str_format("<text x=\"%.1f\" y=\"%.1f\" class=\"panel-title\">%s</text>\n", plot_left, top + 20,
                    escape(panel.title).c_str());

  // Series names in first-seen order over all runs: one dash pattern each.
  std::vector<std::string> names;
  double lo = INFINITY, hi = -INFINITY;
  for (const RunCurves& run : runs)
    for (const CurveSeries& s : run.*panel.member) {
      if (std::find(names.begin(), names.end(), s.name) == names.end()) names.push_back(s.name);
      for (const CurvePoint& p : s.points)
        if (std::isfinite(p.value)) {
          lo = std::min(lo, p.value);
          hi = std::max(hi, p.value);
        }
    }
  const bool has_data = lo <= hi;
  const Axis y = curve_axis(has_data ? lo : 0, has_data ? hi : 1, panel.member == &RunCurves::lr);
  auto px = [&](double v) { return plot_left + axis_fraction(x, v) * (plot_right - plot_left); };
  auto py = [&](double v) { return plot_bottom - axis_fraction(y, v) * (plot_bottom - plot_top); };

  // Grid, ticks and tick labels.
  svg << "<g class=\"grid\">\n";
  for (double t : x.ticks)
    svg << str_format("<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n", px(t), plot_top, px(t), plot_bottom);
  if (has_data)
    for (double t : y.ticks)
      svg << str_format("<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n", plot_left, py(t), plot_right,
                        py(t));
  svg << "</g>\n<g class=\"tick-labels\">\n";
  for (double t : x.ticks)
    svg << str_format("<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">%s</text>\n", px(t), plot_bottom + 16,
                      tick_text(t, x.step).c_str());
  if (has_data)
    for (double t : y.ticks)
      svg << str_format("<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\">%s</text>\n", plot_left - 6, py(t) + 4,
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
  if (!has_data) {
    svg << str_format("<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" class=\"note\">%s</text>\n",
                      (plot_left + plot_right) / 2, (plot_top + plot_bottom) / 2, escape(panel.empty_note).c_str());
    return;
  }

  // The curves: a polyline per finite stretch, and dots where points are sparse (reports).
  const bool one_run = runs.size() == 1;
  auto color_of = [&](size_t run, size_t series) { return kColors[(one_run ? series : run) % kNumColors]; };
  const bool dashed_runs = std::any_of(runs.begin(), runs.end(), [](const RunCurves& run) { return run.dashed; });
  auto run_dash = [&](size_t run) { return runs[run].dashed ? kDashes[1] : ""; };
  auto dash_of = [&](size_t series) { return one_run || dashed_runs ? "" : kDashes[series % kNumDashes]; };
  for (size_t r = 0; r < runs.size(); ++r)
    for (const CurveSeries& s : runs[r].*panel.member) {
      const size_t k = std::find(names.begin(), names.end(), s.name) - names.begin();
      const char* dash = dashed_runs ? run_dash(r) : dash_of(k);
      svg << str_format("<g stroke=\"%s\" fill=\"%s\"%s%s>\n", color_of(r, k), color_of(r, k),
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
        points += str_format("%s%.2f,%.2f", points.empty() ? "" : " ", px(p.step), py(p.value));
      }
      flush_line();
      if (s.points.size() <= kMaxMarkedPoints)
        for (const CurvePoint& p : s.points)
          if (std::isfinite(p.value))
            svg << str_format("<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\" stroke=\"none\"/>\n", px(p.step), py(p.value));
      svg << "</g>\n";
    }

  // Legend, right of the plot: series (one run), or runs then series (several).
  double ly = plot_top + 12;
  const double lx = plot_right + 16;
  auto entry = [&](const std::string& text, const char* color, const char* dash) {
    svg << str_format("<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" "
                      "stroke-width=\"2.5\"%s%s/>\n",
                      lx, ly - 4, lx + 26, ly - 4, color, *dash ? " stroke-dasharray=\"" : "",
                      *dash ? (std::string(dash) + "\"").c_str() : "");
    svg << str_format("<text x=\"%.2f\" y=\"%.2f\" class=\"legend\">%s</text>\n", lx + 32, ly,
                      legend_text(text).c_str());
    ly += 17;
  };
  if (one_run) {
    for (size_t k = 0; k < names.size(); ++k) entry(label_of(names[k]), color_of(0, k), "");
  } else {
    for (size_t r = 0; r < runs.size(); ++r) entry(runs[r].name, color_of(r, 0), run_dash(r));
    ly += 6;
    for (size_t k = 0; k < names.size(); ++k) entry(label_of(names[k]), "#444444", dash_of(k));
  }
}

#ifdef SHARDTRAIN_HAVE_RSVG
struct GObjectUnref {
  void operator()(gpointer p) const { g_object_unref(p); }
};
struct CairoDestroy {
  void operator()(cairo_t* cr) const { cairo_destroy(cr); }
};
struct SurfaceDestroy {
  void operator()(cairo_surface_t* s) const { cairo_surface_destroy(s); }
};
std::string take_message(GError* error) {
  const std::string message = error && error->message ? error->message : "unknown error";
  if (error) g_error_free(error);
  return message;
}
cairo_status_t append_png(void* closure, const unsigned char* data, unsigned int length) {
  static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
  return CAIRO_STATUS_SUCCESS;
}
#endif

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

RunCurves read_run_curves(const std::string& run_dir, const std::string& name) {
  std::error_code error;
  if (!fs::is_directory(run_dir, error)) throw Error(run_dir + ": no such run folder");
  const std::string progress = (fs::path(run_dir) / "progress.csv").string();
  const std::string results = (fs::path(run_dir) / "result.jsonl").string();
  const bool has_progress = fs::exists(progress, error), has_results = fs::exists(results, error);
  if (!has_progress && !has_results)
    throw Error(run_dir + ": neither progress.csv nor result.jsonl is there; is it a shardtrain run folder "
                          "(<run.storage_path>/<run.name>)?");
  RunCurves run;
  run.name = name;
  if (run.name.empty()) {
    fs::path path = fs::path(run_dir).lexically_normal();
    if (path.filename().empty()) path = path.parent_path();
    run.name = path.filename().string();
  }
  if (has_progress) read_progress(progress, run);
  if (has_results) read_results(results, run, /*want_train_loss=*/run.loss.empty());
  return run;
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

bool curves_png_supported() {
#ifdef SHARDTRAIN_HAVE_RSVG
  return true;
#else
  return false;
#endif
}

void write_curves_png(const std::string& svg, const std::string& path) {
#ifdef SHARDTRAIN_HAVE_RSVG
  GError* error = nullptr;
  std::unique_ptr<RsvgHandle, GObjectUnref> handle(
      rsvg_handle_new_from_data(reinterpret_cast<const guint8*>(svg.data()), svg.size(), &error));
  if (!handle) throw Error("cannot render the chart (librsvg): " + take_message(error));
  gdouble width = 0, height = 0;
  if (!rsvg_handle_get_intrinsic_size_in_pixels(handle.get(), &width, &height)) width = 960, height = 860;
  std::unique_ptr<cairo_surface_t, SurfaceDestroy> surface(
      cairo_image_surface_create(CAIRO_FORMAT_RGB24, static_cast<int>(std::ceil(width)),
                                 static_cast<int>(std::ceil(height))));
  std::unique_ptr<cairo_t, CairoDestroy> cr(cairo_create(surface.get()));
  cairo_set_source_rgb(cr.get(), 1, 1, 1);
  cairo_paint(cr.get());
  const RsvgRectangle viewport = {0, 0, width, height};
  if (!rsvg_handle_render_document(handle.get(), cr.get(), &viewport, &error))
    throw Error("cannot render the chart (librsvg): " + take_message(error));
  std::string png;
  const cairo_status_t status = cairo_surface_write_to_png_stream(surface.get(), append_png, &png);
  if (status != CAIRO_STATUS_SUCCESS)
    throw Error(std::string("cannot encode the PNG (cairo): ") + cairo_status_to_string(status));
  write_file_atomic(path, png);
#else
  (void)svg;
  throw Error("--output " + path + ": this shardtrain was built without librsvg, which renders PNG; install "
              "librsvg2-dev (Debian) and rebuild, or write .svg and convert it (rsvg-convert from librsvg2-bin)");
#endif
}

}  // namespace shardtrain
