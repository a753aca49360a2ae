// The feature transform's expansions for real exports (issue 14): datetime
// columns, identifier columns left out, frequent levels with an "other"
// slot; the per-class metrics and the class-weighted linear baseline. The
// expected values are worked out by hand (or by Python's datetime, as
// noted) rather than by the code under test.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "anneal/config.h"
#include "anneal/error.h"
#include "anneal/linear.h"
#include "anneal/model_metrics.h"
#include "anneal/preprocess.h"
#include "test_util.h"

namespace anneal {
namespace {

const float kNaN = std::nanf("");
constexpr double kTwoPi = 6.283185307179586;

using test::column;

std::vector<std::uint32_t> all_rows(std::size_t n) {
  std::vector<std::uint32_t> rows(n);
  for (std::uint32_t i = 0; i < n; ++i) rows[i] = i;
  return rows;
}

// One datetime column `when` and a label; `days` per row.
Table dates(std::vector<float> days, bool has_time) {
  Table t;
  ColumnSchema when = column("when", ColumnType::kDatetime);
  when.has_time = has_time;
  when.datetime_format = has_time ? "YYYY-MM-DD HH:MM" : "YYYY-MM-DD";
  t.columns = {when, column("label")};
  t.label_column = 1;
  t.sample_shape = {1};
  t.features = std::move(days);
  t.rows = t.features.size();
  t.labels.assign(t.rows, 0.0f);
  return t;
}

TEST(FeatureExpansion, DatetimeBecomesCalendarFeatures) {
  // 2023-01-02 06:00 (a Monday, day 2 of the year), 2024-03-15 18:00 (a
  // Friday, day 75 of a leap year), 2024-12-31 00:00 (a Tuesday, day 366):
  // days since 1970-01-01 by Python's datetime.
  Table t = dates({19359.25f, 19797.75f, 20088.0f}, true);
  FeatureTransform f = FeatureTransform::fit(t, all_rows(3));
  ASSERT_EQ(f.columns().size(), 1u);
  EXPECT_TRUE(f.columns()[0].datetime);
  EXPECT_EQ(f.output_width(), 10);
  EXPECT_EQ(f.output_shape(), (std::vector<std::int64_t>{10}));
  // Years 2023, 2024, 2024: mean 2023 2/3, population sd sqrt(2)/3.
  EXPECT_DOUBLE_EQ(f.columns()[0].year_mean, (2023.0 + 2024 + 2024) / 3);
  EXPECT_NEAR(f.columns()[0].year_scale, std::sqrt(2.0) / 3, 1e-12);
  const double elapsed_mean = (19359.25 + 19797.75 + 20088.0) / 3;
  EXPECT_NEAR(f.columns()[0].mean, elapsed_mean, 1e-9);

  TransformCounts counts;
  std::vector<float> out = f.apply(t.features, counts);
  ASSERT_EQ(out.size(), 30u);
  EXPECT_EQ(counts.missing, 0u);
  const double sd = f.columns()[0].scale;
  auto angle = [](double x, double period) { return kTwoPi * x / period; };
  // row: year, month sin/cos, weekday sin/cos, day of year sin/cos, time of day sin/cos, elapsed
  const std::vector<std::vector<double>> want = {
      {-std::sqrt(2.0), std::sin(0.0), std::cos(0.0), std::sin(0.0), std::cos(0.0), std::sin(angle(1, 365)),
       std::cos(angle(1, 365)), std::sin(angle(6, 24)), std::cos(angle(6, 24)), (19359.25 - elapsed_mean) / sd},
      {1 / std::sqrt(2.0), std::sin(angle(2, 12)), std::cos(angle(2, 12)), std::sin(angle(4, 7)),
       std::cos(angle(4, 7)), std::sin(angle(74, 366)), std::cos(angle(74, 366)), std::sin(angle(18, 24)),
       std::cos(angle(18, 24)), (19797.75 - elapsed_mean) / sd},
      {1 / std::sqrt(2.0), std::sin(angle(11, 12)), std::cos(angle(11, 12)), std::sin(angle(1, 7)),
       std::cos(angle(1, 7)), std::sin(angle(365, 366)), std::cos(angle(365, 366)), 0.0, 1.0,
       (20088.0 - elapsed_mean) / sd}};
  for (std::size_t r = 0; r < 3; ++r)
    for (std::size_t k = 0; k < 10; ++k) EXPECT_NEAR(out[r * 10 + k], want[r][k], 2e-6) << "row " << r << " output " << k;
  // Spot checks against Python's own numbers.
  EXPECT_NEAR(out[10 + 3], -0.4338837, 1e-6);
  EXPECT_NEAR(out[9], -1.298867, 1e-5);

  // Missing: all zeros, counted once per cell.
  TransformCounts missing;
  std::vector<float> blank = f.apply(std::vector<float>{kNaN}, missing);
  EXPECT_EQ(blank, std::vector<float>(10, 0.0f));
  EXPECT_EQ(missing.missing, 1u);

  // The header round trip gives the same numbers.
  FeatureTransform back = FeatureTransform::from_json(f.to_json());
  TransformCounts again;
  EXPECT_EQ(back.apply(t.features, again), out);
}

TEST(FeatureExpansion, DatesWithoutTimeHaveNoTimeOfDay) {
  // 1970-01-01 (a Thursday) and 1969-12-31 (a Wednesday, before the epoch).
  Table t = dates({0.0f, -1.0f}, false);
  FeatureTransform f = FeatureTransform::fit(t, all_rows(2));
  EXPECT_EQ(f.output_width(), 8);
  TransformCounts counts;
  std::vector<float> out = f.apply(t.features, counts);
  // 1970 vs 1969: years standardize to +1 and -1; weekday Thursday = 3.
  EXPECT_FLOAT_EQ(out[0], 1.0f);
  EXPECT_FLOAT_EQ(out[8], -1.0f);
  EXPECT_NEAR(out[3], std::sin(kTwoPi * 3 / 7), 1e-6);
  EXPECT_NEAR(out[8 + 3], std::sin(kTwoPi * 2 / 7), 1e-6);
  EXPECT_NEAR(out[8 + 1], std::sin(kTwoPi * 11 / 12), 1e-6);   // December
  EXPECT_NEAR(out[8 + 5], std::sin(kTwoPi * 364 / 365), 1e-6); // day 365 of 1969
  EXPECT_FLOAT_EQ(out[7], 1.0f);                              // elapsed: 0 vs -1 days
  EXPECT_FLOAT_EQ(out[15], -1.0f);
}

// id (unique per row), shop (3 levels), amount (numeric), label; `rows` rows.
Table orders(std::size_t rows) {
  Table t;
  ColumnSchema id = column("order_id", ColumnType::kCategorical);
  ColumnSchema shop = column("shop", ColumnType::kCategorical);
  shop.categories = {"a", "b", "c"};
  t.columns = {id, shop, column("amount"), column("label")};
  t.label_column = 3;
  t.sample_shape = {3};
  for (std::size_t r = 0; r < rows; ++r) {
    t.columns[0].categories.push_back("SO-" + std::to_string(r));
    t.features.insert(t.features.end(), {static_cast<float>(r), static_cast<float>(r % 3), static_cast<float>(r)});
    t.labels.push_back(static_cast<float>(r % 2));
  }
  t.rows = rows;
  return t;
}

TEST(FeatureExpansion, IdentifierColumnsAreLeftOutUnlessChosen) {
  Table t = orders(20);
  FeatureTransform f = FeatureTransform::fit(t, all_rows(20));
  ASSERT_EQ(f.excluded().size(), 1u);
  EXPECT_EQ(f.excluded()[0].column, "order_id");
  EXPECT_TRUE(f.excluded()[0].identifier);
  EXPECT_EQ(f.excluded()[0].reason, "20 distinct values in 20 training rows, an identifier");
  ASSERT_EQ(f.columns().size(), 2u);
  EXPECT_EQ(f.columns()[0].column, "shop");
  EXPECT_EQ(f.input_width(), 2);
  EXPECT_EQ(f.to_json().at("excluded").at(0).at("column"), "order_id");
  // The transform's input is the columns it uses: shop and amount of row 4.
  std::vector<std::uint32_t> row4 = {4};
  EXPECT_EQ(f.gather(t, row4), (std::vector<float>{1, 4}));

  // Fewer than kIdentifierMinRows rows: too few to tell; kept.
  Table small = orders(19);
  EXPECT_TRUE(FeatureTransform::fit(small, all_rows(19)).excluded().empty());

  // 18 distinct values in 20 rows is 0.9 x rows: still an identifier; 17 is not.
  Table repeats = orders(20);
  for (std::size_t r = 18; r < 20; ++r) repeats.features[r * 3] = 0;
  EXPECT_EQ(FeatureTransform::fit(repeats, all_rows(20)).excluded().size(), 1u);
  repeats.features[17 * 3] = 0;
  EXPECT_TRUE(FeatureTransform::fit(repeats, all_rows(20)).excluded().empty());

  // features= names it: used even though it looks like an id.
  FeatureOptions chosen;
  chosen.features = std::vector<std::string>{"order_id", "amount"};
  FeatureTransform c = FeatureTransform::fit(t, all_rows(20), chosen);
  ASSERT_EQ(c.columns().size(), 2u);
  EXPECT_EQ(c.columns()[0].column, "order_id");
  EXPECT_EQ(c.columns()[1].column, "amount");
  ASSERT_EQ(c.excluded().size(), 1u);
  EXPECT_EQ(c.excluded()[0].reason, "not in features=");
  EXPECT_FALSE(c.excluded()[0].identifier);

  // exclude= leaves a column out by name.
  FeatureOptions without;
  without.exclude = {"amount"};
  FeatureTransform w = FeatureTransform::fit(t, all_rows(20), without);
  ASSERT_EQ(w.columns().size(), 1u);
  EXPECT_EQ(w.columns()[0].column, "shop");
  EXPECT_EQ(w.excluded().size(), 2u);
}

TEST(FeatureExpansion, UnknownFeatureColumnsAreNamedWithASuggestion) {
  Table t = orders(20);
  EXPECT_EQ(check_feature_columns(t, {"shop", "amount"}), std::nullopt);
  EXPECT_EQ(check_feature_columns(t, {"ordr_id"}).value(), "no column 'ordr_id'; did you mean 'order_id'?");
  EXPECT_EQ(check_feature_columns(t, {"label"}).value(), "'label' is the label column, not a feature");
  EXPECT_EQ(check_feature_columns(t, {"zzzzzzzz"}).value(), "no column 'zzzzzzzz'");
  FeatureOptions bad;
  bad.exclude = {"ordr_id"};
  try {
    FeatureTransform::fit(t, all_rows(20), bad);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_EQ(std::string(e.what()), "exclude: no column 'ordr_id'; did you mean 'order_id'?");
  }
  FeatureOptions nothing;
  nothing.exclude = {"shop", "amount"};  // and order_id is an identifier
  try {
    FeatureTransform::fit(t, all_rows(20), nothing);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("no feature column is left"), std::string::npos) << e.what();
  }
}

// One categorical column with levels a..e of 10, 6, 3, 1 and 0 training rows.
Table levels() {
  Table t;
  ColumnSchema product = column("product", ColumnType::kCategorical);
  product.categories = {"a", "b", "c", "d", "e"};
  t.columns = {product, column("label")};
  t.label_column = 1;
  t.sample_shape = {1};
  const int counts[] = {10, 6, 3, 1};
  for (int code = 0; code < 4; ++code)
    for (int n = 0; n < counts[code]; ++n) t.features.push_back(static_cast<float>(code));
  t.rows = t.features.size();
  t.labels.assign(t.rows, 0.0f);
  return t;
}

TEST(FeatureExpansion, RareLevelsShareTheOtherSlot) {
  Table t = levels();
  FeatureTransform f = FeatureTransform::fit(t, all_rows(t.rows));  // category_min_count 5
  const ColumnTransform& c = f.columns()[0];
  EXPECT_TRUE(c.other);
  EXPECT_EQ(c.categories, 3);  // a, b, other
  EXPECT_EQ(c.slots, (std::vector<std::int64_t>{0, 1, 2, 2, -1}));
  TransformCounts counts;
  // a, c (rare), e (no training row), 9 (outside the dictionary), missing
  std::vector<float> out = f.apply(std::vector<float>{0, 2, 4, 9, kNaN}, counts);
  EXPECT_EQ(out, (std::vector<float>{1, 0, 0, /**/ 0, 0, 1, /**/ 0, 0, 1, /**/ 0, 0, 1, /**/ 0, 0, 0}));
  EXPECT_EQ(counts.unseen, 2u);  // e and 9: no training row had them
  EXPECT_EQ(counts.missing, 1u);

  // At most one level: the most frequent; ties go to the lower code.
  FeatureOptions one;
  one.max_categories = 1;
  one.category_min_count = 1;
  EXPECT_EQ(FeatureTransform::fit(t, all_rows(t.rows), one).columns()[0].slots,
            (std::vector<std::int64_t>{0, 1, 1, 1, -1}));
  // A tie (three rows each) goes to the lower code.
  Table tie = levels();
  tie.features = {1, 1, 1, 0, 0, 0};
  tie.rows = 6;
  tie.labels.assign(6, 0.0f);
  EXPECT_EQ(FeatureTransform::fit(tie, all_rows(tie.rows), one).columns()[0].slots,
            (std::vector<std::int64_t>{0, 1, -1, -1, -1}));

  // Every level frequent and seen: the old identity layout, no slots written.
  FeatureOptions every;
  every.category_min_count = 1;
  Table seen = levels();
  seen.columns[0].categories.pop_back();  // drop e, which no row has
  FeatureTransform plain = FeatureTransform::fit(seen, all_rows(seen.rows), every);
  EXPECT_TRUE(plain.columns()[0].slots.empty());
  EXPECT_FALSE(plain.to_json().at("columns").at(0).contains("slots"));

  // The header round trip keeps slots and the other slot.
  FeatureTransform back = FeatureTransform::from_json(f.to_json());
  TransformCounts again;
  EXPECT_EQ(back.apply(std::vector<float>{0, 2, 4, 9, kNaN}, again), out);
  EXPECT_EQ(back.output_width(), 3);
}

TEST(FeatureExpansion, OldHeadersReadAsBefore) {
  // A header written before issue 14: one-hot over the whole dictionary.
  const auto old = nlohmann::json::parse(
      R"({"input_shape":[2],"columns":[{"column":"x","width":1,"mean":1.0,"scale":2.0},)"
      R"({"column":"c","width":1,"one_hot":["u","v"]}]})");
  FeatureTransform f = FeatureTransform::from_json(old);
  EXPECT_EQ(f.output_width(), 3);
  EXPECT_TRUE(f.excluded().empty());
  TransformCounts counts;
  EXPECT_EQ(f.apply(std::vector<float>{3, 1, 1, 5}, counts), (std::vector<float>{1, 0, 1, 0, 0, 0}));
  EXPECT_EQ(counts.unseen, 1u);
  EXPECT_EQ(f.to_json(), old);
  // Slots that do not fit the dictionary are a damaged header.
  auto bad = old;
  bad["columns"][1]["slots"] = {0};
  bad["columns"][1]["other"] = false;
  EXPECT_THROW(FeatureTransform::from_json(bad), Error);
}

// docs/STORE.md "Feature transform": the worked example's header and row.
TEST(FeatureExpansion, StoreDocumentWorkedExample) {
  const auto header = nlohmann::json::parse(R"({"input_shape": [3],
 "columns": [{"column": "x", "width": 1, "mean": 1.5, "scale": 0.5},
             {"column": "color", "width": 1, "one_hot": ["red", "blue", "green"],
              "slots": [0, 1, -1], "other": true},
             {"column": "when", "width": 1,
              "datetime": {"hour": true, "year_mean": 2024, "year_scale": 0.5,
                           "elapsed_mean": 19800, "elapsed_scale": 200}}],
 "excluded": [{"column": "order_id", "reason": "3200 distinct values in 3200 training rows, an identifier",
               "identifier": true}]})");
  FeatureTransform f = FeatureTransform::from_json(header);
  EXPECT_EQ(f.input_width(), 3);
  EXPECT_EQ(f.output_width(), 13);
  ASSERT_EQ(f.excluded().size(), 1u);
  EXPECT_TRUE(f.excluded()[0].identifier);
  TransformCounts counts;
  std::vector<float> out = f.apply(std::vector<float>{2.0f, 2.0f, 19797.75f}, counts);
  const std::vector<float> want = {1, 0, 1, 0, 0.8660254f, 0.5f, -0.4338837f, -0.9009689f, 0.9552107f, 0.2959267f,
                                   -1, 0, -0.01125f};
  ASSERT_EQ(out.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-6) << i;
  EXPECT_EQ(counts.unseen, 1u);
  EXPECT_EQ(f.to_json(), header);  // what the code writes back is the document's header
}

TEST(PerClassMetrics, ImbalancedDataIsNotScoredByAccuracyAlone) {
  // 19 rows of class 0, 1 of class 1; the model always answers class 0.
  std::vector<float> probs, labels;
  for (int i = 0; i < 20; ++i) {
    probs.insert(probs.end(), {0.9f, 0.1f});
    labels.push_back(i == 0 ? 1.0f : 0.0f);
  }
  ClassificationMetrics m = classification_metrics(probs, labels, 2);
  EXPECT_DOUBLE_EQ(m.accuracy, 0.95);
  EXPECT_DOUBLE_EQ(m.balanced_accuracy, 0.5);  // (19/19 + 0/1) / 2
  EXPECT_EQ(m.support, (std::vector<std::uint64_t>{19, 1}));
  EXPECT_DOUBLE_EQ(m.recall[1], 0.0);
  EXPECT_DOUBLE_EQ(m.precision[0], 0.95);
  nlohmann::json j = m.per_class_json({"no", "yes"});
  EXPECT_EQ(j.at("yes").at("support"), 1);
  EXPECT_DOUBLE_EQ(j.at("no").at("recall").get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(m.to_json().at("balanced_accuracy").get<double>(), 0.5);
  EXPECT_THROW(m.per_class_json({"no"}), Error);

  // Three classes, one absent from the labels: balanced accuracy averages
  // the classes that have rows.
  std::vector<float> p3 = {1, 0, 0, /**/ 0, 1, 0, /**/ 0, 0, 1, /**/ 1, 0, 0};
  std::vector<float> y3 = {0, 1, 1, 0};
  ClassificationMetrics m3 = classification_metrics(p3, y3, 3);
  EXPECT_DOUBLE_EQ(m3.balanced_accuracy, (1.0 + 0.5) / 2);
  EXPECT_EQ(m3.support[2], 0u);
}

TEST(ClassWeightedBaseline, WeightTwoIsTheSameAsEachRowTwice) {
  // Logistic regression with class 1 weighted 2 equals the fit on the data
  // with every class-1 row duplicated.
  std::vector<float> x = {0.1f, -1.0f, 0.4f, 0.3f, -0.2f, 1.2f, 0.9f, -0.7f, 0.5f, 0.0f};
  std::vector<float> y = {0, 0, 1, 0, 0, 1, 1, 0, 0, 1};
  std::vector<float> xd = x, yd = y;
  for (std::size_t i = 0; i < y.size(); ++i)
    if (y[i] == 1) {
      xd.push_back(x[i]);
      yd.push_back(1);
    }
  const std::vector<float> weights = {1.0f, 2.0f};
  LinearModel weighted = fit_logistic(x, y, 1, 2, 0.5, weights);
  LinearModel duplicated = fit_logistic(xd, yd, 1, 2, 0.5);
  LinearModel plain = fit_logistic(x, y, 1, 2, 0.5);
  ASSERT_EQ(weighted.weights.size(), duplicated.weights.size());
  for (std::size_t i = 0; i < weighted.weights.size(); ++i)
    EXPECT_NEAR(weighted.weights[i], duplicated.weights[i], 1e-9) << i;
  EXPECT_GT(std::abs(weighted.weights[1] - plain.weights[1]), 0.05);  // the intercept moves toward class 1
  const std::vector<float> wrong = {1.0f};
  EXPECT_THROW(fit_logistic(x, y, 1, 2, 0.5, wrong), Error);
}

TEST(ClassWeightConfig, ParsesBalancedAndExplicitWeights) {
  EXPECT_TRUE(parse_class_weight("balanced").balanced);
  ClassWeightSpec s = parse_class_weight("yes:5, no:1");
  ASSERT_EQ(s.weights.size(), 2u);
  EXPECT_EQ(s.weights[0], (std::pair<std::string, double>{"yes", 5.0}));
  EXPECT_EQ(s.weights[1], (std::pair<std::string, double>{"no", 1.0}));
  EXPECT_EQ(parse_class_weight("a:b:2").weights[0].first, "a:b");  // the last colon splits
  for (const char* bad : {"yes", "yes:0", "yes:-1", "yes:x", "yes:inf", ":2", "yes:1,,no:2", "yes:1,yes:2"})
    EXPECT_THROW(parse_class_weight(bad), Error) << bad;
}

TEST(FeatureConfig, FeaturesExcludeAndLevelsKeysRoundTrip) {
  const char* text = "name = m\ndataset = d\nlayers = dense(2)\nfeatures = a, b\nexclude = c\n"
                     "category_min_count = 3\nmax_categories = 7\nclass_weight = balanced\n";
  TrainConfig c = parse_train_config(text, "m.ini", {});
  EXPECT_EQ(c.features, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(c.exclude, (std::vector<std::string>{"c"}));
  EXPECT_EQ(c.category_min_count, 3);
  EXPECT_EQ(c.max_categories, 7);
  EXPECT_TRUE(c.class_weight.balanced);
  EXPECT_TRUE(c.class_weight.weights.empty());
  TrainConfig back = parse_train_config(c.to_text(), "frozen", {});
  EXPECT_EQ(back.to_text(), c.to_text());
  EXPECT_EQ(back.features, c.features);
  TrainConfig defaults = parse_train_config("name = m\ndataset = d\nlayers = dense(2)\n", "m.ini", {});
  EXPECT_FALSE(defaults.features.has_value());
  EXPECT_EQ(defaults.category_min_count, 5);
  EXPECT_EQ(defaults.max_categories, 50);
  auto error = [](const std::string& line, const std::vector<std::string>& sets = {}) {
    try {
      parse_train_config("name = m\ndataset = d\nlayers = dense(2)\n" + line, "m.ini", sets, {.overrides = "--set"});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error("features = a,,b\n"), "m.ini:4: features = 'a,,b': expected column names separated by commas");
  EXPECT_EQ(error("exclude = a, a\n"), "m.ini:4: exclude = 'a, a': expected each column once; 'a' is named twice");
  EXPECT_EQ(error("", {"class_weight=yes:0"}),
            "--set class_weight: class_weight: 'yes:0': the weight of class 'yes' is '0', expected a number > 0");
  EXPECT_EQ(error("max_categories = 0\n"), "m.ini:4: max_categories = '0': expected an integer in 1..1000000");
}

}  // namespace
}  // namespace anneal
