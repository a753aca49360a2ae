// The CSV file `anneal predict` writes: one record per input row,
// "row,prediction" and for a classifier one "p_CLASS" probability column per
// class (RFC 4180 quoting where a class name needs it). Internal to
// src/runs/.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "anneal/model_file.h"

namespace anneal::runs {

// The CSV text for `rows` rows of `model`'s raw predictions (rows x outputs):
// the predicted class name and its probabilities, or the regression value
// in the target's units. Numbers are written with 7 significant digits.
std::string prediction_csv(const ModelFile& model, std::span<const float> predictions, std::uint64_t rows);

}  // namespace anneal::runs
