#include "serve/served_models.h"

#include <utility>

#include "anneal/error.h"
#include "anneal/model_inputs.h"
#include "anneal/model_kind.h"

namespace anneal::serve {

StorePool::StorePool(std::filesystem::path root, StoreAccess access)
    : root_(std::move(root)), access_(std::move(access)) {}

StorePool::Lease::~Lease() {
  std::lock_guard lock(pool_.mutex_);
  pool_.idle_.push_back(std::move(store_));
}

StorePool::Lease StorePool::lease() {
  {
    std::lock_guard lock(mutex_);
    if (!idle_.empty()) {
      std::unique_ptr<Store> store = std::move(idle_.back());
      idle_.pop_back();
      return Lease(*this, std::move(store));
    }
  }
  return Lease(*this, std::make_unique<Store>(Store::open(root_, access_)));
}

namespace {

InputShape input_shape_of(const runs::ModelFile& model) {
  InputShape shape;
  shape.delimited = runs::reads_delimited_rows(model);
  for (const ColumnTransform& column : model.features.columns()) shape.columns.push_back(column.column);
  shape.raw_width = static_cast<std::size_t>(model.features.input_width());
  return shape;
}

std::shared_ptr<LoadedVersion> load_version(Store& store, const ModelRecord& record, const BackendOptions& compute) {
  auto version = std::make_shared<LoadedVersion>();
  version->record = record;
  version->model = runs::load_model(store, record);
  version->shape = input_shape_of(version->model);
  BackendOptions device = compute;
  device.int8 = version->model.int8;
  version->backend = make_backend(device);
  version->predictor = std::make_unique<runs::Predictor>(version->model, *version->backend,
                                                         static_cast<std::int64_t>(runs::kPredictPassRows));
  return version;
}

}  // namespace

ServedModel::ServedModel(ModelRef ref, BackendOptions compute, ServeLog log)
    : ref_(std::move(ref)), name_(ref_.to_string()), compute_(compute), log_(std::move(log)) {}

Resolution ServedModel::resolve(StorePool& stores) {
  ModelRecord record;
  {
    StorePool::Lease lease = stores.lease();
    try {
      record = find_model(lease.store(), ref_);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kNotFound) throw;
      return {nullptr, e.what()};
    }
  }
  auto known = [&]() -> std::optional<Resolution> {
    std::lock_guard lock(state_mutex_);
    if (loaded_ && loaded_->record.id == record.id) return Resolution{loaded_, ""};
    if (failed_id_ == record.id) return Resolution{nullptr, failed_reason_};
    return std::nullopt;
  };
  if (auto answer = known()) return *answer;
  std::lock_guard loading(load_mutex_);
  if (auto answer = known()) return *answer;  // loaded by the caller this one waited for
  std::shared_ptr<LoadedVersion> version;
  std::string reason;
  try {
    StorePool::Lease lease = stores.lease();
    version = load_version(lease.store(), record, compute_);
  } catch (const std::exception& e) {
    // Damage, an unknown kind, a backend that cannot run it: this model is
    // not ready, the others serve on.
    reason = "model " + record.ref() + " cannot be loaded: " + e.what();
  }
  std::lock_guard lock(state_mutex_);
  if (version) {
    const std::string previous = loaded_ ? loaded_->record.ref() : "";
    loaded_ = version;
    failed_id_ = 0;
    failed_reason_.clear();
    if (log_)
      log_("info", name_ + " is answered by " + record.ref(),
           nlohmann::json{{"model", name_}, {"version", record.version}, {"previous", previous}}.dump());
    return {version, ""};
  }
  failed_id_ = record.id;
  failed_reason_ = reason;
  if (log_) log_("error", name_ + " is not ready: " + reason, nlohmann::json{{"model", name_}}.dump());
  return {nullptr, reason};
}

runs::RowPredictions predict(LoadedVersion& version, const DecodedRows& rows) {
  std::lock_guard lock(version.predict_mutex);
  if (version.shape.delimited) return runs::predict_rows(version.model, *version.predictor, rows.csv, ',', "request");
  return runs::predict_raw_rows(version.model, *version.predictor, rows.raw);
}

}  // namespace anneal::serve
