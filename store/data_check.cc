// Data checks (anneal/data_check.h): each version read a block of rows at a
// time; the reference twice (first its samples and level counts, then its
// bin counts at the edges the samples gave), the candidate once.
#include "anneal/data_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <span>

#include "anneal/dataset_rows.h"
#include "anneal/error.h"
#include "anneal/report.h"

namespace anneal {
using nlohmann::json;

namespace {

constexpr std::uint64_t kBlockRows = 4096;
constexpr std::size_t kSampleValues = 4096;  // per numeric column: its deciles and percentiles
constexpr double kProportionFloor = 1e-4;    // an empty bin counts as this share in the PSI
// A categorical column with more distinct values than this share of its
// rows (and more than kIdentifierMinLevels) is an identifier: order numbers
// and names are new every night, so their levels say nothing of drift.
constexpr double kIdentifierShare = 0.5;
constexpr std::size_t kIdentifierMinLevels = 20;

const char* type_name(ColumnType type) {
  switch (type) {
    case ColumnType::kNumeric: return "numeric";
    case ColumnType::kCategorical: return "categorical";
    case ColumnType::kDatetime: return "datetime";
  }
  return "?";
}

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", v);
  return text;
}

// Where each column of a version is in its stored rows: the label in the
// labels stream, every other column at its offset in the features stream.
struct Layout {
  std::vector<std::size_t> offset;  // per column; the label's unused
  std::size_t width = 0;
};

Layout layout_of(const DatasetVersion& v) {
  Layout l;
  l.offset.assign(v.columns.size(), 0);
  for (std::size_t c = 0; c < v.columns.size(); ++c) {
    if (v.columns[c].name == v.label_column) continue;
    l.offset[c] = l.width;
    l.width += static_cast<std::size_t>(v.columns[c].width());
  }
  return l;
}

void require_table(const DatasetVersion& v) {
  const bool image = v.format == "idx" || std::any_of(v.columns.begin(), v.columns.end(), [](const ColumnSchema& c) {
                       return c.width() != 1;
                     });
  if (image)
    throw usage_error(v.ref() + " holds " + v.format + " images: data checks compare table columns, and images have none");
}

// Calls fn(value) for column `c` of every row of `v` (train, then test),
// NaN for a missing cell; categorical cells are their codes.
template <class Fn>
void for_each_value(Store& store, const DatasetVersion& v, const std::vector<std::size_t>& columns, Fn fn) {
  const Layout layout = layout_of(v);
  for (const std::string part : {"", "test."}) {
    if (!v.stream(part + "features") || !v.stream(part + "labels")) continue;
    TensorRowReader features(store, v, part + "features"), labels(store, v, part + "labels");
    if (features.type() != StoredType::kF32 || labels.type() != StoredType::kF32 ||
        static_cast<std::size_t>(features.row_width()) != layout.width || labels.row_width() != 1)
      throw corrupt(features.owner() + ": not the f32 rows of its " + std::to_string(v.columns.size()) + " columns");
    std::vector<float> x, y;
    for (std::uint64_t first = 0; first < features.rows(); first += kBlockRows) {
      const std::uint64_t n = std::min(kBlockRows, features.rows() - first);
      x.resize(n * layout.width);
      y.resize(n);
      features.read(first, n, std::as_writable_bytes(std::span(x)));
      labels.read(first, n, std::as_writable_bytes(std::span(y)));
      for (std::uint64_t r = 0; r < n; ++r)
        for (std::size_t c : columns)
          fn(c, v.columns[c].name == v.label_column ? y[r] : x[r * layout.width + layout.offset[c]]);
    }
  }
}

double psi(const std::vector<double>& reference, const std::vector<double>& candidate) {
  double sum = 0;
  for (std::size_t i = 0; i < reference.size(); ++i) {
    const double p = std::max(reference[i], kProportionFloor), q = std::max(candidate[i], kProportionFloor);
    sum += (q - p) * std::log(q / p);
  }
  return sum;
}

std::vector<double> shares(const std::vector<std::uint64_t>& counts, std::uint64_t total) {
  std::vector<double> out(counts.size(), 0.0);
  if (total == 0) return out;
  for (std::size_t i = 0; i < counts.size(); ++i) out[i] = static_cast<double>(counts[i]) / static_cast<double>(total);
  return out;
}

// One column's state through the passes.
struct ColumnState {
  std::size_t reference_column = 0;
  std::optional<std::size_t> candidate_column;
  ColumnCheck check;
  bool distribution = false;  // numeric or categorical, compared by distribution
  // Counts: rows, missing cells, non-missing values.
  std::uint64_t ref_rows = 0, ref_missing = 0, new_rows = 0, new_missing = 0;
  // numeric
  std::vector<float> sample;
  std::uint64_t seen = 0;
  std::vector<float> edges, points;  // deciles (bins), percentiles (KS)
  std::vector<std::uint64_t> ref_bins, new_bins, ref_below, new_below;
  // categorical: by level name
  std::map<std::string, std::uint64_t> ref_levels, new_levels;
};

void count_numeric(ColumnState& s, float v, std::vector<std::uint64_t>& bins, std::vector<std::uint64_t>& below) {
  bins[static_cast<std::size_t>(std::lower_bound(s.edges.begin(), s.edges.end(), v) - s.edges.begin())]++;
  below[static_cast<std::size_t>(std::lower_bound(s.points.begin(), s.points.end(), v) - s.points.begin())]++;
}

std::vector<float> quantiles(std::vector<float> sample, int parts) {
  std::vector<float> out;
  if (sample.empty()) return out;
  std::sort(sample.begin(), sample.end());
  for (int i = 1; i < parts; ++i) {
    const float q = sample[static_cast<std::size_t>(i) * (sample.size() - 1) / static_cast<std::size_t>(parts)];
    if (out.empty() || q > out.back()) out.push_back(q);
  }
  return out;
}

}  // namespace

bool DataCheckReport::passed() const {
  return std::all_of(columns.begin(), columns.end(), [](const ColumnCheck& c) { return c.failures.empty(); });
}

std::string DataCheckReport::failure_line() const {
  std::string out;
  for (const ColumnCheck& c : columns)
    for (const std::string& f : c.failures) out += (out.empty() ? "" : "; ") + c.column + ": " + f;
  return out;
}

json DataCheckReport::to_json() const {
  json cols = json::array();
  auto opt = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  for (const ColumnCheck& c : columns)
    cols.push_back({{"column", c.column},
                    {"kind", c.kind},
                    {"label", c.label},
                    {"present", c.present},
                    {"type_change", c.type_change.empty() ? json(nullptr) : json(c.type_change)},
                    {"reference_missing", c.reference_missing},
                    {"missing", c.missing},
                    {"psi", opt(c.psi)},
                    {"ks", opt(c.ks)},
                    {"unseen", opt(c.unseen)},
                    {"failures", c.failures}});
  return {{"candidate", candidate},
          {"reference", reference},
          {"candidate_rows", candidate_rows},
          {"reference_rows", reference_rows},
          {"passed", passed()},
          {"thresholds",
           {{"psi", thresholds.psi}, {"ks", thresholds.ks}, {"missing_increase", thresholds.missing_increase},
            {"unseen", thresholds.unseen}}},
          {"columns", cols},
          {"new_columns", new_columns}};
}

DataCheckReport check_data(Store& store, const DatasetRef& candidate_ref, const DatasetRef& reference_ref,
                           const DriftThresholds& thresholds) {
  const DatasetVersion candidate = find_dataset(store, candidate_ref);
  const DatasetVersion reference = find_dataset(store, reference_ref);
  require_table(candidate);
  require_table(reference);
  DataCheckReport report;
  report.candidate = candidate.ref();
  report.reference = reference.ref();
  report.candidate_rows = candidate.rows;
  report.reference_rows = reference.rows;
  report.thresholds = thresholds;

  std::vector<ColumnState> states(reference.columns.size());
  std::vector<std::size_t> ref_columns, new_columns;
  std::vector<std::optional<std::size_t>> state_of_candidate(candidate.columns.size());
  for (std::size_t c = 0; c < reference.columns.size(); ++c) {
    const ColumnSchema& col = reference.columns[c];
    ColumnState& s = states[c];
    s.reference_column = c;
    s.check.column = col.name;
    s.check.kind = type_name(col.type);
    s.check.label = col.name == reference.label_column;
    ref_columns.push_back(c);
    for (std::size_t k = 0; k < candidate.columns.size(); ++k)
      if (candidate.columns[k].name == col.name) s.candidate_column = k;
    if (!s.candidate_column) {
      s.check.present = false;
      s.check.failures.push_back("absent");
      continue;
    }
    const ColumnSchema& now = candidate.columns[*s.candidate_column];
    if (s.check.label && candidate.label_column != reference.label_column) {
      s.check.failures.push_back("no longer the label ('" + candidate.label_column + "' is)");
    }
    if (now.type != col.type) {
      s.check.type_change = std::string(type_name(col.type)) + " -> " + type_name(now.type);
      s.check.failures.push_back("type " + s.check.type_change);
    }
    state_of_candidate[*s.candidate_column] = c;
    new_columns.push_back(*s.candidate_column);
    s.distribution = now.type == col.type && col.type != ColumnType::kDatetime;
  }
  for (const ColumnSchema& col : candidate.columns)
    if (std::none_of(reference.columns.begin(), reference.columns.end(),
                     [&](const ColumnSchema& r) { return r.name == col.name; }))
      report.new_columns.push_back(col.name);

  // Reference, first pass: missing cells, level counts, numeric samples.
  std::mt19937_64 rng(0);  // the standard fixes its sequence: the same sample everywhere
  for_each_value(store, reference, ref_columns, [&](std::size_t c, float v) {
    ColumnState& s = states[c];
    ++s.ref_rows;
    if (std::isnan(v)) {
      ++s.ref_missing;
      return;
    }
    const ColumnSchema& col = reference.columns[c];
    if (col.type == ColumnType::kCategorical) {
      const auto code = static_cast<std::size_t>(v);
      s.ref_levels[code < col.categories.size() ? col.categories[code] : std::to_string(code)]++;
    } else if (col.type == ColumnType::kNumeric) {
      // Reservoir sampling: every value equally likely to be kept.
      if (s.sample.size() < kSampleValues) s.sample.push_back(v);
      else if (const std::uint64_t slot = rng() % (s.seen + 1); slot < kSampleValues) s.sample[slot] = v;
      ++s.seen;
    }
  });
  bool numeric = false;
  for (ColumnState& s : states) {
    const ColumnSchema& col = reference.columns[s.reference_column];
    if (col.type == ColumnType::kCategorical && !s.check.label) {
      const std::uint64_t values = s.ref_rows - s.ref_missing;
      if (s.ref_levels.size() > kIdentifierMinLevels &&
          static_cast<double>(s.ref_levels.size()) > kIdentifierShare * static_cast<double>(values)) {
        s.check.kind = "identifier";
        s.distribution = false;
      }
    }
    if (col.type == ColumnType::kNumeric && s.distribution) {
      s.edges = quantiles(s.sample, 10);
      s.points = quantiles(s.sample, 100);
      s.ref_bins.assign(s.edges.size() + 1, 0);
      s.new_bins.assign(s.edges.size() + 1, 0);
      s.ref_below.assign(s.points.size() + 1, 0);
      s.new_below.assign(s.points.size() + 1, 0);
      numeric = true;
    }
    s.sample = {};
  }
  // Reference, second pass: its bin counts at its own edges.
  if (numeric) {
    std::vector<std::size_t> numeric_columns;
    for (const ColumnState& s : states)
      if (!s.ref_bins.empty()) numeric_columns.push_back(s.reference_column);
    for_each_value(store, reference, numeric_columns, [&](std::size_t c, float v) {
      if (!std::isnan(v)) count_numeric(states[c], v, states[c].ref_bins, states[c].ref_below);
    });
  }
  // The candidate, once.
  for_each_value(store, candidate, new_columns, [&](std::size_t k, float v) {
    ColumnState& s = states[*state_of_candidate[k]];
    ++s.new_rows;
    if (std::isnan(v)) {
      ++s.new_missing;
      return;
    }
    if (!s.distribution) return;
    const ColumnSchema& col = candidate.columns[k];
    if (col.type == ColumnType::kCategorical) {
      const auto code = static_cast<std::size_t>(v);
      s.new_levels[code < col.categories.size() ? col.categories[code] : std::to_string(code)]++;
    } else if (!s.new_bins.empty()) {
      count_numeric(s, v, s.new_bins, s.new_below);
    }
  });

  for (ColumnState& s : states) {
    ColumnCheck& check = s.check;
    if (!s.candidate_column) {
      report.columns.push_back(std::move(check));
      continue;
    }
    check.reference_missing =
        s.ref_rows ? static_cast<double>(s.ref_missing) / static_cast<double>(s.ref_rows) : 0.0;
    check.missing = s.new_rows ? static_cast<double>(s.new_missing) / static_cast<double>(s.new_rows) : 0.0;
    if (check.missing > check.reference_missing + thresholds.missing_increase)
      check.failures.push_back("missing " + number(check.missing) + " > " + number(check.reference_missing) + " + " +
                               number(thresholds.missing_increase));
    const std::uint64_t ref_values = s.ref_rows - s.ref_missing, new_values = s.new_rows - s.new_missing;
    if (s.distribution && ref_values > 0 && new_values > 0) {
      const ColumnSchema& col = reference.columns[s.reference_column];
      if (col.type == ColumnType::kCategorical) {
        // Shares by level, the reference's levels then one bucket for the
        // levels it never had.
        std::vector<std::uint64_t> ref_counts, new_counts;
        std::uint64_t unseen = new_values;
        for (const auto& [level, count] : s.ref_levels) {
          ref_counts.push_back(count);
          const auto it = s.new_levels.find(level);
          new_counts.push_back(it == s.new_levels.end() ? 0 : it->second);
          unseen -= new_counts.back();
        }
        ref_counts.push_back(0);
        new_counts.push_back(unseen);
        check.psi = psi(shares(ref_counts, ref_values), shares(new_counts, new_values));
        check.unseen = static_cast<double>(unseen) / static_cast<double>(new_values);
      } else if (!s.ref_bins.empty()) {
        check.psi = psi(shares(s.ref_bins, ref_values), shares(s.new_bins, new_values));
        double ks = 0;
        std::uint64_t ref_cum = 0, new_cum = 0;
        for (std::size_t j = 0; j < s.points.size(); ++j) {
          ref_cum += s.ref_below[j];
          new_cum += s.new_below[j];
          ks = std::max(ks, std::fabs(static_cast<double>(ref_cum) / static_cast<double>(ref_values) -
                                      static_cast<double>(new_cum) / static_cast<double>(new_values)));
        }
        check.ks = ks;
      }
      if (check.psi && *check.psi > thresholds.psi)
        check.failures.push_back("psi " + number(*check.psi) + " > " + number(thresholds.psi));
      if (check.ks && *check.ks > thresholds.ks)
        check.failures.push_back("ks " + number(*check.ks) + " > " + number(thresholds.ks));
      if (check.unseen && *check.unseen > thresholds.unseen)
        check.failures.push_back("unseen levels " + number(*check.unseen) + " > " + number(thresholds.unseen));
    }
    report.columns.push_back(std::move(check));
  }
  return report;
}

CheckedImport import_checked(Store& store, const ImportRequest& request, const DriftThresholds& thresholds,
                             Reporter& reporter) {
  validate_dataset_name(request.dataset);
  std::optional<DatasetVersion> previous;
  try {
    previous = find_dataset(store, parse_dataset_ref(request.dataset, "dataset"));
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kNotFound) throw;  // no version yet: the first import
  }
  // Before importing: a check that cannot run must not leave a version behind.
  if (previous) require_table(*previous);
  CheckedImport out;
  out.import = import_dataset(store, request, reporter);
  const DatasetVersion& now = out.import.version;
  if (!previous) {
    out.not_checked = now.ref() + " is the first version of " + request.dataset + "; nothing to check against";
  } else if (now.version == previous->version) {
    out.not_checked = now.ref() + " was already the latest version; nothing new to check";
  } else {
    reporter.note("checking " + now.ref() + " against " + previous->ref());
    out.checks = check_data(store, parse_dataset_ref(now.ref(), "dataset"),
                            parse_dataset_ref(previous->ref(), "dataset"), thresholds);
  }
  return out;
}

}  // namespace anneal
