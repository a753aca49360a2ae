// How predict (and serve) write a number: printf's %.7g, the text an
// ostream of precision 7 wrote before prediction_number_text used
// to_chars. Every stored prediction CSV and every serve answer depends on
// these bytes, so they are checked against printf itself over edge cases
// and a million random doubles and floats.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>

#include "anneal/prediction.h"

namespace anneal {
namespace {

std::string printf_text(double v) {
  char text[64];
  std::snprintf(text, sizeof text, "%.7g", v);
  return text;
}

std::string stream_text(double v) {
  std::ostringstream out;
  out.precision(7);
  out << v;
  return out.str();
}

TEST(PredictionNumberText, IsPrintfsSevenSignificantDigits) {
  const double edge[] = {0.0, -0.0, 1.0, -1.0, 0.1, 1e-5, 1e-4, 9.9999995e-5, 123456.7, 1234567.0, 12345678.0,
                         9999999.5, 0.99999995, 1e300, -1e-300, 5e-324, std::numeric_limits<double>::max(),
                         std::numeric_limits<double>::lowest(), std::numeric_limits<double>::min(),
                         std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                         0.5f, 0.1234567f, 1.0 / 3};
  for (double v : edge) {
    EXPECT_EQ(runs::prediction_number_text(v), printf_text(v)) << v;
    EXPECT_EQ(runs::prediction_number_text(v), stream_text(v)) << v;
  }
}

TEST(PredictionNumberText, AgreesWithPrintfOnRandomBitPatterns) {
  std::mt19937_64 rng(42);
  for (int i = 0; i < 1000000; ++i) {
    const std::uint64_t bits = rng();
    double d;
    std::memcpy(&d, &bits, sizeof d);
    float f;
    const auto low = static_cast<std::uint32_t>(bits);
    std::memcpy(&f, &low, sizeof f);
    for (double v : {d, static_cast<double>(f), std::ldexp(static_cast<double>(bits >> 11), -53)}) {
      if (std::isnan(v)) continue;  // printf's sign of a NaN is the platform's; predict writes none
      ASSERT_EQ(runs::prediction_number_text(v), printf_text(v)) << std::hexfloat << v;
    }
  }
}

}  // namespace
}  // namespace anneal
