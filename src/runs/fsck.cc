// fsck_runs: the checks of `anneal fsck` that need to know what models and
// checkpoints hold, which store/ (below this layer) does not.
#include "anneal/config.h"
#include "anneal/error.h"
#include "anneal/runs.h"
#include "anneal/model_file.h"

namespace anneal {
using nlohmann::json;

namespace {

// The operation a derived model's run records on its first line
// ("operation = prune"), or "" for a training config.
std::string_view derived_operation(std::string_view text) {
  constexpr std::string_view kPrefix = "operation = ";
  if (!text.starts_with(kPrefix)) return {};
  text.remove_prefix(kPrefix.size());
  return text.substr(0, text.find('\n'));
}

}  // namespace

void fsck_runs(Store& store, Reporter& reporter, FsckReport& report) {
  FileLock no_gc = lock_out_gc(store, reporter);
  std::vector<RunArtifact> artifacts;
  std::vector<StoredConfig> configs;
  try {
    artifacts = list_run_artifacts(store);
    configs = list_stored_configs(store);
  } catch (const std::exception& e) {
    report.problems.push_back(std::string("catalog: models, checkpoints and configs cannot be listed: ") + e.what());
  }
  reporter.note("decoding " + std::to_string(artifacts.size()) + " models and checkpoints");
  for (const RunArtifact& a : artifacts) {
    if (report.unreadable_blobs.count(a.blob)) continue;
    try {
      const std::string bytes = read_run_artifact(store, a);
      if (a.kind == RunArtifact::Kind::kModel) {
        runs::decode_model(bytes, a.owner);
        continue;
      }
      const runs::Checkpoint c = runs::decode_checkpoint(bytes, a.owner);
      if (c.header.value("run", std::int64_t{-1}) != a.run || c.header.value("step", std::int64_t{-1}) != a.step)
        report.problems.push_back(a.owner + ": the checkpoint says it is run " + c.header.value("run", json()).dump() +
                                  " at step " + c.header.value("step", json()).dump());
      else if (!c.header.contains("features") || !c.header.contains("labels"))
        report.problems.push_back(a.owner + ": the checkpoint holds no preprocessing");
    } catch (const std::exception& e) {
      // Decoders name the owner; a read error names the object.
      const std::string what = e.what();
      report.problems.push_back(what.starts_with(a.owner) ? what : a.owner + ": " + what);
    }
  }
  for (const StoredConfig& c : configs) {
    try {
      // A run made by `anneal quantize` or `anneal prune` records the
      // operation (quantize/derived_model.cc), not a training config: it
      // has no layers or dataset to check, and resume never reads it.
      if (const std::string_view op = derived_operation(c.text); !op.empty()) {
        if (op != "quantize" && op != "prune")
          report.problems.push_back(c.owner + ": its recorded config names the unknown operation '" +
                                    std::string(op) + "'");
        continue;
      }
      parse_train_config(c.text, c.owner + " config", {});
    } catch (const std::exception& e) {
      report.problems.push_back(c.owner + ": its recorded config does not parse: " + e.what());
    }
  }
}

}  // namespace anneal
