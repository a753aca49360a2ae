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

// The header line of `model`'s prediction CSV, with its line end.
std::string prediction_csv_header(const ModelFile& model);

// The CSV lines for `rows` consecutive input rows of `model`'s raw
// predictions (rows x outputs), numbered from `first_row` + 1: the
// predicted class name and its probabilities, or the regression value in
// the target's units. Numbers are written with 7 significant digits. A
// row's line depends on that row's predictions alone, so the lines of a
// file predicted piece by piece are those of the whole.
std::string prediction_csv_rows(const ModelFile& model, std::span<const float> predictions, std::uint64_t rows,
                                std::uint64_t first_row);

}  // namespace anneal::runs
