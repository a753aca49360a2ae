#include "runs/legacy_weights_hash.h"

#include "anneal/error.h"
#include "anneal/hash.h"

namespace anneal::runs {

std::string legacy_weights_hash(const ModelFile& model) {
  Hasher hasher;
  auto values = [&](const NamedTensor& t) {
    hasher.update(std::string_view(reinterpret_cast<const char*>(t.values.data()), t.values.size() * sizeof(float)));
  };
  switch (model.kind) {
    case ModelKindId::kLinear:
      hasher.update(std::string_view(reinterpret_cast<const char*>(model.linear_model.weights.data()),
                                     model.linear_model.weights.size() * sizeof(double)));
      break;
    case ModelKindId::kTrees:
      hasher.update(model.trees.booster);
      break;
    case ModelKindId::kNetwork:
      for (const NamedTensor& t : model.tensors) {
        std::string head = t.name;
        if (!model.compression.empty()) {
          for (const std::int64_t d : t.dims) head.append(":").append(std::to_string(d));
          head += '\n';
        } else {
          head += '\0';
          head += '{';
          for (std::size_t i = 0; i < t.dims.size(); ++i) head.append(i ? ", " : "").append(std::to_string(t.dims[i]));
          head += '}';
          head += '\0';
        }
        hasher.update(head);
        values(t);
      }
      break;
    case ModelKindId::kEnsemble:
      // Ensembles came after the legacy formats: none was written in them.
      throw corrupt("an ensemble model in format " + std::to_string(model.format) + ", written only before ensembles existed");
  }
  return to_hex(hasher.finish());
}

}  // namespace anneal::runs
