// Robust scaling of numeric columns and the log target (issue 31): the
// median, the quartile range (half the range, 1 for a constant column), the
// smooth clip z / sqrt(1 + (z/3)^2), log1p(y - shift) standardized and its
// expm1, the auto rules, missing values, the stored forms and hostile stored
// values, and the config keys. Expected values are worked out
// by hand from the definitions in docs/STORE.md, not by the code under test.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "anneal/config.h"
#include "anneal/error.h"
#include "anneal/preprocess.h"
#include "test_util.h"

namespace anneal {
namespace {

const float kNaN = std::nanf("");
using test::column;

std::vector<std::uint32_t> all_rows(std::size_t n) {
  std::vector<std::uint32_t> rows(n);
  for (std::uint32_t i = 0; i < n; ++i) rows[i] = i;
  return rows;
}

// Numeric feature columns given column by column, and a label.
Table numbers(const std::vector<std::vector<float>>& columns) {
  Table t;
  for (std::size_t c = 0; c < columns.size(); ++c) {
    // Appended, not "x" + to_string(c): GCC 12 warns on that (-Wrestrict, a
    // false positive).
    std::string name = "x";
    name += std::to_string(c);
    t.columns.push_back(column(name));
  }
  t.columns.push_back(column("label"));
  t.label_column = columns.size();
  t.rows = columns[0].size();
  t.sample_shape = {static_cast<std::int64_t>(columns.size())};
  for (std::size_t r = 0; r < t.rows; ++r)
    for (const auto& c : columns) t.features.push_back(c[r]);
  t.labels.assign(t.rows, 0.0f);
  return t;
}

FeatureTransform fit(const Table& t, Scaling scaling) {
  FeatureOptions options;
  options.scaling = scaling;
  return FeatureTransform::fit(t, all_rows(t.rows), options);
}

// The smooth clip of z, by its definition (in double; the transform's
// float arithmetic is within a float's rounding of it).
double clip(double z) { return z / std::sqrt(1 + (z / 3) * (z / 3)); }

TEST(PreprocessRobustScaling, MedianQuartileRangeAndSmoothClip) {
  // 1 2 3 4 100: median 3, quartiles 2 and 4 (numpy's linear rule), IQR 2.
  const Table t = numbers({{1, 2, 3, 4, 100}});
  const FeatureTransform f = fit(t, Scaling::kRobust);
  ASSERT_EQ(f.columns().size(), 1u);
  EXPECT_TRUE(f.columns()[0].robust);
  EXPECT_DOUBLE_EQ(f.columns()[0].mean, 3);
  EXPECT_DOUBLE_EQ(f.columns()[0].scale, 2);
  TransformCounts counts;
  const std::vector<float> y = f.apply(f.gather(t), counts);
  ASSERT_EQ(y.size(), 5u);
  EXPECT_NEAR(y[0], clip(-1), 1e-6);   // -0.9486833
  EXPECT_NEAR(y[1], clip(-0.5), 1e-6);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_NEAR(y[3], clip(0.5), 1e-6);
  EXPECT_NEAR(y[4], clip(48.5), 1e-6);  // the outlier stays below 3
  EXPECT_LT(y[4], 3.0f);
  EXPECT_EQ(counts.missing, 0u);
}

TEST(PreprocessRobustScaling, DefaultIsStandardization) {
  const Table t = numbers({{1, 2, 3, 4, 100}});
  const FeatureTransform f = FeatureTransform::fit(t, all_rows(5));
  EXPECT_FALSE(f.columns()[0].robust);
  EXPECT_DOUBLE_EQ(f.columns()[0].mean, 22);
  // A plain model's stored form has no robust object.
  EXPECT_FALSE(f.to_json()["columns"][0].contains("robust"));
  EXPECT_TRUE(f.to_json()["columns"][0].contains("mean"));
}

TEST(PreprocessRobustScaling, AutoRuleChoosesSkewedColumns) {
  // x0 skewed (5% of rows far out: skewness 4.0), x1 symmetric, x2 a long right
  // tail (skewness 1.8), x3 two far outliers in 200 rows, one each side
  // (1%: not more than the outlier rule's 1%; skewness -0.28).
  std::vector<float> skewed, symmetric, tail, twin;
  for (int i = 0; i < 200; ++i) {
    skewed.push_back(i < 190 ? static_cast<float>(i % 10) : 100.0f);
    symmetric.push_back(static_cast<float>(i % 20));
    tail.push_back(std::exp(static_cast<float>(i % 50) / 8.0f));
    twin.push_back(i == 0 ? -1000.0f : i == 1 ? 1000.0f : static_cast<float>(i % 20));
  }
  const Table t = numbers({skewed, symmetric, tail, twin});
  const FeatureTransform f = fit(t, Scaling::kAuto);
  ASSERT_EQ(f.columns().size(), 4u);
  EXPECT_TRUE(f.columns()[0].robust);
  EXPECT_FALSE(f.columns()[1].robust);
  EXPECT_TRUE(f.columns()[2].robust);
  EXPECT_FALSE(f.columns()[3].robust);  // 1% of 200 is 2 rows: exactly 2 outliers is not more
  // The rule itself: skewness and outliers.
  const std::vector<double> flat = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_FALSE(robust_scaling_wanted(flat));
  std::vector<double> far(100, 0.0);
  for (int i = 0; i < 100; ++i) far[static_cast<std::size_t>(i)] = i % 2 ? 1.0 : -1.0;
  far[0] = 50;
  far[1] = -50;  // symmetric, so no skew, but 2% of rows beyond 3 IQR
  EXPECT_TRUE(robust_scaling_wanted(far));
  EXPECT_FALSE(robust_scaling_wanted(std::vector<double>{5, 5, 5}));  // constant
  EXPECT_FALSE(robust_scaling_wanted(std::vector<double>{}));
}

TEST(PreprocessRobustScaling, ConstantAndTiedColumns) {
  // Constant: spread 1, every row 0. Tied quartiles (0 0 0 0 1): half the
  // range, 0.5, so the 1 becomes z = 2.
  const Table t = numbers({{7, 7, 7, 7, 7}, {0, 0, 0, 0, 1}});
  const FeatureTransform f = fit(t, Scaling::kRobust);
  EXPECT_DOUBLE_EQ(f.columns()[0].scale, 1);
  EXPECT_DOUBLE_EQ(f.columns()[1].mean, 0);
  EXPECT_DOUBLE_EQ(f.columns()[1].scale, 0.5);
  TransformCounts counts;
  const std::vector<float> y = f.apply(f.gather(t), counts);
  for (std::size_t r = 0; r < 5; ++r) EXPECT_EQ(y[r * 2], 0.0f);
  EXPECT_NEAR(y[4 * 2 + 1], clip(2), 1e-6);
}

TEST(PreprocessRobustScaling, MissingValuesAreLeftOutAndImputedAtTheMedian) {
  // NaN takes no part in the quantiles (1 3 5: median 3, IQR 2) and becomes
  // 0, the median, counted as missing; an all-missing column is centred at 0.
  const Table t = numbers({{1, kNaN, 3, 5}, {kNaN, kNaN, kNaN, kNaN}});
  const FeatureTransform f = fit(t, Scaling::kRobust);
  EXPECT_DOUBLE_EQ(f.columns()[0].mean, 3);
  EXPECT_DOUBLE_EQ(f.columns()[0].scale, 2);
  EXPECT_DOUBLE_EQ(f.columns()[1].mean, 0);
  EXPECT_DOUBLE_EQ(f.columns()[1].scale, 1);
  TransformCounts counts;
  const std::vector<float> y = f.apply(f.gather(t), counts);
  EXPECT_EQ(y[1 * 2], 0.0f);
  EXPECT_EQ(counts.missing, 5u);
  EXPECT_NEAR(y[3 * 2], clip(1), 1e-6);
  for (std::size_t r = 0; r < 4; ++r) EXPECT_EQ(y[r * 2 + 1], 0.0f);
}

TEST(PreprocessRobustScaling, StoredFormRoundTrips) {
  const Table t = numbers({{1, 2, 3, 4, 100}, {1, 2, 3, 4, 5}});
  const FeatureTransform f = fit(t, Scaling::kAuto);
  const nlohmann::json j = f.to_json();
  EXPECT_EQ(j["columns"][0]["robust"]["median"], 3.0);
  EXPECT_EQ(j["columns"][0]["robust"]["spread"], 2.0);
  EXPECT_FALSE(j["columns"][0].contains("mean"));  // an older reader rejects it rather than skip the clip
  EXPECT_FALSE(j["columns"][1].contains("robust"));
  const FeatureTransform back = FeatureTransform::from_json(j);
  TransformCounts a, b;
  EXPECT_EQ(back.apply(back.gather(t), a), f.apply(f.gather(t), b));
  EXPECT_EQ(back.to_json(), j);
}

TEST(PreprocessRobustScaling, HostileStoredValuesAreCorrupt) {
  const Table t = numbers({{1, 2, 3, 4, 100}});
  const nlohmann::json good = fit(t, Scaling::kRobust).to_json();
  auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = good;
    edit(j["columns"][0]);
    return j;
  };
  const std::vector<nlohmann::json> hostile = {
      with([](auto& c) { c["robust"]["spread"] = 0.0; }),
      with([](auto& c) { c["robust"]["spread"] = -2.0; }),
      with([](auto& c) { c["robust"]["spread"] = 1e-320; }),  // 1/spread is infinite
      with([](auto& c) { c["robust"]["spread"] = "2"; }),
      with([](auto& c) { c["robust"]["spread"] = nullptr; }),
      with([](auto& c) { c["robust"]["median"] = std::numeric_limits<double>::infinity(); }),  // infinite
      with([](auto& c) { c["robust"].erase("median"); }),
      with([](auto& c) { c["robust"] = 3; }),
      with([](auto& c) { c["width"] = 2; }),
  };
  for (const auto& j : hostile) {
    try {
      FeatureTransform::from_json(j);
      ADD_FAILURE() << "accepted " << j.dump();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kCorrupt) << j.dump() << ": " << e.what();
    }
  }
}

TEST(PreprocessRobustScaling, ImagesAndCategoriesKeepTheirTransforms) {
  // Robust scaling is for one-value numeric columns: a categorical column
  // stays one-hot under scaling = robust.
  Table t = numbers({{1, 2, 3, 4, 100}, {0, 1, 0, 1, 0}});
  t.columns[1].type = ColumnType::kCategorical;
  t.columns[1].categories = {"a", "b"};
  FeatureOptions options;
  options.scaling = Scaling::kRobust;
  options.category_min_count = 1;
  const FeatureTransform f = FeatureTransform::fit(t, all_rows(5), options);
  EXPECT_TRUE(f.columns()[0].robust);
  EXPECT_TRUE(f.columns()[1].one_hot);
  EXPECT_FALSE(f.columns()[1].robust);
}

TEST(PreprocessRobustScaling, ConfigKey) {
  EXPECT_EQ(parse_train_config("name = x\ndataset = d\nlayers = dense(2)\n", "cfg.ini", {}).scaling,
            Scaling::kStandard);
  EXPECT_EQ(parse_train_config("name = x\ndataset = d\n", "cfg.ini", {}).scaling, Scaling::kStandard);  // layers = auto too
  EXPECT_EQ(parse_train_config("name = x\ndataset = d\nscaling = auto\n", "cfg.ini", {}).scaling, Scaling::kAuto);
  EXPECT_EQ(parse_train_config("name = x\ndataset = d\nscaling = standard\n", "cfg.ini", {}).scaling,
            Scaling::kStandard);
  const TrainConfig robust = parse_train_config("name = x\ndataset = d\nlayers = linear\nscaling = robust\n", "cfg.ini", {});
  EXPECT_EQ(robust.scaling, Scaling::kRobust);
  EXPECT_NE(robust.to_text().find("scaling = robust"), std::string::npos);
  try {
    parse_train_config("name = x\ndataset = d\nscaling = log\n", "cfg.ini", {});
    ADD_FAILURE() << "scaling = log accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("standard, robust or auto"), std::string::npos) << e.what();
  }
}

// ------------------------------------------------------------ log target

// A regression table of targets `y` (one numeric feature, all 0).
Table targets(std::vector<float> y) {
  Table t = numbers({std::vector<float>(y.size(), 0.0f)});
  t.labels = std::move(y);
  return t;
}

TEST(PreprocessLogTarget, EncodesLog1pStandardizedAndDecodes) {
  // 0 1 3 7: log1p gives k·ln2 for k = 0..3, mean 1.5 ln2, population sd
  // ln2·sqrt(1.25); 3 encodes to (2 - 1.5) / sqrt(1.25).
  const Table t = targets({0, 1, 3, 7});
  const LabelEncoding e = LabelEncoding::fit(LossKind::kMeanSquaredError, t, t, TargetTransform::kLog);
  ASSERT_TRUE(e.log_target());
  EXPECT_DOUBLE_EQ(e.log_shift(), 0);
  EXPECT_NEAR(e.target_mean(), 1.5 * std::log(2.0), 1e-12);
  EXPECT_NEAR(e.target_scale(), std::log(2.0) * std::sqrt(1.25), 1e-12);
  EXPECT_NEAR(e.encode(3, "t"), 0.5 / std::sqrt(1.25), 1e-6);
  for (float y : {0.0f, 1.0f, 3.0f, 7.0f, 100.0f}) EXPECT_NEAR(e.decode_value(e.encode(y, "t")), y, 1e-5 * (1 + y));
  // decode: expm1(output · scale + mean) + shift.
  EXPECT_NEAR(e.decode_value(0), std::expm1(1.5 * std::log(2.0)), 1e-12);
  // The default is the standardized target, as before.
  const LabelEncoding plain = LabelEncoding::fit(LossKind::kMeanSquaredError, t, t);
  EXPECT_FALSE(plain.log_target());
  EXPECT_DOUBLE_EQ(plain.decode_value(0), 2.75);
}

TEST(PreprocessLogTarget, ShiftConstantMissingAndOutOfRange) {
  // A negative target shifts to 0: shift = -2.
  const Table t = targets({-2, 0, 5});
  const LabelEncoding e = LabelEncoding::fit(LossKind::kMeanSquaredError, t, t, TargetTransform::kLog);
  EXPECT_DOUBLE_EQ(e.log_shift(), -2);
  EXPECT_NEAR(e.decode_value(e.encode(-2, "t")), -2, 1e-5);
  EXPECT_NEAR(e.decode_value(e.encode(-2.5f, "t")), -2.5, 1e-5);  // below the shift, above shift - 1
  EXPECT_TRUE(std::isnan(e.encode(kNaN, "t")));                    // missing passes, as standard
  try {
    e.encode(-3, "test row 4");  // log1p(-1) has no value
    ADD_FAILURE() << "encoded -3";
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::kBadData);
    EXPECT_NE(std::string(err.what()).find("test row 4"), std::string::npos) << err.what();
  }
  // A constant target: scale 1, every row 0.
  const Table c = targets({4, 4, 4});
  const LabelEncoding k = LabelEncoding::fit(LossKind::kMeanSquaredError, c, c, TargetTransform::kLog);
  EXPECT_DOUBLE_EQ(k.target_scale(), 1);
  EXPECT_EQ(k.encode(4, "t"), 0.0f);
  EXPECT_NEAR(k.decode_value(0), 4, 1e-12);
}

TEST(PreprocessLogTarget, AutoRule) {
  std::vector<float> tail, symmetric, negative;
  for (int i = 0; i < 100; ++i) {
    tail.push_back(std::exp(static_cast<float>(i % 25) / 5.0f));  // skewness well above 0.75
    symmetric.push_back(static_cast<float>(i % 10));
    negative.push_back(i == 0 ? -1.0f : tail.back());
  }
  EXPECT_TRUE(log_target_wanted(tail));
  EXPECT_FALSE(log_target_wanted(symmetric));
  EXPECT_FALSE(log_target_wanted(negative));  // a negative target never takes the auto log
  EXPECT_FALSE(log_target_wanted(std::vector<float>{3, 3, 3}));
  const Table t = targets(tail), s = targets(symmetric);
  EXPECT_TRUE(LabelEncoding::fit(LossKind::kMeanSquaredError, t, t, TargetTransform::kAuto).log_target());
  EXPECT_FALSE(LabelEncoding::fit(LossKind::kMeanSquaredError, s, s, TargetTransform::kAuto).log_target());
  // Classification has no target transform.
  const LabelEncoding classes = LabelEncoding::fit(LossKind::kSoftmaxCrossEntropy, s, s, TargetTransform::kLog);
  EXPECT_TRUE(classes.classification());
  EXPECT_FALSE(classes.log_target());
}

TEST(PreprocessLogTarget, StoredFormAndHostileValues) {
  const Table t = targets({0, 1, 3, 7});
  const LabelEncoding e = LabelEncoding::fit(LossKind::kMeanSquaredError, t, t, TargetTransform::kLog);
  const nlohmann::json j = e.to_json();
  EXPECT_FALSE(j.contains("mean"));  // an older reader rejects it rather than skip the expm1
  EXPECT_EQ(LabelEncoding::from_json(j).to_json(), j);
  EXPECT_EQ(LabelEncoding::from_json(j).decode_value(0.25), e.decode_value(0.25));
  const std::vector<std::pair<const char*, nlohmann::json>> hostile = {
      {"scale", 0.0}, {"scale", -1.0}, {"scale", "1"}, {"mean", nullptr}, {"shift", std::numeric_limits<double>::infinity()}};
  for (const auto& [key, value] : hostile) {
    nlohmann::json bad = j;
    bad["log_target"][key] = value;
    try {
      LabelEncoding::from_json(bad);
      ADD_FAILURE() << "accepted " << bad.dump();
    } catch (const Error& err) {
      EXPECT_EQ(err.kind(), ErrorKind::kCorrupt) << bad.dump();
    }
  }
  nlohmann::json missing = j;
  missing["log_target"].erase("shift");
  EXPECT_THROW(LabelEncoding::from_json(missing), Error);
}

TEST(PreprocessLogTarget, ConfigKey) {
  EXPECT_EQ(parse_train_config("name = x\ndataset = d\n", "cfg.ini", {}).target_transform, TargetTransform::kStandard);
  const TrainConfig c = parse_train_config("name = x\ndataset = d\ntarget_transform = log\n", "cfg.ini", {});
  EXPECT_EQ(c.target_transform, TargetTransform::kLog);
  EXPECT_NE(c.to_text().find("target_transform = log"), std::string::npos);
  EXPECT_THROW(parse_train_config("name = x\ndataset = d\ntarget_transform = sqrt\n", "cfg.ini", {}), Error);
}

}  // namespace
}  // namespace anneal
