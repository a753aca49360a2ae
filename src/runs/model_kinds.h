// The implementations of anneal/model_kind.h, one file each
// (src/runs/KIND_kind.cc), listed in the table of src/runs/model_kind.cc.
// Internal to src/runs/.
#pragma once

#include <cstdint>

#include "anneal/boosted_trees.h"
#include "anneal/model_file.h"
#include "anneal/model_kind.h"

namespace anneal::runs {

const ModelKind& network_model_kind();  // network_kind.cc
const ModelKind& linear_model_kind();   // linear_kind.cc
const ModelKind& tree_model_kind();     // tree_kind.cc
const ModelKind& ensemble_model_kind(); // ensemble_kind.cc

// The tree kind's helpers (tree_kind.cc), for the runs that fit trees
// (train.cc, auto_search.cc).
// The booster's objective for `classes` classes (0: regression).
TreeObjective tree_objective(std::int64_t classes);
// The tree model of `trees`, fitted with objective `objective` on `classes`
// classes with `params` as they took effect (early_stopping_rounds 0 when
// nothing stopped it early): its bytes, rounds, settings and importance.
TreeModel tree_model_of(const BoostedTrees& trees, TreeObjective objective, std::int64_t classes,
                        const TreeParams& params);

}  // namespace anneal::runs
