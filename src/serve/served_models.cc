#include "serve/served_models.h"

#include <utility>

#include "anneal/catalog_watch.h"
#include "anneal/error.h"
#include "anneal/fault_point.h"
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

std::int64_t StorePool::catalog_version() {
  std::lock_guard lock(watch_mutex_);
  if (!watch_) watch_ = std::make_unique<CatalogWatch>(root_, access_);
  return watch_->data_version();
}

namespace {

InputShape input_shape_of(const runs::ModelFile& model) {
  InputShape shape;
  shape.delimited = runs::reads_delimited_rows(model);
  for (const ColumnTransform& column : model.features.columns()) shape.columns.push_back(column.column);
  shape.raw_width = static_cast<std::size_t>(model.features.input_width());
  return shape;
}

std::shared_ptr<LoadedVersion> load_version(Store& store, const ModelRecord& record, const BackendOptions& compute,
                                            const BatchLimits& batching) {
  auto version = std::make_shared<LoadedVersion>(batching.max_rows, batching.max_wait);
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

ServedModel::ServedModel(ModelRef ref, BackendOptions compute, BatchLimits batching, ServeLog log, Metrics& metrics)
    : ref_(std::move(ref)),
      name_(ref_.to_string()),
      compute_(compute),
      batching_(batching),
      log_(std::move(log)),
      metrics_(metrics) {}

Resolution ServedModel::resolve(StorePool& stores) {
  // Read before the catalog is: a commit after this read moves the counter
  // again, and the next request reads the catalog anew.
  const std::int64_t seen = stores.catalog_version();
  {
    std::lock_guard lock(state_mutex_);
    if (resolved_ && resolved_at_ == seen) {
      if (resolved_id_ == 0) return {nullptr, unresolved_};
      if (loaded_ && loaded_->record.id == resolved_id_) return {loaded_, ""};
      if (failed_id_ == resolved_id_) return {nullptr, failed_reason_};
    }
  }
  auto remember = [&](std::int64_t id, const std::string& why) {
    resolved_ = true;
    resolved_at_ = seen;
    resolved_id_ = id;
    unresolved_ = why;
  };
  ModelRecord record;
  {
    StorePool::Lease lease = stores.lease();
    try {
      record = find_model(lease.store(), ref_);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kNotFound) throw;
      metrics_.model_state(name_, 0, false);
      std::lock_guard lock(state_mutex_);
      remember(0, e.what());
      return {nullptr, e.what()};
    }
  }
  auto known = [&]() -> std::optional<Resolution> {
    std::lock_guard lock(state_mutex_);
    if (loaded_ && loaded_->record.id == record.id) {
      remember(record.id, "");
      return Resolution{loaded_, ""};
    }
    if (failed_id_ == record.id) {
      remember(record.id, "");
      return Resolution{nullptr, failed_reason_};
    }
    return std::nullopt;
  };
  if (auto answer = known()) return *answer;
  std::lock_guard loading(load_mutex_);
  if (auto answer = known()) return *answer;  // loaded by the caller this one waited for
  std::shared_ptr<LoadedVersion> version;
  std::string reason;
  try {
    StorePool::Lease lease = stores.lease();
    version = load_version(lease.store(), record, compute_, batching_);
  } catch (const std::exception& e) {
    // Damage, an unknown kind, a backend that cannot run it: this model is
    // not ready, the others serve on.
    reason = "model " + record.ref() + " cannot be loaded: " + e.what();
  }
  std::lock_guard lock(state_mutex_);
  remember(record.id, "");
  if (version) {
    const std::string previous = loaded_ ? loaded_->record.ref() : "";
    loaded_ = version;
    failed_id_ = 0;
    failed_reason_.clear();
    metrics_.model_state(name_, record.version, true);
    if (log_)
      log_("info", name_ + " is answered by " + record.ref(),
           nlohmann::json{{"model", name_}, {"version", record.version}, {"previous", previous}}.dump());
    return {version, ""};
  }
  failed_id_ = record.id;
  failed_reason_ = reason;
  metrics_.model_state(name_, 0, false);
  if (log_) log_("error", name_ + " is not ready: " + reason, nlohmann::json{{"model", name_}}.dump());
  return {nullptr, reason};
}

runs::PreparedRows prepare(const LoadedVersion& version, const DecodedRows& rows) {
  if (version.shape.delimited) return runs::prepare_rows(version.model, rows.csv, ',', "request");
  return runs::prepare_raw_rows(version.model, rows.raw);
}

bool Batcher::submit(BatchJob job, Metrics& metrics, const std::string& name) {
  metrics.queued(name, static_cast<std::int64_t>(job.rows));
  bool run = false;
  {
    std::lock_guard lock(mutex_);
    if (queue_.empty()) first_arrival_ = std::chrono::steady_clock::now();
    queued_rows_ += job.rows;
    queue_.push_back(std::move(job));
    arrived_.notify_one();
    run = !running_;
    running_ = true;
  }
  // A request's rows are in the queue (the Nth time: the Nth request of
  // this process queued), the lock let go: a test that holds the runner at
  // serve.batching waits here for the request that fills its batch, an
  // event rather than a clock (serve_ops_test).
  fault_point("serve.queued");
  return run;
}

bool Batcher::run_batch(const runs::ModelFile& model, runs::Predictor& predictor, Metrics& metrics,
                        const std::string& name) {
  // The runner, before it takes its batch: a test holds it here while
  // requests queue (serve_ops_test).
  fault_point("serve.batching");
  std::vector<BatchJob> batch;
  std::uint64_t rows = 0;
  {
    std::unique_lock lock(mutex_);
    // Not full yet: wait for more, up to max_wait after the first arrived.
    if (max_wait_.count() > 0 && queued_rows_ < max_rows_)
      arrived_.wait_until(lock, first_arrival_ + max_wait_, [&] { return queued_rows_ >= max_rows_; });
    while (!queue_.empty() && (batch.empty() || rows + queue_.front().rows <= max_rows_)) {
      rows += queue_.front().rows;
      queued_rows_ -= queue_.front().rows;
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    if (!queue_.empty()) first_arrival_ = std::chrono::steady_clock::now();
  }
  metrics.queued(name, -static_cast<std::int64_t>(rows));
  std::vector<float> predictions;
  std::exception_ptr error;
  try {
    if (batch.size() == 1) {
      predictions = runs::predict_prepared(model, predictor, batch.front().x, rows);
    } else {
      std::vector<float> x;
      for (const BatchJob& job : batch) x.insert(x.end(), job.x.begin(), job.x.end());
      predictions = runs::predict_prepared(model, predictor, x, rows);
    }
    metrics.batch(name, rows);
  } catch (...) {
    error = std::current_exception();
  }
  const std::size_t outputs = rows && !error ? predictions.size() / rows : 0;
  std::size_t offset = 0;
  for (BatchJob& job : batch) {
    const std::size_t n = static_cast<std::size_t>(job.rows) * outputs;
    job.done(error ? std::span<const float>() : std::span<const float>(predictions).subspan(offset, n), error);
    offset += n;
  }
  std::lock_guard lock(mutex_);
  if (queue_.empty()) {
    running_ = false;
    return false;
  }
  return true;
}

}  // namespace anneal::serve
