// The implementations of anneal/model_kind.h, one file each
// (src/runs/KIND_kind.cc), listed in the table of src/runs/model_kind.cc.
// Internal to src/runs/.
#pragma once

#include "anneal/model_kind.h"

namespace anneal::runs {

const ModelKind& network_model_kind();  // network_kind.cc
const ModelKind& linear_model_kind();   // linear_kind.cc
const ModelKind& tree_model_kind();     // tree_kind.cc
const ModelKind& ensemble_model_kind(); // ensemble_kind.cc

}  // namespace anneal::runs
