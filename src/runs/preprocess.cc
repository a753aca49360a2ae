#include "anneal/preprocess.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "anneal/error.h"
#include "anneal/spelling.h"

namespace anneal {
using nlohmann::json;

namespace {

// The shortest text that reads back to `v` ("10", "2.5"): class names.
std::string number_text(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

// ------------------------------------------------------------ features

namespace {

constexpr double kTwoPi = 6.283185307179586;

// Deterministic mean and population standard deviation of the values that
// are not NaN, in two passes over the rows in order (add_mean_pass, then
// add_spread_pass); a constant or empty column gets scale 1 (left centred
// at 0: it carries no information).
struct MeanAndScale {
  double sum = 0, m2 = 0;
  std::uint64_t count = 0;
  double mean() const { return count ? sum / static_cast<double>(count) : 0.0; }
  void add_mean_pass(double x) {
    if (std::isnan(x)) return;
    sum += x;
    ++count;
  }
  void add_spread_pass(double x, double mean) {
    if (!std::isnan(x)) m2 += (x - mean) * (x - mean);
  }
  std::pair<double, double> result() const {
    const double sd = count ? std::sqrt(m2 / static_cast<double>(count)) : 0.0;
    return {mean(), sd > 1e-12 ? sd : 1.0};
  }
};

// Whether a datetime cell (days since 1970) is a day the calendar
// arithmetic below can take: not NaN, and within about the years -6000 to
// 10000 (import reads 4-digit years, so every parsed value is).
bool in_calendar_range(double days) { return std::fabs(days) <= 3e6; }

// The calendar year of a datetime cell within in_calendar_range.
double calendar_year(double days) {
  namespace chrono = std::chrono;
  const chrono::sys_days day{chrono::days{static_cast<std::int64_t>(std::floor(days))}};
  return static_cast<double>(static_cast<int>(chrono::year_month_day{day}.year()));
}

// Writes the datetime expansion of `days` (in_calendar_range) into y (ct.output_width() floats).
void expand_datetime(const ColumnTransform& ct, double days, float* y) {
  namespace chrono = std::chrono;
  const double whole = std::floor(days);
  const chrono::sys_days day{chrono::days{static_cast<std::int64_t>(whole)}};
  const chrono::year_month_day date{day};
  const double day_of_year = static_cast<double>((day - chrono::sys_days{date.year() / 1 / 1}).count());  // 0-based
  const double year_days = date.year().is_leap() ? 366.0 : 365.0;
  const double weekday = chrono::weekday{day}.iso_encoding() - 1;  // Monday 0
  const double month = static_cast<unsigned>(date.month()) - 1;
  std::size_t i = 0;
  y[i++] = static_cast<float>((static_cast<double>(static_cast<int>(date.year())) - ct.year_mean) / ct.year_scale);
  y[i++] = static_cast<float>(std::sin(kTwoPi * month / 12.0));
  y[i++] = static_cast<float>(std::cos(kTwoPi * month / 12.0));
  y[i++] = static_cast<float>(std::sin(kTwoPi * weekday / 7.0));
  y[i++] = static_cast<float>(std::cos(kTwoPi * weekday / 7.0));
  y[i++] = static_cast<float>(std::sin(kTwoPi * day_of_year / year_days));
  y[i++] = static_cast<float>(std::cos(kTwoPi * day_of_year / year_days));
  if (ct.hour) {
    const double time_of_day = days - whole;  // fraction of the day
    y[i++] = static_cast<float>(std::sin(kTwoPi * time_of_day));
    y[i++] = static_cast<float>(std::cos(kTwoPi * time_of_day));
  }
  y[i++] = static_cast<float>((days - ct.mean) / ct.scale);
}

// Frequent levels of a categorical column: slot per code (-1: no training
// row), the other slot for the rare levels when a training row has one.
void fit_levels(ColumnTransform& ct, const std::vector<std::uint64_t>& counts, const FeatureOptions& options) {
  const std::size_t levels = counts.size();
  std::vector<std::size_t> order;
  for (std::size_t c = 0; c < levels; ++c)
    if (counts[c] > 0 && counts[c] >= static_cast<std::uint64_t>(options.category_min_count)) order.push_back(c);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return counts[a] > counts[b]; });
  if (order.size() > static_cast<std::size_t>(options.max_categories))
    order.resize(static_cast<std::size_t>(options.max_categories));
  std::vector<std::uint8_t> kept(levels, 0);
  for (std::size_t c : order) kept[c] = 1;
  std::vector<std::int64_t> slots(levels, -1);
  std::int64_t next = 0;
  bool rare = false;
  for (std::size_t c = 0; c < levels; ++c) {
    if (kept[c]) slots[c] = next++;
    else if (counts[c] > 0) rare = true;
  }
  ct.other = rare;
  if (rare)
    for (std::size_t c = 0; c < levels; ++c)
      if (!kept[c] && counts[c] > 0) slots[c] = next;
  ct.categories = next + (rare ? 1 : 0);
  bool identity = !rare && next == static_cast<std::int64_t>(levels);
  if (!identity) ct.slots = std::move(slots);
}

// Whether a column takes robust scaling when options ask for it: one
// value wide and numeric (an image keeps its standardization as a block,
// a datetime its expansion).
bool scalable(const ColumnSchema& column) {
  return column.type != ColumnType::kCategorical && column.type != ColumnType::kDatetime && column.width() == 1;
}

// Robust scaling's centre and spread from a column's training values (no
// NaN), sorted in place: the median, and the interquartile range, else
// half the range, else 1 (a constant column: every training row becomes 0).
std::pair<double, double> robust_centre_and_spread(std::vector<double>& values) {
  std::sort(values.begin(), values.end());
  if (values.empty()) return {0.0, 1.0};
  const double median = sorted_quantile(values, 0.5);
  const double iqr = sorted_quantile(values, 0.75) - sorted_quantile(values, 0.25);
  const double half_range = (values.back() - values.front()) / 2;
  return {median, iqr > 1e-12 ? iqr : half_range > 1e-12 ? half_range : 1.0};
}

}  // namespace

const char* scaling_name(Scaling s) {
  switch (s) {
    case Scaling::kStandard: return "standard";
    case Scaling::kRobust: return "robust";
    case Scaling::kAuto: return "auto";
  }
  return "standard";
}

Scaling parse_scaling(const std::string& text) {
  for (Scaling s : {Scaling::kStandard, Scaling::kRobust, Scaling::kAuto})
    if (text == scaling_name(s)) return s;
  throw usage_error("unknown scaling '" + text + "'; use standard, robust or auto");
}

double sorted_quantile(std::span<const double> sorted, double q) {
  if (sorted.empty()) return 0.0;
  const double at = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(at));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = at - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

bool robust_scaling_wanted(std::span<const double> values) {
  if (values.size() < 2) return false;
  const double n = static_cast<double>(values.size());
  double sum = 0;
  for (double v : values) sum += v;
  const double mean = sum / n;
  double m2 = 0, m3 = 0;
  for (double v : values) {
    const double d = v - mean;
    m2 += d * d;
    m3 += d * d * d;
  }
  m2 /= n;
  m3 /= n;
  if (m2 <= 1e-24) return false;  // constant: nothing to scale
  if (std::fabs(m3 / std::pow(m2, 1.5)) >= kRobustSkewness) return true;
  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  const double q1 = sorted_quantile(sorted, 0.25), q3 = sorted_quantile(sorted, 0.75);
  const double reach = kRobustOutlierIqr * (q3 - q1);
  if (reach <= 0) return false;  // most rows share one value: the skewness decides
  const auto outliers = std::count_if(sorted.begin(), sorted.end(), [&](double v) { return v < q1 - reach || v > q3 + reach; });
  return static_cast<double>(outliers) > kRobustOutlierFraction * n;
}

std::int64_t ColumnTransform::output_width() const {
  if (one_hot) return categories;
  if (datetime) return datetime_output_width(hour);
  return width;
}

std::optional<std::string> check_feature_columns(const Table& table, const std::vector<std::string>& names) {
  std::vector<std::string_view> known;
  for (std::size_t c = 0; c < table.columns.size(); ++c)
    if (c != table.label_column) known.push_back(table.columns[c].name);
  for (const std::string& name : names) {
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    if (name == table.columns[table.label_column].name)
      return "'" + name + "' is the label column, not a feature";
    return "no column '" + name + "'" + did_you_mean(name, known);
  }
  return std::nullopt;
}

FeatureTransform FeatureTransform::fit(const Table& table, std::span<const std::uint32_t> rows,
                                       const FeatureOptions& options) {
  const auto row_width = static_cast<std::size_t>(table.sample_width());
  return fit(table, rows.size(), [&](const std::function<void(const float*)>& visit) {
    for (std::uint32_t r : rows) visit(table.features.data() + r * row_width);
  }, options);
}

FeatureTransform FeatureTransform::fit(const Table& schema, std::uint64_t rows, const RowScan& scan,
                                       const FeatureOptions& options) {
  for (const auto* names : {&options.exclude, options.features ? &*options.features : nullptr})
    if (names)
      if (auto problem = check_feature_columns(schema, *names))
        throw usage_error((names == &options.exclude ? "exclude: " : "features: ") + *problem);
  auto named = [](const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  FeatureTransform t;
  // The columns options leave in, with where each starts in a stored row
  // and what the two scans gather for it.
  struct Candidate {
    const ColumnSchema* schema;
    std::size_t offset;
    std::size_t position;  // among the feature columns, 1-based
    std::int64_t width;    // scalars a row holds of it
    std::vector<std::uint64_t> level_counts;  // categorical
    MeanAndScale values, years;               // numeric / image, datetime (values: the elapsed days)
    std::vector<double> sample;               // robust scaling: the training values, no NaN
  };
  std::vector<Candidate> candidates;
  std::vector<std::pair<std::size_t, ExcludedColumn>> left_out;  // (position among feature columns, why)
  std::size_t offset = 0, position = 0;
  for (std::size_t c = 0; c < schema.columns.size(); ++c) {
    if (c == schema.label_column) continue;
    const ColumnSchema& column = schema.columns[c];
    const std::size_t column_offset = offset;
    offset += static_cast<std::size_t>(column.width());
    ++position;
    if (options.features && !named(*options.features, column.name)) {
      left_out.push_back({position, {column.name, "not in features=", false}});
      continue;
    }
    if (named(options.exclude, column.name)) {
      left_out.push_back({position, {column.name, "exclude=", false}});
      continue;
    }
    Candidate candidate{&column, column_offset, position, column.width(), {}, {}, {}, {}};
    if (column.type == ColumnType::kCategorical) candidate.level_counts.assign(column.categories.size(), 0);
    candidates.push_back(std::move(candidate));
  }
  if (offset != static_cast<std::size_t>(schema.sample_width()))
    throw corrupt("dataset schema: feature columns are " + std::to_string(offset) +
                  " values wide but rows hold " + std::to_string(schema.sample_width()));

  // Two scans in row order, each column's values in the order a row holds
  // them: the statistics are the same whether the rows come from memory or
  // stream from the store.
  scan([&](const float* row) {
    for (Candidate& c : candidates) {
      const float* x = row + c.offset;
      if (c.schema->type == ColumnType::kCategorical) {
        const double code = x[0];
        if (code >= 0 && code < static_cast<double>(c.level_counts.size()) && std::floor(code) == code)
          ++c.level_counts[static_cast<std::size_t>(code)];
      } else if (c.schema->type == ColumnType::kDatetime) {
        c.years.add_mean_pass(in_calendar_range(x[0]) ? calendar_year(x[0]) : std::nan(""));
        c.values.add_mean_pass(x[0]);
      } else {
        // Locals, so the chain of additions stays in registers (the same
        // additions in the same order: the same sum).
        double sum = c.values.sum;
        std::uint64_t count = c.values.count;
        for (std::int64_t k = 0; k < c.width; ++k) {
          const double v = x[k];
          if (!std::isnan(v)) {
            sum += v;
            ++count;
          }
        }
        c.values.sum = sum;
        c.values.count = count;
      }
    }
  });
  const bool spread = std::any_of(candidates.begin(), candidates.end(),
                                  [](const Candidate& c) { return c.schema->type != ColumnType::kCategorical; });
  if (spread) {
    std::vector<std::pair<double, double>> means;  // (values, years) per candidate
    for (const Candidate& c : candidates) means.emplace_back(c.values.mean(), c.years.mean());
    scan([&](const float* row) {
      for (std::size_t i = 0; i < candidates.size(); ++i) {
        Candidate& c = candidates[i];
        const float* x = row + c.offset;
        if (c.schema->type == ColumnType::kDatetime) {
          c.years.add_spread_pass(in_calendar_range(x[0]) ? calendar_year(x[0]) : std::nan(""), means[i].second);
          c.values.add_spread_pass(x[0], means[i].first);
        } else if (c.schema->type != ColumnType::kCategorical) {
          double m2 = c.values.m2;
          const double mean = means[i].first;
          for (std::int64_t k = 0; k < c.width; ++k) {
            const double v = x[k];
            if (!std::isnan(v)) m2 += (v - mean) * (v - mean);
          }
          c.values.m2 = m2;
        }
      }
    });
  }

  // Robust scaling needs each column's quantiles: a third scan keeps the
  // values of the columns it may scale (only when options ask for it, so
  // a plain fit holds nothing more).
  if (options.scaling != Scaling::kStandard &&
      std::any_of(candidates.begin(), candidates.end(), [](const Candidate& c) { return scalable(*c.schema); })) {
    scan([&](const float* row) {
      for (Candidate& c : candidates)
        if (scalable(*c.schema) && !std::isnan(row[c.offset])) c.sample.push_back(row[c.offset]);
    });
  }

  // The transform's columns, and the excluded ones in source order.
  std::size_t next_left_out = 0;
  auto flush_left_out = [&](std::size_t upto) {
    while (next_left_out < left_out.size() && left_out[next_left_out].first <= upto)
      t.excluded_.push_back(left_out[next_left_out++].second);
  };
  for (Candidate& c : candidates) {
    flush_left_out(c.position);
    const ColumnSchema& column = *c.schema;
    ColumnTransform ct;
    ct.column = column.name;
    ct.width = column.width();
    if (column.type == ColumnType::kCategorical) {
      const auto distinct = static_cast<std::uint64_t>(
          std::count_if(c.level_counts.begin(), c.level_counts.end(), [](auto n) { return n > 0; }));
      const bool chosen = options.features.has_value();
      if (!chosen && rows >= kIdentifierMinRows &&
          static_cast<double>(distinct) >= kIdentifierDistinctFraction * static_cast<double>(rows)) {
        t.excluded_.push_back({column.name,
                               std::to_string(distinct) + " distinct values in " + std::to_string(rows) +
                                   " training rows, an identifier",
                               true});
        continue;
      }
      ct.one_hot = true;
      ct.category_names = column.categories;
      fit_levels(ct, c.level_counts, options);
    } else if (column.type == ColumnType::kDatetime) {
      ct.datetime = true;
      ct.hour = column.has_time;
      std::tie(ct.year_mean, ct.year_scale) = c.years.result();
      std::tie(ct.mean, ct.scale) = c.values.result();
    } else if (scalable(column) && (options.scaling == Scaling::kRobust ||
                                    (options.scaling == Scaling::kAuto && robust_scaling_wanted(c.sample)))) {
      ct.robust = true;
      std::tie(ct.mean, ct.scale) = robust_centre_and_spread(c.sample);
    } else {
      std::tie(ct.mean, ct.scale) = c.values.result();
    }
    t.columns_.push_back(std::move(ct));
  }
  flush_left_out(std::numeric_limits<std::size_t>::max());
  if (t.columns_.empty())
    throw usage_error("no feature column is left (left out: " +
                      [&] {
                        std::string names;
                        for (const auto& e : t.excluded_) names += (names.empty() ? "" : ", ") + e.column;
                        return names;
                      }() +
                      "); name the columns to use with features=");
  // Images keep {C, H, W} when their one column is used whole; tabular
  // rows are as wide as the columns kept.
  t.input_shape_ = t.excluded_.empty() ? schema.sample_shape : std::vector<std::int64_t>{t.input_width()};
  return t;
}

std::vector<float> FeatureTransform::gather(const Table& table, std::span<const std::uint32_t> rows) const {
  std::map<std::string, std::size_t> offsets;  // column name -> offset in the table's rows
  std::size_t offset = 0;
  for (std::size_t c = 0; c < table.columns.size(); ++c) {
    if (c == table.label_column) continue;
    offsets[table.columns[c].name] = offset;
    offset += static_cast<std::size_t>(table.columns[c].width());
  }
  const auto row_width = static_cast<std::size_t>(table.sample_width());
  const auto in_w = static_cast<std::size_t>(input_width());
  std::vector<float> out(rows.size() * in_w);
  std::size_t at = 0;
  for (const auto& c : columns_) {
    auto it = offsets.find(c.column);
    if (it == offsets.end()) throw usage_error("features: the data has no column '" + c.column + "'");
    const auto w = static_cast<std::size_t>(c.width);
    for (std::size_t i = 0; i < rows.size(); ++i)
      std::copy_n(table.features.data() + rows[i] * row_width + it->second, w, out.data() + i * in_w + at);
    at += w;
  }
  return out;
}

std::vector<float> FeatureTransform::gather(const Table& table) const {
  std::vector<std::uint32_t> rows(table.rows);
  for (std::uint32_t i = 0; i < rows.size(); ++i) rows[i] = i;
  return gather(table, rows);
}

std::int64_t FeatureTransform::input_width() const {
  std::int64_t w = 0;
  for (const auto& c : columns_) w += c.width;
  return w;
}

std::int64_t FeatureTransform::output_width() const {
  std::int64_t w = 0;
  for (const auto& c : columns_) w += c.output_width();
  return w;
}

std::vector<std::int64_t> FeatureTransform::output_shape() const {
  bool expanded = std::any_of(columns_.begin(), columns_.end(), [](const auto& c) { return c.one_hot || c.datetime; });
  if (!expanded) return input_shape_;
  return {output_width()};
}

std::vector<float> FeatureTransform::apply(std::span<const float> features, TransformCounts& counts) const {
  const std::size_t in_w = static_cast<std::size_t>(input_width());
  const std::size_t out_w = static_cast<std::size_t>(output_width());
  if (in_w == 0 || features.size() % in_w != 0)
    throw data_error("features: " + std::to_string(features.size()) +
                     " values is not a whole number of rows of " + std::to_string(in_w));
  std::vector<float> out(features.size() / in_w * out_w, 0.0f);
  apply_into(features, out.data(), counts);
  return out;
}

void FeatureTransform::apply_into(std::span<const float> features, float* out, TransformCounts& counts) const {
  const std::size_t in_w = static_cast<std::size_t>(input_width());
  const std::size_t out_w = static_cast<std::size_t>(output_width());
  const std::size_t rows = features.size() / in_w;
  const std::vector<std::size_t> offsets = gathered_offsets();
  for (std::size_t r = 0; r < rows; ++r) transform_row(features.data() + r * in_w, offsets, out + r * out_w, counts);
}

std::vector<std::size_t> FeatureTransform::gathered_offsets() const {
  std::vector<std::size_t> offsets;
  for (std::size_t at = 0; const auto& c : columns_) {
    offsets.push_back(at);
    at += static_cast<std::size_t>(c.width);
  }
  return offsets;
}

std::vector<std::size_t> FeatureTransform::stored_offsets(const std::vector<ColumnSchema>& columns,
                                                          std::size_t label_column) const {
  std::map<std::string, std::size_t> offsets;  // column name -> offset in a stored row
  std::size_t offset = 0;
  for (std::size_t c = 0; c < columns.size(); ++c) {
    if (c == label_column) continue;
    offsets[columns[c].name] = offset;
    offset += static_cast<std::size_t>(columns[c].width());
  }
  std::vector<std::size_t> out;
  for (const auto& c : columns_) {
    auto it = offsets.find(c.column);
    if (it == offsets.end()) throw usage_error("features: the data has no column '" + c.column + "'");
    out.push_back(it->second);
  }
  return out;
}

void FeatureTransform::apply_stored(const float* row, std::span<const std::size_t> offsets, float* out,
                                    TransformCounts& counts) const {
  transform_row(row, offsets, out, counts);
}

void FeatureTransform::transform_row(const float* row, std::span<const std::size_t> offsets, float* y,
                                     TransformCounts& counts) const {
  for (std::size_t i = 0; i < columns_.size(); ++i) {
    const ColumnTransform& c = columns_[i];
    const float* x = row + offsets[i];
    if (c.one_hot) {
      const float code = *x;
      const auto levels = static_cast<float>(c.category_names.size());
      std::int64_t slot = -1;
      if (std::isnan(code)) {
        ++counts.missing;
      } else {
        if (code >= 0 && std::floor(code) == code && code < levels)
          slot = c.slots.empty() ? static_cast<std::int64_t>(code) : c.slots[static_cast<std::size_t>(code)];
        if (slot < 0) {
          ++counts.unseen;  // outside the dictionary, or a level no training row had
          if (c.other) slot = c.categories - 1;
        }
      }
      if (slot >= 0) y[slot] = 1.0f;
    } else if (c.datetime) {
      if (!in_calendar_range(*x)) ++counts.missing;  // all zeros
      else expand_datetime(c, static_cast<double>(*x), y);
    } else {
      const float mean = static_cast<float>(c.mean);
      const float inv = static_cast<float>(1.0 / c.scale);
      // Branch-free, so the compiler vectorizes it: an image column is
      // hundreds of cells, transformed again for every batch of every epoch.
      std::uint64_t missing = 0;
      for (std::int64_t k = 0; k < c.width; ++k) {
        const float v = x[k];
        const bool nan = v != v;
        missing += nan;
        y[k] = nan ? 0.0f : (v - mean) * inv;
      }
      counts.missing += missing;
      if (c.robust) {
        // The smooth clip, in float, as the ONNX export and the format's
        // reader compute it: z / sqrt(1 + (z * (1/3))^2).
        const float z = y[0];
        const float t = z * (1.0f / 3.0f);
        const float s = 1.0f + t * t;
        y[0] = z / std::sqrt(s);
      }
    }
    y += c.output_width();
  }
}

json FeatureTransform::to_json() const {
  json cols = json::array();
  for (const auto& c : columns_) {
    json j = {{"column", c.column}, {"width", c.width}};
    if (c.one_hot) {
      j["one_hot"] = c.category_names;
      if (!c.slots.empty()) {
        j["slots"] = c.slots;
        j["other"] = c.other;
      }
    } else if (c.datetime) {
      j["datetime"] = {{"hour", c.hour},           {"year_mean", c.year_mean}, {"year_scale", c.year_scale},
                       {"elapsed_mean", c.mean}, {"elapsed_scale", c.scale}};
    } else if (c.robust) {
      // Its own object, with no "mean": a reader that does not know robust
      // scaling rejects the model rather than skipping the clip.
      j["robust"] = {{"median", c.mean}, {"spread", c.scale}};
    } else {
      j["mean"] = c.mean;
      j["scale"] = c.scale;
    }
    cols.push_back(std::move(j));
  }
  json out = {{"input_shape", input_shape_}, {"columns", cols}};
  // Absent when every column is used: such a header reads as before.
  if (!excluded_.empty()) {
    json ex = json::array();
    for (const auto& e : excluded_) ex.push_back({{"column", e.column}, {"reason", e.reason}, {"identifier", e.identifier}});
    out["excluded"] = std::move(ex);
  }
  return out;
}

FeatureTransform FeatureTransform::from_json(const json& j) {
  try {
    FeatureTransform t;
    t.input_shape_ = j.at("input_shape").get<std::vector<std::int64_t>>();
    for (const auto& c : j.at("columns")) {
      ColumnTransform ct;
      ct.column = c.at("column").get<std::string>();
      ct.width = c.at("width").get<std::int64_t>();
      if (c.contains("one_hot")) {
        ct.one_hot = true;
        ct.category_names = c.at("one_hot").get<std::vector<std::string>>();
        ct.categories = static_cast<std::int64_t>(ct.category_names.size());
        if (c.contains("slots")) {
          ct.slots = c.at("slots").get<std::vector<std::int64_t>>();
          ct.other = c.at("other").get<bool>();
          if (ct.slots.size() != ct.category_names.size())
            throw corrupt("feature transform: column '" + ct.column + "' has " + std::to_string(ct.slots.size()) +
                          " slots for " + std::to_string(ct.category_names.size()) + " levels");
          std::int64_t top = -1;
          for (auto s : ct.slots) {
            if (s < -1) throw corrupt("feature transform: column '" + ct.column + "' has slot " + std::to_string(s));
            top = std::max(top, s);
          }
          ct.categories = top + 1;
          if (ct.other && top < 0) ct.categories = 1;
        }
        if (ct.width != 1) throw corrupt("feature transform: one-hot column '" + ct.column + "' is not 1 wide");
      } else if (c.contains("datetime")) {
        const json& d = c.at("datetime");
        ct.datetime = true;
        ct.hour = d.at("hour").get<bool>();
        ct.year_mean = d.at("year_mean").get<double>();
        ct.year_scale = d.at("year_scale").get<double>();
        ct.mean = d.at("elapsed_mean").get<double>();
        ct.scale = d.at("elapsed_scale").get<double>();
        if (ct.width != 1) throw corrupt("feature transform: datetime column '" + ct.column + "' is not 1 wide");
      } else if (c.contains("robust")) {
        const json& r = c.at("robust");
        ct.robust = true;
        ct.mean = r.at("median").get<double>();
        ct.scale = r.at("spread").get<double>();
        if (ct.width != 1) throw corrupt("feature transform: robust-scaled column '" + ct.column + "' is not 1 wide");
        if (!std::isfinite(ct.mean) || !std::isfinite(ct.scale) || !(ct.scale > 0) || !std::isfinite(1.0 / ct.scale))
          throw corrupt("feature transform: robust-scaled column '" + ct.column + "' has median " +
                        number_text(ct.mean) + " and spread " + number_text(ct.scale) +
                        "; the spread must be a positive finite number");
      } else {
        ct.mean = c.at("mean").get<double>();
        ct.scale = c.at("scale").get<double>();
      }
      t.columns_.push_back(std::move(ct));
    }
    if (j.contains("excluded"))
      for (const auto& e : j.at("excluded"))
        t.excluded_.push_back({e.at("column").get<std::string>(), e.at("reason").get<std::string>(),
                               e.value("identifier", false)});
    return t;
  } catch (const json::exception& e) {
    throw corrupt(std::string("feature transform: ") + e.what());
  }
}

// -------------------------------------------------------------- labels

bool labels_are_classes(const Table& table) {
  const ColumnSchema& label = table.columns[table.label_column];
  if (label.type == ColumnType::kCategorical) return true;
  std::set<float> distinct;
  for (float y : table.labels) {
    if (std::floor(y) != y) return false;  // NaN included
    distinct.insert(y);
    if (distinct.size() > kMaxGuessedClasses) return false;
  }
  return true;
}

LossKind LabelEncoding::infer_loss(const Table& train) {
  return labels_are_classes(train) ? LossKind::kSoftmaxCrossEntropy : LossKind::kMeanSquaredError;
}

const char* target_transform_name(TargetTransform t) {
  switch (t) {
    case TargetTransform::kStandard: return "standard";
    case TargetTransform::kLog: return "log";
    case TargetTransform::kAuto: return "auto";
  }
  return "standard";
}

TargetTransform parse_target_transform(const std::string& text) {
  for (TargetTransform t : {TargetTransform::kStandard, TargetTransform::kLog, TargetTransform::kAuto})
    if (text == target_transform_name(t)) return t;
  throw usage_error("unknown target_transform '" + text + "'; use standard, log or auto");
}

bool log_target_wanted(std::span<const float> targets) {
  if (targets.size() < 2) return false;
  double sum = 0;
  for (float y : targets) {
    if (!(y >= 0)) return false;  // a negative target, or NaN
    sum += y;
  }
  const double n = static_cast<double>(targets.size());
  const double mean = sum / n;
  double m2 = 0, m3 = 0;
  for (float y : targets) {
    const double d = y - mean;
    m2 += d * d;
    m3 += d * d * d;
  }
  m2 /= n;
  m3 /= n;
  return m2 > 1e-24 && m3 / std::pow(m2, 1.5) >= kLogTargetSkewness;
}

LabelEncoding LabelEncoding::fit_log_target(LabelEncoding e, std::span<const float> targets) {
  e.log_ = true;
  double least = 0;
  for (float y : targets)
    if (y < least) least = y;
  e.shift_ = least;
  double sum = 0;
  for (float y : targets) sum += std::log1p(y - e.shift_);
  const double n = static_cast<double>(targets.size());
  e.mean_ = n > 0 ? sum / n : 0;
  double m2 = 0;
  for (float y : targets) {
    const double d = std::log1p(y - e.shift_) - e.mean_;
    m2 += d * d;
  }
  const double sd = n > 0 ? std::sqrt(m2 / n) : 0;
  e.scale_ = sd > 1e-12 ? sd : 1.0;
  return e;
}

LabelEncoding LabelEncoding::fit(LossKind loss, const Table& train, const Table& test, TargetTransform target) {
  LabelEncoding e;
  const ColumnSchema& label = train.columns[train.label_column];
  e.column_ = label.name;
  e.classification_ = is_classification(loss);
  e.categorical_ = label.type == ColumnType::kCategorical;
  if (!e.classification_) {
    if (e.categorical_)
      throw usage_error("loss = " + std::string(loss_name(loss)) + ": label column '" + label.name +
                        "' is categorical; use softmax_ce or bce");
    if (target == TargetTransform::kLog || (target == TargetTransform::kAuto && log_target_wanted(train.labels)))
      return fit_log_target(std::move(e), train.labels);
    double sum = 0;
    for (float y : train.labels) sum += y;
    double n = static_cast<double>(train.labels.size());
    e.mean_ = n > 0 ? sum / n : 0;
    double m2 = 0;
    for (float y : train.labels) m2 += (y - e.mean_) * (y - e.mean_);
    double sd = n > 0 ? std::sqrt(m2 / n) : 0;
    e.scale_ = sd > 1e-12 ? sd : 1.0;
    return e;
  }
  if (e.categorical_) {
    e.class_names_ = label.categories;
  } else {
    std::set<double> values;
    for (const Table* part : {&train, &test})
      for (float y : part->labels) {
        if (std::floor(y) != y || std::isnan(y))
          throw usage_error("loss = " + std::string(loss_name(loss)) + ": label column '" + label.name +
                            "' holds the non-integer value " + number_text(y) +
                            "; use loss = mse or mae for a numeric target");
        values.insert(y);
        if (values.size() > 100000)
          throw usage_error("loss = " + std::string(loss_name(loss)) + ": label column '" + label.name +
                            "' has over 100000 distinct values; use loss = mse for a numeric target");
      }
    e.class_values_.assign(values.begin(), values.end());
    for (double v : e.class_values_) e.class_names_.push_back(number_text(v));
  }
  if (loss == LossKind::kBinaryCrossEntropy && e.class_names_.size() != 2)
    throw usage_error("loss = bce: label column '" + label.name + "' has " +
                      std::to_string(e.class_names_.size()) + " classes, bce needs exactly 2; use softmax_ce");
  if (e.class_names_.size() < 2)
    throw usage_error("label column '" + label.name + "' has " + std::to_string(e.class_names_.size()) +
                      " class; classification needs at least 2");
  return e;
}

float LabelEncoding::encode(float stored, const std::string& where) const {
  if (!classification_ && log_) {
    const double u = static_cast<double>(stored) - shift_;
    if (u <= -1)  // NaN passes, as the standard encoding passes it
      throw data_error(where + ": label '" + column_ + "' value " + number_text(stored) +
                       " is outside the model's log target (log1p(y - " + number_text(shift_) +
                       ") needs y > " + number_text(shift_ - 1) + ")");
    return static_cast<float>((std::log1p(u) - mean_) / scale_);
  }
  if (!classification_) return static_cast<float>((stored - mean_) / scale_);
  if (categorical_) {
    if (stored >= 0 && std::floor(stored) == stored && stored < static_cast<float>(class_names_.size()))
      return stored;
  } else {
    auto it = std::lower_bound(class_values_.begin(), class_values_.end(), static_cast<double>(stored));
    if (it != class_values_.end() && *it == stored)
      return static_cast<float>(it - class_values_.begin());
  }
  throw data_error(where + ": label '" + column_ + "' value " + number_text(stored) +
                   " is not one of the model's " + std::to_string(class_names_.size()) + " classes");
}

std::vector<float> LabelEncoding::encode_all(std::span<const float> stored, const std::string& where) const {
  std::vector<float> out(stored.size());
  for (std::size_t i = 0; i < stored.size(); ++i) out[i] = encode(stored[i], where + " row " + std::to_string(i + 1));
  return out;
}

json LabelEncoding::to_json() const {
  json j = {{"column", column_}, {"classification", classification_}, {"categorical", categorical_}};
  if (classification_) {
    j["classes"] = class_names_;
    if (!categorical_) j["values"] = class_values_;
  } else if (log_) {
    // Its own object, with no top-level "mean": a reader that does not know
    // the log target rejects the model rather than skip the expm1.
    j["log_target"] = {{"shift", shift_}, {"mean", mean_}, {"scale", scale_}};
  } else {
    j["mean"] = mean_;
    j["scale"] = scale_;
  }
  return j;
}

LabelEncoding LabelEncoding::from_json(const json& j) {
  try {
    LabelEncoding e;
    e.column_ = j.at("column").get<std::string>();
    e.classification_ = j.at("classification").get<bool>();
    e.categorical_ = j.at("categorical").get<bool>();
    if (e.classification_) {
      e.class_names_ = j.at("classes").get<std::vector<std::string>>();
      if (!e.categorical_) e.class_values_ = j.at("values").get<std::vector<double>>();
    } else if (j.contains("log_target")) {
      const json& l = j.at("log_target");
      e.log_ = true;
      e.shift_ = l.at("shift").get<double>();
      e.mean_ = l.at("mean").get<double>();
      e.scale_ = l.at("scale").get<double>();
      if (!std::isfinite(e.shift_) || !std::isfinite(e.mean_) || !std::isfinite(e.scale_) || !(e.scale_ > 0))
        throw corrupt("label encoding: log target with shift " + number_text(e.shift_) + ", mean " +
                      number_text(e.mean_) + " and scale " + number_text(e.scale_) +
                      "; each must be finite and the scale positive");
    } else {
      e.mean_ = j.at("mean").get<double>();
      e.scale_ = j.at("scale").get<double>();
    }
    return e;
  } catch (const json::exception& ex) {
    throw corrupt(std::string("label encoding: ") + ex.what());
  }
}

// ------------------------------------------------------ validation split

void validation_split(std::span<const float> groups, bool stratify, double fraction,
                      std::uint64_t seed, std::vector<std::uint32_t>& train,
                      std::vector<std::uint32_t>& validation) {
  train.clear();
  validation.clear();
  std::vector<std::uint8_t> held(groups.size(), 0);
  if (fraction > 0) {
    std::map<float, std::vector<std::uint32_t>> strata;
    for (std::uint32_t i = 0; i < groups.size(); ++i) strata[stratify ? groups[i] : 0.0f].push_back(i);
    // A different stream from the store's test split, so the two never align.
    auto key = [seed](std::uint64_t row) { return mix(seed * 0x9e3779b97f4a7c15ULL + row + 0x76616c6964ULL); };
    for (auto& [group, rows] : strata) {
      auto n = static_cast<std::size_t>(std::llround(fraction * static_cast<double>(rows.size())));
      std::vector<std::pair<std::uint64_t, std::uint32_t>> keyed;
      for (std::uint32_t r : rows) keyed.emplace_back(key(r), r);
      std::sort(keyed.begin(), keyed.end());
      for (std::size_t k = 0; k < n && k < keyed.size(); ++k) held[keyed[k].second] = 1;
    }
  }
  for (std::uint32_t i = 0; i < groups.size(); ++i) (held[i] ? validation : train).push_back(i);
}

}  // namespace anneal
