// Data checks: a dataset version compared column by column with a
// reference version, to catch a plausible export that is wrong before a
// model trained on it is promoted: a column gone or retyped, one suddenly
// empty, a unit changed (cents for euros), a category taking over, a label
// whose balance flipped.
//
// Per column of the reference (every column of the candidate is read, both
// splits): its presence and type; its missing rate; for numeric columns
// (and a numeric label) the population stability index over ten bins cut
// at the reference's deciles and the Kolmogorov-Smirnov statistic at the
// reference's percentiles; for categorical columns (and a categorical
// label) the PSI over levels and the share of candidate rows whose level
// the reference never had. Datetime columns move on every night and
// identifier-like categorical columns (most values distinct) are checked
// for presence and missing rate only. docs/TRAINING.md ("Data checks")
// gives the formulas.
//
// Memory: a few thousand sampled values per column and the bin counts,
// whatever the versions' sizes; each version is read a block of rows at a
// time (the reference twice, the candidate once).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anneal/datasets.h"
#include "anneal/store.h"

namespace anneal {

// When a check fails. The defaults follow common practice: PSI above 0.2
// is "a significant shift".
struct DriftThresholds {
  double psi = 0.2;               // population stability index, at most
  double ks = 0.2;                // Kolmogorov-Smirnov statistic, at most
  double missing_increase = 0.1;  // missing rate may grow by at most this (0.1 = 10 points)
  double unseen = 0.1;            // share of rows with a level the reference never had, at most
};

struct ColumnCheck {
  std::string column;
  // "numeric", "categorical", "datetime", "identifier" (categorical, most
  // values distinct), "image"; the label is checked as its type with
  // `label` set.
  std::string kind;
  bool label = false;
  bool present = true;            // the candidate has the column
  std::string type_change;        // "numeric -> categorical", or empty
  double reference_missing = 0, missing = 0;  // missing rates, 0..1
  std::optional<double> psi, ks, unseen;
  // The checks that failed, each as one phrase: "psi 3.2 > 0.2".
  std::vector<std::string> failures;
};

struct DataCheckReport {
  std::string candidate, reference;  // NAME@vN
  std::uint64_t candidate_rows = 0, reference_rows = 0;
  DriftThresholds thresholds;
  std::vector<ColumnCheck> columns;  // the reference's columns, in its order
  std::vector<std::string> new_columns;  // in the candidate only (not a failure)

  bool passed() const;
  // "amount: psi 3.2 > 0.2; region: missing 0.6 > 0.02 + 0.1": every
  // failure on one line, "" when none.
  std::string failure_line() const;
  nlohmann::json to_json() const;
};

// Compares `candidate` with `reference` (any two tabular versions, of one
// dataset or two). Throws kNotFound for a version that does not exist,
// kUsage when either holds images (no table columns to compare) and
// kCorrupt for a damaged stream.
DataCheckReport check_data(Store& store, const DatasetRef& candidate, const DatasetRef& reference,
                           const DriftThresholds& thresholds);

struct CheckedImport {
  ImportResult import;
  std::optional<DataCheckReport> checks;  // set when there was a version to check against
  std::string not_checked;                // why `checks` is unset: "" when it is set
};

// `data import --check`: imports `request` (import_dataset) and checks the
// new version against the dataset's latest version before it. The version
// is imported whatever the checks find (the store keeps the export as it
// came; the caller reports a failed check by its exit code, and `retrain
// --max-drift` keeps such a night from production). Not checked, with the
// reason in `not_checked`: the dataset's first version, or an import whose
// content was already the latest version. Throws what import_dataset
// throws, with nothing imported; kUsage before importing when the previous
// version holds images; after a successful import, check_data's errors.
CheckedImport import_checked(Store& store, const ImportRequest& request, const DriftThresholds& thresholds,
                             Reporter& reporter);

}  // namespace anneal
