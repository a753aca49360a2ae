#include "anneal/preprocess.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <set>

#include "anneal/error.h"

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

FeatureTransform FeatureTransform::fit(const Table& table, std::span<const std::uint32_t> rows) {
  FeatureTransform t;
  t.input_shape_ = table.sample_shape;
  const std::size_t row_width = static_cast<std::size_t>(table.sample_width());
  std::size_t offset = 0;
  for (std::size_t c = 0; c < table.columns.size(); ++c) {
    if (c == table.label_column) continue;
    const ColumnSchema& schema = table.columns[c];
    ColumnTransform ct;
    ct.column = schema.name;
    ct.width = schema.width();
    if (schema.type == ColumnType::kCategorical) {
      ct.one_hot = true;
      ct.categories = static_cast<std::int64_t>(schema.categories.size());
      ct.category_names = schema.categories;
    } else {
      // Two passes in row order: a deterministic mean and variance.
      double sum = 0;
      std::uint64_t count = 0;
      for (std::uint32_t r : rows) {
        const float* x = table.features.data() + r * row_width + offset;
        for (std::int64_t k = 0; k < ct.width; ++k)
          if (!std::isnan(x[k])) {
            sum += x[k];
            ++count;
          }
      }
      double mean = count ? sum / static_cast<double>(count) : 0.0;
      double m2 = 0;
      for (std::uint32_t r : rows) {
        const float* x = table.features.data() + r * row_width + offset;
        for (std::int64_t k = 0; k < ct.width; ++k)
          if (!std::isnan(x[k])) m2 += (x[k] - mean) * (x[k] - mean);
      }
      double sd = count ? std::sqrt(m2 / static_cast<double>(count)) : 0.0;
      ct.mean = mean;
      // A constant column carries no information; leave it centred at 0.
      ct.scale = sd > 1e-12 ? sd : 1.0;
    }
    offset += static_cast<std::size_t>(ct.width);
    t.columns_.push_back(std::move(ct));
  }
  if (offset != row_width)
    throw corrupt("dataset schema: feature columns are " + std::to_string(offset) +
                  " values wide but rows hold " + std::to_string(row_width));
  return t;
}

std::int64_t FeatureTransform::input_width() const {
  std::int64_t w = 0;
  for (const auto& c : columns_) w += c.width;
  return w;
}

std::int64_t FeatureTransform::output_width() const {
  std::int64_t w = 0;
  for (const auto& c : columns_) w += c.one_hot ? c.categories : c.width;
  return w;
}

std::vector<std::int64_t> FeatureTransform::output_shape() const {
  bool any_one_hot = std::any_of(columns_.begin(), columns_.end(), [](const auto& c) { return c.one_hot; });
  if (!any_one_hot) return input_shape_;
  return {output_width()};
}

std::vector<float> FeatureTransform::apply(std::span<const float> features, TransformCounts& counts) const {
  const std::size_t in_w = static_cast<std::size_t>(input_width());
  const std::size_t out_w = static_cast<std::size_t>(output_width());
  if (in_w == 0 || features.size() % in_w != 0)
    throw data_error("features: " + std::to_string(features.size()) +
                     " values is not a whole number of rows of " + std::to_string(in_w));
  const std::size_t rows = features.size() / in_w;
  std::vector<float> out(rows * out_w, 0.0f);
  for (std::size_t r = 0; r < rows; ++r) {
    const float* x = features.data() + r * in_w;
    float* y = out.data() + r * out_w;
    for (const auto& c : columns_) {
      if (c.one_hot) {
        float code = *x;
        if (std::isnan(code)) {
          ++counts.missing;
        } else if (code >= 0 && std::floor(code) == code && code < static_cast<float>(c.categories)) {
          y[static_cast<std::size_t>(code)] = 1.0f;
        } else {
          ++counts.unseen;
        }
        x += 1;
        y += c.categories;
      } else {
        const float mean = static_cast<float>(c.mean);
        const float inv = static_cast<float>(1.0 / c.scale);
        for (std::int64_t k = 0; k < c.width; ++k) {
          if (std::isnan(x[k])) {
            ++counts.missing;
            y[k] = 0.0f;
          } else {
            y[k] = (x[k] - mean) * inv;
          }
        }
        x += c.width;
        y += c.width;
      }
    }
  }
  return out;
}

json FeatureTransform::to_json() const {
  json cols = json::array();
  for (const auto& c : columns_) {
    json j = {{"column", c.column}, {"width", c.width}};
    if (c.one_hot) {
      j["one_hot"] = c.category_names;
    } else {
      j["mean"] = c.mean;
      j["scale"] = c.scale;
    }
    cols.push_back(std::move(j));
  }
  return {{"input_shape", input_shape_}, {"columns", cols}};
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
      } else {
        ct.mean = c.at("mean").get<double>();
        ct.scale = c.at("scale").get<double>();
      }
      t.columns_.push_back(std::move(ct));
    }
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

LabelEncoding LabelEncoding::fit(LossKind loss, const Table& train, const Table& test) {
  LabelEncoding e;
  const ColumnSchema& label = train.columns[train.label_column];
  e.column_ = label.name;
  e.classification_ = is_classification(loss);
  e.categorical_ = label.type == ColumnType::kCategorical;
  if (!e.classification_) {
    if (e.categorical_)
      throw usage_error("loss = " + std::string(loss_name(loss)) + ": label column '" + label.name +
                        "' is categorical; use softmax_ce or bce");
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
