// run_report_html: the run's catalog records (run, epochs, checkpoints, its
// model, its dataset version, a derived model's parent) laid out as one
// HTML page with inline SVG charts. See run_report.h for what it holds and
// the positions a rendering test relies on.
#include "anneal/run_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "anneal/catalog_jobs.h"
#include "anneal/catalog_runs.h"
#include "anneal/datasets.h"
#include "anneal/error.h"
#include "anneal/fs.h"
#include "anneal/table.h"
#include "anneal/version.h"

namespace anneal {
namespace {

using nlohmann::json;

// ---- text ------------------------------------------------------------------

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Whether HTML allows code point `c` in a document: no controls but tab,
// newline and carriage return (C0 and C1), no noncharacters; surrogates
// never decode here.
bool allowed_in_html(std::uint32_t c) {
  if (c < 0x20) return c == '\t' || c == '\n' || c == '\r';
  if (c >= 0x7F && c <= 0x9F) return false;
  if (c >= 0xFDD0 && c <= 0xFDEF) return false;
  if ((c & 0xFFFE) == 0xFFFE) return false;
  return true;
}

// `text` for an HTML text node or a quoted attribute value: the markup
// characters as references, and anything that is not valid UTF-8 or not
// allowed in HTML as U+FFFD, so user data (a column named "<script>", a
// Latin-1 class name) can neither inject markup nor break the document.
std::string esc(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (b < 0x80) {
      switch (b) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        case '\'': out += "&#39;"; break;
        default:
          if (allowed_in_html(b)) out += static_cast<char>(b);
          else out += kReplacement;
      }
      ++i;
      continue;
    }
    // A multi-byte sequence: its length from the lead byte, then each
    // continuation byte, then no overlong form and no surrogate.
    std::size_t len = b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
    std::uint32_t c = len == 2 ? b & 0x1F : len == 3 ? b & 0x0F : b & 0x07;
    bool ok = len != 0 && i + len <= text.size();
    for (std::size_t k = 1; ok && k < len; ++k) {
      const auto cont = static_cast<unsigned char>(text[i + k]);
      ok = (cont & 0xC0) == 0x80;
      c = (c << 6) | (cont & 0x3F);
    }
    if (ok) ok = !(len == 3 && c < 0x800) && !(len == 4 && (c < 0x10000 || c > 0x10FFFF)) && !(c >= 0xD800 && c <= 0xDFFF);
    if (!ok) {
      out += kReplacement;
      ++i;  // not UTF-8: resynchronize on the next byte
      continue;
    }
    // A character HTML does not allow (a C1 control, a noncharacter): one
    // replacement for the whole sequence.
    if (allowed_in_html(c)) out.append(text.substr(i, len));
    else out += kReplacement;
    i += len;
  }
  return out;
}

// A number as people read it: 4 significant digits; "n/a" for NaN.
std::string num(double v, int significant = 4) {
  if (std::isnan(v)) return "n/a";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", significant, v);
  return buf;
}

std::string fixed(double v, int decimals) {
  if (!std::isfinite(v)) return num(v);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string bytes_text(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return (u == 0 ? fixed(bytes, 0) : fixed(bytes, 1)) + " " + units[u];
}

// A JSON value as text: strings as they are, numbers as num(), the rest as
// compact JSON (invalid UTF-8 replaced, not thrown), at most `limit` bytes.
std::string json_text(const json& value, std::size_t limit = 240) {
  std::string s;
  if (value.is_string()) s = value.get<std::string>();
  else if (value.is_number_float()) s = num(value.get<double>(), 6);
  else if (value.is_null()) s = "none";
  else s = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > limit) {
    // Cut at a character boundary; esc() would replace a split one anyway.
    std::size_t cut = limit;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
    s = s.substr(0, cut) + "\xE2\x80\xA6 (" + std::to_string(s.size()) + " bytes)";
  }
  return s;
}

double number_or(const json& j, const char* key, double fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

// ---- charts ----------------------------------------------------------------

constexpr double kChartW = 640, kChartH = 320;
constexpr double kPlotLeft = 64, kPlotRight = 624, kPlotTop = 40, kPlotBottom = 272;
constexpr const char* kTrainColor = "#1f77b4";
constexpr const char* kValColor = "#ff7f0e";
constexpr const char* kMarkColor = "#d62728";

struct Series {
  std::string name;
  const char* color;
  std::vector<std::pair<double, double>> points;  // (epoch, value); value may be non-finite
};

struct Marker {
  double x;
  std::string label;
  bool at_bottom = false;  // where the label goes
};

// A round step near range/target: 1, 2 or 5 times a power of ten.
double nice_step(double range, double target) {
  if (!(range > 0)) return 1;
  const double raw = range / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

std::string attr(double v) { return fixed(v, 2); }

// A horizontal bar 80 px wide filled to `fraction` (clamped to 0..1; a
// non-finite one empty), as inline SVG: no empty elements for a validator
// to trim, and it prints.
std::string bar_svg(double fraction, const char* color) {
  const double w = std::isfinite(fraction) ? std::clamp(fraction, 0.0, 1.0) * 80 : 0;
  return "<svg class=\"bar\" width=\"80\" height=\"9\" aria-hidden=\"true\"><rect width=\"80\" height=\"9\" "
         "fill=\"#e5e7eb\"/><rect width=\"" + attr(w) + "\" height=\"9\" fill=\"" + color + "\"/></svg>";
}

// A line chart of `series` against the epoch, as an <svg> of kChartW x
// kChartH: axes with round ticks, one polyline per series (broken where a
// value is not finite), a legend, and `marker` as a dashed vertical line.
std::string line_chart(const std::string& id, const std::string& title, const std::vector<Series>& series,
                       const std::optional<Marker>& marker, std::optional<std::pair<double, double>> clamp) {
  double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
  for (const Series& s : series)
    for (const auto& [x, y] : s.points) {
      x_lo = std::min(x_lo, x);
      x_hi = std::max(x_hi, x);
      if (!std::isfinite(y)) continue;
      y_lo = std::min(y_lo, y);
      y_hi = std::max(y_hi, y);
    }
  std::string out = "<svg id=\"" + id + "\" class=\"chart\" width=\"640\" height=\"320\" viewBox=\"0 0 640 320\" "
                    "role=\"img\" aria-label=\"" + esc(title) + "\">\n<title>" + esc(title) + "</title>\n";
  out += "<rect x=\"0\" y=\"0\" width=\"640\" height=\"320\" fill=\"#ffffff\"/>\n";
  out += "<text x=\"" + attr(kChartW / 2) + "\" y=\"22\" text-anchor=\"middle\" class=\"chart-title\">" + esc(title) +
         "</text>\n";
  if (!std::isfinite(y_lo)) {
    out += "<text x=\"320\" y=\"160\" text-anchor=\"middle\">no finite values recorded</text>\n</svg>\n";
    return out;
  }
  if (x_hi - x_lo < 1) {  // one epoch: centre it
    x_lo -= 0.5;
    x_hi += 0.5;
  }
  if (y_hi - y_lo < 1e-12) {
    const double pad = std::max(std::fabs(y_hi) * 0.05, 0.05);
    y_lo -= pad;
    y_hi += pad;
  }
  const double y_step = nice_step(y_hi - y_lo, 5);
  y_lo = std::floor(y_lo / y_step) * y_step;
  y_hi = std::ceil(y_hi / y_step) * y_step;
  if (clamp) {
    y_lo = std::max(y_lo, clamp->first);
    y_hi = std::min(y_hi, clamp->second);
  }
  auto px = [&](double x) { return kPlotLeft + (x - x_lo) / (x_hi - x_lo) * (kPlotRight - kPlotLeft); };
  auto py = [&](double y) { return kPlotBottom - (y - y_lo) / (y_hi - y_lo) * (kPlotBottom - kPlotTop); };

  // Grid and ticks.
  out += "<g class=\"grid\" stroke=\"#e5e7eb\" stroke-width=\"1\">\n";
  for (double y = y_lo; y <= y_hi + y_step * 1e-6; y += y_step)
    out += "<line x1=\"" + attr(kPlotLeft) + "\" y1=\"" + attr(py(y)) + "\" x2=\"" + attr(kPlotRight) + "\" y2=\"" +
           attr(py(y)) + "\"/>\n";
  out += "</g>\n<g class=\"ticks\" font-size=\"11\" fill=\"#374151\">\n";
  for (double y = y_lo; y <= y_hi + y_step * 1e-6; y += y_step)
    out += "<text x=\"" + attr(kPlotLeft - 6) + "\" y=\"" + attr(py(y) + 4) + "\" text-anchor=\"end\">" +
           num(std::fabs(y) < y_step * 1e-6 ? 0 : y, 4) + "</text>\n";
  const double first_epoch = std::ceil(x_lo), last_epoch = std::floor(x_hi);
  // Ticks on multiples of a round step (5, 10, 15, ...), or the first epoch
  // when no multiple falls in the range.
  const double x_step = std::max(1.0, std::ceil(nice_step(last_epoch - first_epoch, 8)));
  double x_first = std::ceil(first_epoch / x_step) * x_step;
  if (x_first > last_epoch) x_first = first_epoch;
  for (double x = x_first; x <= last_epoch; x += x_step)
    out += "<text x=\"" + attr(px(x)) + "\" y=\"" + attr(kPlotBottom + 16) + "\" text-anchor=\"middle\">" +
           num(x, 6) + "</text>\n";
  out += "<text x=\"" + attr((kPlotLeft + kPlotRight) / 2) + "\" y=\"" + attr(kPlotBottom + 34) +
         "\" text-anchor=\"middle\">epoch</text>\n</g>\n";
  out += "<path d=\"M" + attr(kPlotLeft) + " " + attr(kPlotTop) + " V" + attr(kPlotBottom) + " H" + attr(kPlotRight) +
         "\" fill=\"none\" stroke=\"#111827\" stroke-width=\"1\"/>\n";

  if (marker) {
    const double mx = px(std::clamp(marker->x, x_lo, x_hi));
    out += "<g class=\"best-checkpoint\"><line x1=\"" + attr(mx) + "\" y1=\"" + attr(kPlotTop) + "\" x2=\"" + attr(mx) +
           "\" y2=\"" + attr(kPlotBottom) + "\" stroke=\"" + kMarkColor +
           "\" stroke-width=\"2\" stroke-dasharray=\"6 4\"><title>" + esc(marker->label) + "</title></line>\n";
    // The label where the curves are not: at the top of a falling loss, at
    // the bottom of a rising accuracy.
    const bool right_half = mx > (kPlotLeft + kPlotRight) / 2;
    const double label_y = marker->at_bottom ? kPlotBottom - 8 : kPlotTop + 14;
    out += "<text x=\"" + attr(right_half ? mx - 6 : mx + 6) + "\" y=\"" + attr(label_y) + "\" text-anchor=\"" +
           (right_half ? "end" : "start") + "\" font-size=\"11\" fill=\"" + kMarkColor + "\">" + esc(marker->label) +
           "</text></g>\n";
  }

  for (const Series& s : series) {
    out += "<g class=\"series\" data-series=\"" + esc(s.name) + "\">\n";
    std::string points;
    auto flush = [&] {
      if (!points.empty())
        out += "<polyline points=\"" + points + "\" fill=\"none\" stroke=\"" + s.color +
               "\" stroke-width=\"2.5\" stroke-linejoin=\"round\"/>\n";
      points.clear();
    };
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(y)) {
        flush();
        continue;
      }
      if (!points.empty()) points += ' ';
      points += attr(px(x)) + "," + attr(py(std::clamp(y, y_lo, y_hi)));
    }
    flush();
    if (s.points.size() <= 60)
      for (const auto& [x, y] : s.points)
        if (std::isfinite(y))
          out += "<circle cx=\"" + attr(px(x)) + "\" cy=\"" + attr(py(std::clamp(y, y_lo, y_hi))) + "\" r=\"3\" fill=\"" +
                 s.color + "\"><title>" + esc(s.name) + ", epoch " + num(x, 6) + ": " + num(y, 6) +
                 "</title></circle>\n";
    out += "</g>\n";
  }
  // Legend, above the plot at the right.
  double lx = kPlotRight;
  for (auto it = series.rbegin(); it != series.rend(); ++it) {
    lx -= 8 + 7.0 * static_cast<double>(it->name.size()) + 26;
    out += "<line x1=\"" + attr(lx) + "\" y1=\"30\" x2=\"" + attr(lx + 20) + "\" y2=\"30\" stroke=\"" + it->color +
           "\" stroke-width=\"2.5\"/><text x=\"" + attr(lx + 24) + "\" y=\"34\" font-size=\"11\">" + esc(it->name) +
           "</text>\n";
  }
  out += "</svg>\n";
  return out;
}

// The confusion matrix as a heat map: one cell per (true, predicted) pair,
// shaded by the fraction of the true class's rows (so a small class reads
// like a large one), with the count written in it.
std::string confusion_heatmap(const std::string& id, const json& confusion) {
  const auto classes = confusion.at("classes").get<std::vector<std::string>>();
  const auto matrix = confusion.at("matrix").get<std::vector<std::vector<std::uint64_t>>>();
  const std::size_t n = classes.size();
  if (n == 0 || matrix.size() != n) return "<p>the recorded confusion matrix is empty</p>\n";
  // n^2 cells: past this a page would weigh megabytes and show nothing
  // legible; the per-class table still lists every class.
  constexpr std::size_t kMaxClasses = 100;
  if (n > kMaxClasses)
    return "<p class=\"note\">" + std::to_string(n) + " classes: too many for a heat map (at most " +
           std::to_string(kMaxClasses) + "); <code>anneal eval --json</code> prints the matrix.</p>\n";
  const double cell = std::clamp(480.0 / static_cast<double>(n), 10.0, 56.0);
  const bool counts = cell >= 22;
  auto short_name = [](const std::string& name) {
    // At most 18 characters shown (the full name is in the cell's title).
    std::size_t chars = 0, i = 0;
    while (i < name.size() && chars < 18) {
      ++chars;
      ++i;
      while (i < name.size() && (static_cast<unsigned char>(name[i]) & 0xC0) == 0x80) ++i;
    }
    return i < name.size() ? name.substr(0, i) + "\xE2\x80\xA6" : name;
  };
  const double left = 150, top = 110;
  // Whole pixels: HTML's width and height attributes are integers.
  const std::string width = std::to_string(static_cast<long>(std::ceil(left + cell * static_cast<double>(n) + 20)));
  const std::string height = std::to_string(static_cast<long>(std::ceil(top + cell * static_cast<double>(n) + 40)));
  std::string out = "<svg id=\"" + id + "\" class=\"heatmap\" width=\"" + width + "\" height=\"" + height +
                    "\" viewBox=\"0 0 " + width + " " + height +
                    "\" role=\"img\" aria-label=\"confusion matrix\">\n<title>confusion matrix</title>\n";
  out += "<text x=\"" + attr(left + cell * static_cast<double>(n) / 2) + "\" y=\"16\" text-anchor=\"middle\" "
         "font-size=\"12\">predicted class</text>\n";
  out += "<text x=\"14\" y=\"" + attr(top + cell * static_cast<double>(n) / 2) + "\" text-anchor=\"middle\" "
         "font-size=\"12\" transform=\"rotate(-90 14 " + attr(top + cell * static_cast<double>(n) / 2) +
         ")\">true class</text>\n";
  for (std::size_t j = 0; j < n; ++j) {
    const double x = left + cell * (static_cast<double>(j) + 0.5), y = top - 6;
    out += "<text x=\"" + attr(x) + "\" y=\"" + attr(y) + "\" font-size=\"11\" transform=\"rotate(-45 " + attr(x) +
           " " + attr(y) + ")\">" + esc(short_name(classes[j])) + "</text>\n";
  }
  for (std::size_t i = 0; i < n; ++i) {
    const double y = top + cell * static_cast<double>(i);
    out += "<text x=\"" + attr(left - 6) + "\" y=\"" + attr(y + cell / 2 + 4) +
           "\" text-anchor=\"end\" font-size=\"11\">" + esc(short_name(classes[i])) + "</text>\n";
    std::uint64_t row_total = 0;
    if (matrix[i].size() != n) return "<p>the recorded confusion matrix is not square</p>\n";
    for (auto v : matrix[i]) row_total += v;
    for (std::size_t j = 0; j < n; ++j) {
      const std::uint64_t v = matrix[i][j];
      const double f = row_total ? static_cast<double>(v) / static_cast<double>(row_total) : 0;
      // White to dark green: a hue the rest of the page does not use.
      const int r = static_cast<int>(std::lround(247 - f * 247)), g = static_cast<int>(std::lround(252 - f * 143)),
                b = static_cast<int>(std::lround(245 - f * 201));
      char fill[16];
      std::snprintf(fill, sizeof fill, "#%02x%02x%02x", r, g, b);
      const double x = left + cell * static_cast<double>(j);
      out += "<rect x=\"" + attr(x) + "\" y=\"" + attr(y) + "\" width=\"" + attr(cell) + "\" height=\"" + attr(cell) +
             "\" fill=\"" + fill + "\" stroke=\"#ffffff\"><title>true " + esc(classes[i]) + ", predicted " +
             esc(classes[j]) + ": " + std::to_string(v) + " (" + fixed(100 * f, 1) + "% of the true class)</title></rect>\n";
      if (counts)
        out += "<text x=\"" + attr(x + cell / 2) + "\" y=\"" + attr(y + cell / 2 + 4) +
               "\" text-anchor=\"middle\" font-size=\"11\" fill=\"" + (f > 0.5 ? "#ffffff" : "#111827") + "\">" +
               std::to_string(v) + "</text>\n";
    }
  }
  out += "</svg>\n";
  return out;
}

// ---- tables ----------------------------------------------------------------

using Row = std::vector<std::string>;  // cells, already escaped

std::string table(const Row& head, const std::vector<Row>& rows, const std::string& cls = "") {
  std::string out = cls.empty() ? "<table>\n" : "<table class=\"" + cls + "\">\n";
  if (!head.empty()) {
    out += "<thead><tr>";
    for (const auto& h : head) out += "<th>" + h + "</th>";
    out += "</tr></thead>\n";
  }
  out += "<tbody>\n";
  for (const Row& r : rows) {
    out += "<tr>";
    for (std::size_t i = 0; i < r.size(); ++i) out += (i == 0 && head.empty() ? "<th>" : "<td>") + r[i] + (i == 0 && head.empty() ? "</th>" : "</td>");
    out += "</tr>\n";
  }
  out += "</tbody></table>\n";
  return out;
}

// ---- the page's parts --------------------------------------------------------

struct Page {
  RunRecord run;
  std::vector<EpochRecord> epochs;
  std::vector<CheckpointRecord> checkpoints;
  std::optional<ModelRecord> model;
  std::optional<ModelRecord> parent;  // a derived or warm-started model's
  std::optional<DatasetVersion> dataset;
  std::string dataset_missing;        // why `dataset` is unset
  std::optional<RetrainRecord> retrain;  // the night that trained this run, for `anneal retrain`'s runs
};

std::optional<double> epoch_value(const EpochRecord& e, std::string_view name) {
  for (const auto& [n, v] : e.values)
    if (n == name) return v;
  return std::nullopt;
}

bool any_epoch_has(const std::vector<EpochRecord>& epochs, std::string_view name) {
  return std::any_of(epochs.begin(), epochs.end(), [&](const EpochRecord& e) { return epoch_value(e, name).has_value(); });
}

Series series_of(const std::vector<EpochRecord>& epochs, std::string_view metric, std::string name, const char* color) {
  Series s{std::move(name), color, {}};
  for (const auto& e : epochs)
    if (auto v = epoch_value(e, metric)) s.points.emplace_back(static_cast<double>(e.epoch), *v);
  return s;
}

// The checkpoint with the lowest score (the one a run never releases), on
// the epoch axis: epoch e ends at x = e, so a checkpoint within an epoch
// lands between, by its step.
std::optional<Marker> best_checkpoint(const Page& p) {
  const CheckpointRecord* best = nullptr;
  for (const auto& c : p.checkpoints)
    if (c.score && std::isfinite(*c.score) && (!best || *c.score < *best->score)) best = &c;
  if (!best || p.epochs.empty()) return std::nullopt;
  double prev_steps = 0, prev_epoch = 0, x = static_cast<double>(p.epochs.back().epoch);
  for (const auto& e : p.epochs) {
    const double steps = epoch_value(e, "steps").value_or(prev_steps);
    if (static_cast<double>(best->step) <= steps) {
      const double span = steps - prev_steps;
      x = prev_epoch + (span > 0 ? (static_cast<double>(best->step) - prev_steps) / span : 1) *
                           (static_cast<double>(e.epoch) - prev_epoch);
      break;
    }
    prev_steps = steps;
    prev_epoch = static_cast<double>(e.epoch);
  }
  const bool val = any_epoch_has(p.epochs, "val_loss");
  return Marker{x, "best checkpoint: step " + std::to_string(best->step) + ", " + (val ? "val_loss " : "train_loss ") +
                       num(*best->score)};
}

std::string curves_section(const Page& p) {
  std::string out = "<section id=\"curves\">\n";
  if (p.epochs.empty()) {
    out += "<p class=\"note\">This run recorded no epochs (" +
           esc(p.run.summary.contains("operation") ? "a " + json_text(p.run.summary["operation"]) + " run"
                                                   : std::string("a linear or tree model, or a run that trained no epoch")) +
           "), so there are no curves.</p>\n</section>\n";
    return out;
  }
  const std::optional<Marker> best = best_checkpoint(p);
  std::vector<Series> loss = {series_of(p.epochs, "train_loss", "train", kTrainColor)};
  if (any_epoch_has(p.epochs, "val_loss")) loss.push_back(series_of(p.epochs, "val_loss", "validation", kValColor));
  out += line_chart("loss-curve", "loss per epoch", loss, best, std::nullopt);
  if (any_epoch_has(p.epochs, "train_accuracy")) {
    std::vector<Series> acc = {series_of(p.epochs, "train_accuracy", "train", kTrainColor)};
    if (any_epoch_has(p.epochs, "val_accuracy"))
      acc.push_back(series_of(p.epochs, "val_accuracy", "validation", kValColor));
    std::optional<Marker> best_below = best;
    if (best_below) best_below->at_bottom = true;
    out += line_chart("accuracy-curve", "accuracy per epoch", acc, best_below, std::make_pair(0.0, 1.0));
  } else {
    out += "<p class=\"note\">No accuracy: a regression run.</p>\n";
  }
  out += "</section>\n";
  if (!any_epoch_has(p.epochs, "val_loss"))
    out += "<p class=\"note\">No validation curve: the run held out no validation rows (config key "
           "<code>validation</code>).</p>\n";
  return out;
}

// The splits a classification run scored, held-out ones first.
std::vector<std::string> scored_splits(const json& by_split) {
  std::vector<std::string> out;
  if (!by_split.is_object()) return out;
  for (const char* split : {"test", "val"})
    if (by_split.contains(split)) out.push_back(split);
  return out;
}

std::string split_title(const std::string& split) {
  return split == "test" ? "test split" : split == "val" ? "validation rows" : split;
}

// A split's heat map beside its per-class table; `confusion` may be null
// (a run recorded before runs kept it).
std::string class_scores(const std::string& id, const json& confusion, const json& per_class) {
  std::string out = "<div class=\"pair\">\n";
  if (confusion.is_object()) {
    out += "<div>" + confusion_heatmap(id, confusion) +
           "<p class=\"caption\">Rows: true class; columns: predicted class. Shade: the fraction of the true "
           "class's rows.</p></div>\n";
  } else {
    out += "<div><p class=\"note\">No confusion matrix recorded: this run was trained before anneal kept it "
           "(<code>anneal eval MODEL DATA</code> prints one).</p></div>\n";
  }
  auto bar = [](double v, const char* color) { return bar_svg(v, color) + " " + fixed(v, 4); };
  std::vector<Row> rows;
  for (const auto& [name, s] : per_class.items()) {
    const double precision = number_or(s, "precision", NAN), recall = number_or(s, "recall", NAN);
    rows.push_back({esc(name), esc(json_text(s.value("support", json(nullptr)))), bar(precision, "#6b7280"),
                    bar(recall, "#374151")});
  }
  out += "<div>" + table({"class", "support", "precision", "recall"}, rows, "per-class") + "</div>\n</div>\n";
  return out;
}

const json& member_or_null(const json& j, const std::string& key) {
  static const json null;
  auto it = j.is_object() ? j.find(key) : j.end();
  return it != j.end() ? *it : null;
}

std::string classes_section(const Page& p) {
  const json& summary = p.run.summary;
  std::string out = "<section id=\"classes\">\n<h2>Confusion matrix and per-class scores</h2>\n";
  const json per_class = summary.value("per_class", json::object());
  const json confusion = summary.value("confusion", json::object());
  const json parent_per_class = summary.value("parent_per_class", json::object());
  const json parent_confusion = summary.value("parent_confusion", json::object());
  const auto splits = scored_splits(per_class);
  if (splits.empty()) {
    out += "<p class=\"note\">No per-class scores recorded for this run (a regression run, a run that did not "
           "finish, or a quantize or prune run recorded before they were kept).</p>\n</section>\n";
    return out;
  }
  bool first = true;
  for (const std::string& split : splits) {
    out += "<h3>" + esc(split_title(split)) + "</h3>\n";
    out += class_scores(first ? "confusion" : "confusion-" + split, member_or_null(confusion, split),
                        member_or_null(per_class, split));
    // A derived model's parent, scored on the same rows.
    if (parent_per_class.contains(split)) {
      out += "<h3>the parent, " + esc(json_text(summary.value("parent", json("")))) + ", on the same rows</h3>\n";
      out += class_scores("confusion-parent-" + split, member_or_null(parent_confusion, split),
                          member_or_null(parent_per_class, split));
    }
    first = false;
  }
  out += "</section>\n";
  return out;
}

std::string metrics_section(const Page& p) {
  json metrics = p.model ? p.model->metrics : p.run.summary.value("metrics", json::object());
  std::string out = "<section id=\"metrics\">\n<h2>Metrics</h2>\n";
  if (!metrics.is_object() || metrics.empty()) return out + "<p class=\"note\">No metrics recorded.</p>\n</section>\n";
  std::vector<Row> rows;
  for (const auto& [key, value] : metrics.items()) rows.push_back({esc(key), esc(json_text(value))});
  out += table({}, rows, "kv") + "</section>\n";
  return out;
}

// A reliability diagram of one recorded set of bins
// (calibration.h's reliability_json): per confidence bin with rows, a bar
// up to the accuracy of its rows and a tick at their mean confidence; a
// calibrated model's bars follow the diagonal. The uncalibrated bins, when
// given, are drawn as grey outlines behind the calibrated ones.
std::string reliability_svg(const std::string& id, const json& bins, const json& behind) {
  const double left = 46, top = 14, size = 256;
  std::string out = "<svg id=\"" + id +
                    "\" class=\"chart\" width=\"330\" height=\"310\" viewBox=\"0 0 330 310\" role=\"img\" "
                    "aria-label=\"reliability diagram\">\n<title>reliability diagram</title>\n";
  out += "<rect x=\"" + attr(left) + "\" y=\"" + attr(top) + "\" width=\"" + attr(size) + "\" height=\"" + attr(size) +
         "\" fill=\"none\" stroke=\"#9ca3af\"/>\n";
  out += "<line x1=\"" + attr(left) + "\" y1=\"" + attr(top + size) + "\" x2=\"" + attr(left + size) + "\" y2=\"" +
         attr(top) + "\" stroke=\"#9ca3af\" stroke-dasharray=\"4 3\"/>\n";
  for (int t = 0; t <= 4; ++t) {
    const double v = t / 4.0;
    out += "<text x=\"" + attr(left + v * size) + "\" y=\"" + attr(top + size + 14) +
           "\" text-anchor=\"middle\" font-size=\"10\">" + fixed(v, 2) + "</text>\n";
    out += "<text x=\"" + attr(left - 4) + "\" y=\"" + attr(top + size - v * size + 3) +
           "\" text-anchor=\"end\" font-size=\"10\">" + fixed(v, 2) + "</text>\n";
  }
  out += "<text x=\"" + attr(left + size / 2) + "\" y=\"" + attr(top + size + 30) +
         "\" text-anchor=\"middle\" font-size=\"11\">confidence (top-class probability)</text>\n";
  out += "<text x=\"12\" y=\"" + attr(top + size / 2) + "\" text-anchor=\"middle\" font-size=\"11\" "
         "transform=\"rotate(-90 12 " + attr(top + size / 2) + ")\">accuracy</text>\n";
  auto draw = [&](const json& set, bool outline) {
    if (!set.is_array()) return;
    for (const json& b : set) {
      const double rows = number_or(b, "rows", 0);
      if (rows <= 0) continue;
      const double lo = std::clamp(number_or(b, "lower", 0), 0.0, 1.0), hi = std::clamp(number_or(b, "upper", 0), lo, 1.0);
      const double acc = std::clamp(number_or(b, "accuracy", 0), 0.0, 1.0);
      const double conf = std::clamp(number_or(b, "confidence", 0), 0.0, 1.0);
      const double x = left + lo * size, w = (hi - lo) * size, h = acc * size;
      const std::string tip = "<title>confidence " + fixed(lo, 3) + " to " + fixed(hi, 3) + ": " +
                              std::to_string(static_cast<long long>(rows)) + " rows, mean confidence " + fixed(conf, 3) +
                              ", accuracy " + fixed(acc, 3) + (outline ? " (uncalibrated)" : "") + "</title>";
      if (outline) {
        out += "<rect x=\"" + attr(x + 1) + "\" y=\"" + attr(top + size - h) + "\" width=\"" + attr(std::max(w - 2, 0.0)) +
               "\" height=\"" + attr(h) + "\" fill=\"none\" stroke=\"#6b7280\" stroke-dasharray=\"2 2\">" + tip + "</rect>\n";
      } else {
        out += "<rect x=\"" + attr(x + 2) + "\" y=\"" + attr(top + size - h) + "\" width=\"" + attr(std::max(w - 4, 0.0)) +
               "\" height=\"" + attr(h) + "\" fill=\"#4477aa\" fill-opacity=\"0.75\">" + tip + "</rect>\n";
        out += "<line x1=\"" + attr(x + 1) + "\" x2=\"" + attr(x + w - 1) + "\" y1=\"" + attr(top + size - conf * size) +
               "\" y2=\"" + attr(top + size - conf * size) + "\" stroke=\"#cc6677\" stroke-width=\"2\"/>\n";
      }
    }
  };
  draw(behind, true);
  draw(bins, false);
  out += "</svg>\n";
  return out;
}

// A classifier's calibration (the run summary's `calibration`): its
// expected calibration error and reliability diagram, before and after the
// temperature when one was fitted. Nothing for regression.
std::string calibration_section(const Page& p) {
  const json c = p.run.summary.value("calibration", json());
  if (!c.is_object() || !c.contains("uncalibrated")) return "";
  const json metrics = p.model ? p.model->metrics : p.run.summary.value("metrics", json::object());
  const std::string split = c.value("split", std::string("test"));
  const bool fitted = c.value("method", std::string()) == "temperature" && c.contains("calibrated");
  std::string out = "<section id=\"calibration\">\n<h2>Calibration</h2>\n<p class=\"note\">";
  if (fitted)
    out += "Temperature " + esc(num(number_or(c, "temperature", 1))) +
           " fitted on the validation rows: the class probabilities are softmax(z / T) of the uncalibrated "
           "scores z. ";
  else
    out += "Not calibrated (calibrate = none, or no validation rows). ";
  out += "Expected calibration error on the " + esc(split_title(split)) + " (" +
         esc(std::to_string(c.value("bins", 15))) + " equal-width bins of the top-class probability): ";
  const std::string key = split + "_ece";
  if (fitted && metrics.contains(key + "_uncalibrated"))
    out += esc(num(number_or(metrics, (key + "_uncalibrated").c_str(), 0))) + " uncalibrated, ";
  out += esc(num(number_or(metrics, key.c_str(), 0))) + (fitted ? " calibrated" : "") + ".";
  out += " Bars: accuracy per bin; red ticks: mean confidence; dashed diagonal: perfect calibration" +
         std::string(fitted ? "; grey outlines: before calibration" : "") + ".</p>\n";
  out += fitted ? reliability_svg("reliability", c["calibrated"], c["uncalibrated"])
                : reliability_svg("reliability", c["uncalibrated"], json());
  return out + "</section>\n";
}

// A tree model's feature importance (the run summary's `importance`): each
// feature column's share of the trees' split gain, the largest first, as a
// percentage and a bar. Nothing for other kinds.
std::string importance_section(const Page& p) {
  const json importance = p.run.summary.value("importance", json::array());
  if (!importance.is_array() || importance.empty()) return "";
  std::string out = "<section id=\"importance\">\n<h2>Feature importance</h2>\n"
                    "<p class=\"note\">Each column's share of the trees' total split gain (its one-hot levels and "
                    "date parts summed).</p>\n";
  std::vector<Row> rows;
  for (const json& c : importance) {
    const double share = c.at("share").get<double>();
    char percent[32];
    std::snprintf(percent, sizeof percent, "%.1f%%", 100 * share);
    rows.push_back({esc(c.at("column").get<std::string>()), percent, bar_svg(share, "#4477aa")});
  }
  return out + table({"column", "share", ""}, rows) + "</section>\n";
}

// Permutation importance (the run summary's `permutation_importance`, any
// kind of model): each column's drop in the score when its values are
// shuffled, the largest first, as a number and a bar scaled to the largest
// drop. Nothing for image data or a run without test or validation rows.
std::string permutation_section(const Page& p) {
  const json importance = p.run.summary.value("permutation_importance", json());
  if (!importance.is_object() || !importance.contains("columns") || importance["columns"].empty()) return "";
  const std::string metric = importance.value("metric", "accuracy") == "r2" ? "R²" : "accuracy";
  double largest = 0;
  for (const json& c : importance["columns"]) largest = std::max(largest, c.value("drop", 0.0));
  std::string out = "<section id=\"permutation-importance\">\n<h2>Permutation importance</h2>\n<p class=\"note\">How much " +
                    metric + " (" + esc(num(importance.value("baseline", 0.0))) + " on " +
                    esc(std::to_string(importance.value("rows", 0))) + " " + esc(json_text(importance.value("split", json("")))) +
                    " rows) drops when one column's values are shuffled among the rows, averaged over " +
                    esc(std::to_string(importance.value("repeats", 0))) +
                    " shuffles; a one-hot or date column counts once. Near 0 or below: the model does not use it.</p>\n";
  std::vector<Row> rows;
  for (const json& c : importance["columns"]) {
    const double drop = c.value("drop", 0.0);
    rows.push_back({esc(c.value("column", std::string())), esc(num(drop, 3)), esc(num(c.value("spread", 0.0), 2)),
                    bar_svg(largest > 0 ? drop / largest : 0.0, "#4477aa")});
  }
  return out + table({"column", "drop", "spread", ""}, rows) + "</section>\n";
}

// layers = auto: the search's leaderboard (the run summary's "search"),
// every trial in the order it ran, the chosen one marked. Nothing for a run
// that did not search.
std::string search_section(const Page& p) {
  const json search = p.run.summary.value("search", json());
  if (!search.is_object()) return "";
  const json trials = search.value("trials", json::array());
  std::string out = "<section id=\"search\">\n<h2>Search</h2>\n<p class=\"note\">" +
                    esc(std::to_string(trials.size())) + " trials scored by " + esc(json_text(search.value("scoring", json("")))) +
                    " on " + esc(json_text(search.value("metric", json("")))) + " in " + num(search.value("seconds", 0.0)) + " s";
  if (search.value("skipped", 0) > 0)
    out += "; " + esc(std::to_string(search.value("skipped", 0))) + " not run (" +
           esc(json_text(search.value("skipped_by", json("")))) + ")";
  out += ". Successive halving: each rung keeps the best third at three times the budget.</p>\n";
  const std::size_t winner = search.value("winner", std::size_t{0});
  const json ensemble = search.value("ensemble", json::object());
  const bool ensemble_chosen = ensemble.value("chosen", false);
  std::map<std::size_t, double> weight_of;  // trial (from 1) -> its weight in the ensemble
  for (const json& m : ensemble.value("members", json::array()))
    weight_of[m.value("trial", std::size_t{0})] = m.value("weight", 0.0);
  std::vector<Row> rows;
  for (std::size_t i = 0; i < trials.size(); ++i) {
    const json& t = trials[i];
    std::string settings;
    const json named = t.value("settings", json::object());  // items() must not outlive it
    // Appended piece by piece: GCC 12 warns (-Wstringop-overflow, a false
    // positive) on "literal" + std::string temporaries here.
    for (const auto& [key, value] : named.items()) {
      if (!settings.empty()) settings += ' ';
      settings.append(key).append("=").append(json_text(value));
    }
    std::string folds;
    const json fold_scores = t.value("fold_scores", json::array());
    for (const json& f : fold_scores) {
      if (!folds.empty()) folds += ' ';
      folds += num(f.get<double>());
    }
    std::string mark;
    if (ensemble_chosen && weight_of.contains(i + 1)) mark = " (ensemble, weight " + num(weight_of[i + 1], 3) + ")";
    else if (!ensemble_chosen && i == winner) mark = " (chosen)";
    rows.push_back({esc(std::to_string(i + 1)) + mark, esc(t.value("kind", "")), esc(settings),
                    esc(std::to_string(t.value("rung", 0))), num(t.value("budget", 0.0), 3), num(t.value("score", 0.0)),
                    esc(folds), num(t.value("seconds", 0.0), 3)});
  }
  out += table({"trial", "kind", "settings", "rung", "budget", "score", "fold scores", "seconds"}, rows);
  // Ensemble selection over each candidate's latest trial.
  if (!weight_of.empty()) {
    std::string members;
    for (const auto& [trial, weight] : weight_of) {
      if (!members.empty()) members += ", ";
      members.append("trial ").append(esc(std::to_string(trial))).append(" (").append(num(weight, 3)).append(")");
    }
    out += "<p class=\"note\">Ensemble selection weighed " + members + ": score " + num(ensemble.value("score", 0.0)) +
           (ensemble_chosen ? ", above the best single trial's: the model is this ensemble"
                            : ", not above the best single trial's: the model is that trial's") +
           ".</p>\n";
  } else if (ensemble.contains("note")) {
    out += "<p class=\"note\">No ensemble weighed: " + esc(json_text(ensemble.value("note", json("")))) + ".</p>\n";
  }
  if (const int bags = search.value("bags", 1); bags > 1)
    out += "<p class=\"note\">Each network of the model was refit with " + esc(std::to_string(bags)) +
           " seeds (bags), their predictions averaged.</p>\n";
  return out + "</section>\n";
}

// A quantized or pruned model beside its parent: each score on the same
// rows, and the size on disk.
std::string parent_section(const Page& p) {
  if (!p.model || !p.model->lineage.contains("operation")) return "";
  const json& lineage = p.model->lineage;
  const json& metrics = p.model->metrics;
  std::string out = "<section id=\"parent\">\n<h2>Compared with the parent " +
                    esc(json_text(lineage.value("parent", json("")))) + "</h2>\n";
  out += "<p>" + esc(json_text(lineage["operation"])) + " of " + esc(json_text(lineage.value("parent", json("")))) +
         (metrics.contains("eval_dataset")
              ? ", both scored on " + esc(json_text(metrics["eval_dataset"])) + " (" +
                    esc(json_text(metrics.value("eval_split", json("")))) + " split)"
              : std::string()) +
         ".</p>\n";
  std::vector<Row> rows;
  for (const auto& [key, value] : metrics.items()) {
    if (key.starts_with("parent_") || !value.is_number()) continue;
    auto before = metrics.find("parent_" + key);
    if (before == metrics.end() || !before->is_number()) continue;
    const double a = value.get<double>(), b = before->get<double>();
    rows.push_back({esc(key), num(a), num(b), (a - b >= 0 ? "+" : "") + num(a - b, 3)});
  }
  auto size_row = [&](const char* label, const char* mine, const char* theirs) {
    if (!lineage.contains(mine) || !lineage.contains(theirs) || !lineage[mine].is_number() ||
        !lineage[theirs].is_number())
      return;
    const double a = lineage[mine].get<double>(), b = lineage[theirs].get<double>();
    rows.push_back({label, bytes_text(a), bytes_text(b), b > 0 ? fixed(100 * a / b, 1) + "% of the parent" : ""});
  };
  size_row("size of the model file", "size_bytes", "parent_size_bytes");
  size_row("size on disk (compressed)", "size_on_disk", "parent_size_on_disk");
  if (lineage.contains("precision"))
    rows.push_back({"precision", esc(json_text(lineage["precision"])),
                    p.parent ? esc(json_text(p.parent->lineage.value("precision", json("fp32")))) : "", ""});
  if (lineage.contains("sparsity"))
    rows.push_back({"weight sparsity", esc(json_text(lineage["sparsity"])), "", ""});
  out += table({"", "this model", "parent", "change"}, rows, "compare");
  if (p.parent)
    out += "<p>The parent was registered by run-" + std::to_string(p.parent->run) + " (<code>anneal runs report run-" +
           std::to_string(p.parent->run) + "</code> shows its curves).</p>\n";
  out += "</section>\n";
  return out;
}

// The night's story, for a run that `anneal retrain` trained: what it
// trained on, the data checks of that version against what production
// learned from (every column, its figures against the thresholds, the
// failures marked), the gate's two scores on the same rows, and the
// decision. Nothing for a run trained otherwise.
std::string retrain_section(const Page& p) {
  if (!p.retrain) return "";
  const RetrainRecord& r = *p.retrain;
  const std::string outcome = retrain_outcome_name(r.outcome);
  std::string out = "<section id=\"retrain\">\n<h2>Retrain: " + esc(outcome) + "</h2>\n";
  std::vector<Row> facts = {{"config", esc(r.config)}, {"dataset", esc(r.dataset)},
                            {"model", esc(r.model.empty() ? std::string("none") : r.model)},
                            {"decision", esc(outcome) + (r.detail.empty() ? std::string() : ": " + esc(r.detail))}};
  out += table({}, facts, "kv");

  const json& gate = r.gate;
  out += "<h3>Gate</h3>\n";
  if (!gate.is_object()) {
    out += "<p class=\"note\">" +
           std::string(r.data_checks.is_object() && !r.data_checks.value("passed", true)
                           ? "Not judged: the data checks failed, so the model was not offered for promotion."
                           : "No gate judged this night.") +
           "</p>\n";
  } else if (gate.contains("metric")) {
    auto score = [](const json& v) { return v.is_number() ? num(v.get<double>()) : std::string("none"); };
    std::vector<Row> rows = {
        {"expression", esc(json_text(gate.value("expression", json(""))))},
        {esc(json_text(gate.value("metric", json("")))) + " of the new model " +
             esc(json_text(gate.value("candidate_model", json("")))),
         score(gate.value("candidate", json()))},
        {esc(json_text(gate.value("metric", json("")))) + " of " + esc(json_text(gate.value("alias", json("")))) + " " +
             esc(json_text(gate.value("incumbent_model", json("")))),
         score(gate.value("incumbent", json()))},
        {"scored on", esc(json_text(gate.value("rows", json(0)))) + " rows of " +
                          esc(json_text(gate.value("on", json(r.dataset)))) + " (" +
                          esc(json_text(gate.value("excluded_rows", json(0)))) +
                          " test rows left out: either model trained on them)"},
        {"verdict", (gate.value("passed", false) ? "passed: " : "refused: ") + esc(json_text(gate.value("reason", json(""))))}};
    out += table({}, rows, "kv");
  } else {
    out += "<p>" + esc(json_text(gate.value("expression", json("")))) + ": " +
           (gate.value("passed", false) ? "passed" : "refused") + " (" + esc(json_text(gate.value("reason", json("")))) +
           ")</p>\n";
  }

  const json& checks = r.data_checks;
  out += "<h3>Data checks</h3>\n";
  if (!checks.is_object()) return out + "<p class=\"note\">Not run this night (retrain --max-drift runs them).</p>\n</section>\n";
  const json thresholds = checks.value("thresholds", json::object());
  out += "<p>" + esc(json_text(checks.value("candidate", json("")))) + " (" +
         esc(json_text(checks.value("candidate_rows", json(0)))) + " rows) against " +
         esc(json_text(checks.value("reference", json("")))) + " (" +
         esc(json_text(checks.value("reference_rows", json(0)))) + " rows), what production trained on: <strong>" +
         (checks.value("passed", false) ? "passed" : "failed") + "</strong>. Thresholds: PSI " +
         num(thresholds.value("psi", 0.0)) + ", KS " + num(thresholds.value("ks", 0.0)) + ", missing rate +" +
         num(thresholds.value("missing_increase", 0.0)) + ", unseen levels " + num(thresholds.value("unseen", 0.0)) +
         ".</p>\n";
  auto figure = [](const json& c, const char* key) {
    return c.contains(key) && c[key].is_number() ? num(c[key].get<double>(), 3) : std::string("&ndash;");
  };
  std::vector<Row> rows;
  const json columns = checks.value("columns", json::array());
  for (const json& c : columns) {
    std::string failures;
    for (const json& f : c.value("failures", json::array())) {
      if (!failures.empty()) failures += "; ";
      failures += json_text(f);
    }
    const std::string column = esc(c.value("column", std::string())) + (c.value("label", false) ? " (label)" : "");
    rows.push_back({failures.empty() ? column : "<strong>" + column + "</strong>", esc(c.value("kind", std::string())),
                    num(c.value("reference_missing", 0.0), 3) + " &rarr; " + num(c.value("missing", 0.0), 3),
                    figure(c, "psi"), figure(c, "ks"), figure(c, "unseen"),
                    failures.empty() ? "ok" : "<strong>" + esc(failures) + "</strong>"});
  }
  out += table({"column", "kind", "missing", "PSI", "KS", "unseen", "result"}, rows);
  const json added = checks.value("new_columns", json::array());
  if (!added.empty()) out += "<p class=\"note\">New columns, not in the reference: " + esc(json_text(added)) + "</p>\n";
  return out + "</section>\n";
}

std::string run_section(const Page& p) {
  const RunRecord& r = p.run;
  std::vector<Row> rows = {{"run", esc(r.label())}, {"status", esc(run_status_name(r.status))},
                           {"model", esc(r.model.empty() ? std::string("none registered") : r.model)},
                           {"dataset", esc(r.dataset)},
                           {"started", esc(r.started_at)},
                           {"ended", esc(r.ended_at)},
                           {"host", esc(r.host)}};
  if (!r.error.empty()) rows.push_back({"error", esc(r.error)});
  return "<section id=\"run\">\n<h2>Run</h2>\n" + table({}, rows, "kv") + "</section>\n";
}

std::string lineage_section(const Page& p) {
  std::string out = "<section id=\"lineage\">\n<h2>Lineage</h2>\n";
  if (!p.model) return out + "<p class=\"note\">No model registered, so no lineage.</p>\n</section>\n";
  std::vector<Row> rows;
  // The questions people ask first, then the rest in the catalog's order.
  const std::vector<std::string> first = {"dataset", "dataset_fingerprint", "parent", "operation", "warm_start",
                                          "anneal_version", "anneal_commit"};
  std::set<std::string> shown;
  for (const auto& key : first)
    if (p.model->lineage.contains(key)) {
      rows.push_back({esc(key), esc(json_text(p.model->lineage[key]))});
      shown.insert(key);
    }
  for (const auto& [key, value] : p.model->lineage.items())
    if (!shown.count(key) && key != "config") rows.push_back({esc(key), esc(json_text(value))});
  out += table({}, rows, "kv") + "</section>\n";
  return out;
}

std::string config_section(const Page& p) {
  return "<section id=\"config\">\n<h2>Config</h2>\n<pre>" + esc(p.run.config_text) + "</pre>\n</section>\n";
}

std::string data_section(const Page& p) {
  std::string out = "<section id=\"data\">\n<h2>Data: " + esc(p.run.dataset) + "</h2>\n";
  if (!p.dataset) return out + "<p class=\"note\">" + esc(p.dataset_missing) + "</p>\n</section>\n";
  const DatasetVersion& v = *p.dataset;
  out += "<p>" + esc(v.format) + ", " + std::to_string(v.rows) + " rows (" + std::to_string(v.train_rows) +
         " train, " + std::to_string(v.test_rows) + " test), label column <code>" + esc(v.label_column) +
         "</code>, imported " + esc(v.created_at) + ".</p>\n";
  constexpr std::size_t kMaxColumns = 300;
  std::vector<Row> rows;
  for (std::size_t i = 0; i < v.columns.size() && i < kMaxColumns; ++i) {
    const ColumnSchema& c = v.columns[i];
    std::string type = column_type_name(c.type);
    if (!c.shape.empty()) {
      std::string shape;
      for (auto d : c.shape) {
        if (!shape.empty()) shape += 'x';
        shape += std::to_string(d);
      }
      type += " " + shape;
    }
    if (c.type == ColumnType::kDatetime) type += " (" + c.datetime_format + ")";
    std::string categories;
    if (c.type == ColumnType::kCategorical) {
      categories = std::to_string(c.categories.size()) + ":";
      for (std::size_t k = 0; k < c.categories.size() && k < 8; ++k) categories += " " + c.categories[k];
      if (c.categories.size() > 8) categories += " \xE2\x80\xA6";
    }
    const bool stats = c.type != ColumnType::kCategorical && c.count > 0;
    rows.push_back({esc(c.name) + (c.name == v.label_column ? " <span class=\"tag\">label</span>" : ""), esc(type),
                    std::to_string(c.count), std::to_string(c.missing), stats ? num(c.min) : "", stats ? num(c.max) : "",
                    stats ? num(c.mean) : "", stats ? num(c.std) : "", esc(categories)});
  }
  out += table({"column", "type", "values", "missing", "min", "max", "mean", "std", "categories"}, rows, "schema");
  if (v.columns.size() > kMaxColumns)
    out += "<p class=\"note\">and " + std::to_string(v.columns.size() - kMaxColumns) +
           " more columns (<code>anneal data show " + esc(v.ref()) + "</code> lists them all).</p>\n";
  if (std::any_of(v.columns.begin(), v.columns.end(), [](const ColumnSchema& c) { return c.type == ColumnType::kDatetime; }))
    out += "<p class=\"caption\">Date columns: min, max and mean in days since 1970-01-01.</p>\n";
  out += "</section>\n";
  return out;
}

std::string timing_section(const Page& p) {
  const json& s = p.run.summary;
  std::vector<Row> rows;
  if (s.contains("load_s") && s["load_s"].is_number()) rows.push_back({"load", fixed(s["load_s"].get<double>(), 3) + " s"});
  if (s.contains("first_step_s") && s["first_step_s"].is_number())
    rows.push_back({"first step", fixed(s["first_step_s"].get<double>(), 3) + " s after the process started"});
  double train_s = 0;
  for (const auto& e : p.epochs) train_s += epoch_value(e, "seconds").value_or(0);
  if (!p.epochs.empty())
    rows.push_back({"training", fixed(train_s, 3) + " s over " + std::to_string(p.epochs.size()) + " epochs" +
                                    (s.contains("steps") ? ", " + esc(json_text(s["steps"])) + " steps" : std::string())});
  if (s.contains("samples_per_s") && s["samples_per_s"].is_number())
    rows.push_back({"samples/s", fixed(s["samples_per_s"].get<double>(), 0)});
  if (s.contains("peak_rss_bytes") && s["peak_rss_bytes"].is_number())
    rows.push_back({"peak memory", bytes_text(s["peak_rss_bytes"].get<double>()) + " (peak RSS)"});
  if (s.contains("data_peak_bytes") && s["data_peak_bytes"].is_number())
    rows.push_back({"data held", bytes_text(s["data_peak_bytes"].get<double>()) + " at most, budget " +
                                     bytes_text(number_or(s, "memory_budget", 0)) +
                                     (s.value("streamed", false) ? ", streamed" : ", in memory")});
  if (!p.run.ended_at.empty()) rows.push_back({"wall clock", esc(p.run.started_at) + " to " + esc(p.run.ended_at)});
  std::string out = "<section id=\"timing\">\n<h2>Timing</h2>\n";
  out += rows.empty() ? "<p class=\"note\">No timings recorded.</p>\n" : table({}, rows, "kv");
  if (!p.epochs.empty()) {
    // Every recorded per-epoch value, the usual ones in reading order.
    std::vector<std::string> names;
    std::set<std::string> seen;
    for (const auto& e : p.epochs)
      for (const auto& [n, v] : e.values) seen.insert(n);
    for (const char* n : {"steps", "train_loss", "train_accuracy", "val_loss", "val_accuracy", "lr", "seconds",
                          "samples_per_s"})
      if (seen.erase(n)) names.push_back(n);
    names.insert(names.end(), seen.begin(), seen.end());
    Row head = {"epoch"};
    for (const auto& n : names) head.push_back(esc(n));
    std::vector<Row> epoch_rows;
    for (const auto& e : p.epochs) {
      Row r = {std::to_string(e.epoch)};
      for (const auto& n : names) {
        auto v = epoch_value(e, n);
        r.push_back(!v ? "" : n == "steps" || n == "samples_per_s" ? fixed(*v, 0) : num(*v));
      }
      epoch_rows.push_back(std::move(r));
    }
    out += "<details><summary>per epoch</summary>\n" + table(head, epoch_rows, "epochs") + "</details>\n";
  }
  out += "</section>\n";
  return out;
}

constexpr const char* kStyle = R"(
body{margin:0;font:14px/1.45 sans-serif;color:#111827;background:#ffffff}
header{height:56px;box-sizing:border-box;padding:14px 16px;background:#f3f4f6;border-bottom:1px solid #d1d5db;overflow:hidden;white-space:nowrap}
header h1{font-size:20px;line-height:28px;margin:0;font-weight:600}
main{padding:0 16px 32px}
#curves{display:flex;flex-wrap:wrap;gap:16px;padding:16px 0 0;margin:0}
.chart{display:block;flex:none}
.chart-title{font-size:14px;font-weight:600}
h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #e5e7eb}
h3{font-size:15px;margin:16px 0 6px}
table{border-collapse:collapse;font-size:13px}
th,td{padding:3px 10px;text-align:left;vertical-align:top;border-bottom:1px solid #f0f0f0}
thead th{border-bottom:1px solid #9ca3af}
table.kv th{font-weight:normal;color:#4b5563}
table.schema td,table.epochs td{font-variant-numeric:tabular-nums}
.pair{display:flex;flex-wrap:wrap;gap:24px;align-items:flex-start}
.bar{vertical-align:middle}
.note,.caption{color:#4b5563}
.tag{font-size:11px;background:#e5e7eb;padding:0 4px;border-radius:3px}
pre{background:#f9fafb;border:1px solid #e5e7eb;padding:8px 12px;overflow-x:auto;font-size:13px}
)";

}  // namespace

std::string run_report_html(Store& store, std::int64_t run_id) {
  Page p;
  p.run = find_run(store, run_id);
  p.epochs = run_epochs(store, run_id);
  p.checkpoints = run_checkpoints(store, run_id);
  if (!p.run.model.empty()) {
    p.model = find_model(store, parse_model_ref(p.run.model, "model"));
    if (p.model->lineage.contains("parent") && p.model->lineage["parent"].is_string()) {
      try {
        p.parent = find_model(store, parse_model_ref(p.model->lineage["parent"].get<std::string>(), "parent"));
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::kNotFound && e.kind() != ErrorKind::kUsage) throw;
      }
    }
  }
  for (RetrainRecord& r : list_retrains(store))
    if (r.run && *r.run == run_id) p.retrain = std::move(r);
  try {
    p.dataset = find_dataset(store, parse_dataset_ref(p.run.dataset, "dataset"));
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kNotFound) throw;
    p.dataset_missing = std::string("Not in the store: ") + e.what();
  }

  const std::string subject = p.run.label() + (p.model ? " \xE2\x80\x94 " + p.model->ref() : std::string());
  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      // Nothing to fetch and nothing to run: the page is whole as it is, and
      // even markup that escaped escaping could not load or execute anything.
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n"
      "<meta name=\"generator\" content=\"anneal " + esc(version()) + " (" + esc(git_commit()) + ")\">\n"
      "<title>anneal report: " + esc(subject) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n";
  html += "<header><h1>" + esc(subject) + " <small>" + esc(run_status_name(p.run.status)) + "</small></h1></header>\n";
  html += "<main>\n";
  try {
    html += curves_section(p);
    html += retrain_section(p);
    html += metrics_section(p);
    html += importance_section(p);
    html += permutation_section(p);
    html += calibration_section(p);
    html += search_section(p);
    html += parent_section(p);
    html += classes_section(p);
    html += run_section(p);
    html += lineage_section(p);
    html += config_section(p);
    html += data_section(p);
    html += timing_section(p);
  } catch (const json::exception& e) {
    // The store keeps these JSON records opaque; one that does not have the
    // shape training wrote is damage, not a reason to crash.
    throw corrupt(p.run.label() + ": its recorded summary or its model's lineage or metrics are not what training "
                  "writes (" + e.what() + ")");
  }
  html += "</main>\n</body>\n</html>\n";
  return html;
}

void write_run_report(Store& store, std::int64_t run, const std::filesystem::path& out, bool replace,
                      unsigned mode) {
  const std::filesystem::path dir = out.has_parent_path() ? out.parent_path() : std::filesystem::path(".");
  if (!std::filesystem::is_directory(dir))
    throw Error(ErrorKind::kUsage, Subject::kOutputFile, out.string() + ": no such directory " + dir.string());
  if (!replace && std::filesystem::exists(out))
    throw Error(ErrorKind::kUsage, Subject::kOutputFile, out.string() + ": file exists", Remedy::kReplaceExisting);
  const std::string html = run_report_html(store, run);
  if (!write_file_atomic(out, html, dir, replace, true, mode))
    throw Error(ErrorKind::kUsage, Subject::kOutputFile, out.string() + ": file exists", Remedy::kReplaceExisting);
}

}  // namespace anneal
