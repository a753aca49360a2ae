// The table of model kinds: anneal/model_kind.h.
#include "anneal/model_kind.h"

#include <stdexcept>
#include <string>

#include "anneal/model_file.h"
#include "runs/model_kinds.h"

namespace anneal::runs {
namespace {

// One row per kind. A new kind of model is a new row (and its file).
struct KindRow {
  ModelKindId id;
  const ModelKind& (*kind)();
};
constexpr KindRow kKinds[] = {
    {ModelKindId::kNetwork, network_model_kind},
    {ModelKindId::kLinear, linear_model_kind},
    {ModelKindId::kTrees, tree_model_kind},
    {ModelKindId::kEnsemble, ensemble_model_kind},
};

}  // namespace

const ModelKind& model_kind(ModelKindId id) {
  for (const KindRow& row : kKinds)
    if (row.id == id) return row.kind();
  // Every enumerator has a row: a missing one is a programming error.
  throw std::logic_error("model kind " + std::to_string(static_cast<int>(id)) + " has no row in model_kind.cc");
}

const ModelKind& model_kind(const ModelFile& model) { return model_kind(model.kind); }

std::optional<ModelKindId> model_kind_named(std::string_view name) {
  for (const KindRow& row : kKinds)
    if (row.kind().name() == name) return row.id;
  return std::nullopt;
}

std::string model_kind_names() {
  std::string names;
  for (const KindRow& row : kKinds) names.append(names.empty() ? "" : ", ").append(row.kind().name());
  return names;
}

}  // namespace anneal::runs
