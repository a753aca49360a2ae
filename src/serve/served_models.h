// The models a server answers with: each a model reference resolved in the
// catalog for every request, and the version it resolved to loaded once and
// held by shared_ptr (a request in flight keeps the version it started
// with alive after the reference has moved on). Internal to src/serve/.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "anneal/catalog_runs.h"
#include "anneal/catalog_watch.h"
#include "anneal/device.h"
#include "anneal/model_file.h"
#include "anneal/prediction.h"
#include "anneal/serve.h"
#include "anneal/store.h"
#include "serve/metrics.h"
#include "serve/request_decoder.h"

namespace anneal::serve {

// Open catalog connections, lent one request at a time: a Store is used by
// one thread at a time, and opening one per request would cost more than
// the request. Thread-safe.
class StorePool {
 public:
  StorePool(std::filesystem::path root, StoreAccess access);
  // A Store for the caller alone until the lease ends. Throws what
  // Store::open throws.
  class Lease {
   public:
    Lease(StorePool& pool, std::unique_ptr<Store> store) : pool_(pool), store_(std::move(store)) {}
    ~Lease();
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Store& store() { return *store_; }

   private:
    StorePool& pool_;
    std::unique_ptr<Store> store_;
  };
  Lease lease();

  // The catalog's change counter (anneal/catalog_watch.h), read on a
  // connection of its own that never writes: it differs from the last one
  // read whenever anything was committed to the catalog in between.
  std::int64_t catalog_version();

 private:
  std::filesystem::path root_;
  StoreAccess access_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Store>> idle_;
  std::mutex watch_mutex_;
  std::unique_ptr<CatalogWatch> watch_;
};

// Prepared rows waiting for a forward pass, and what to do with their
// predictions (rows x outputs) or with the error that stopped them.
struct BatchJob {
  std::uint64_t rows = 0;
  std::vector<float> x;
  std::function<void(std::span<const float> predictions, std::exception_ptr error)> done;
};

// How concurrent requests for one model version share forward passes:
// jobs queue, and whoever finds no batch running runs batches until the
// queue is empty. A batch takes whole jobs, as many as fit in max_rows
// rows (always at least one: a job larger than max_rows runs alone, in
// predict's passes), waiting up to max_wait for more when it is not full.
// A batch of one job computes exactly what predict computes for its rows.
class Batcher {
 public:
  Batcher(std::size_t max_rows, std::chrono::microseconds max_wait) : max_rows_(max_rows), max_wait_(max_wait) {}
  // Queues `job`. True when the caller must now call run_batch until it
  // returns false (no batch was running); false when a runner has it.
  bool submit(BatchJob job, Metrics& metrics, const std::string& name);
  // Runs one batch on `predictor` and calls its jobs' done (on this
  // thread). True when more jobs are queued: the caller runs again (a later
  // call, so that other work can come between); false: the queue is empty
  // and the next submit starts a runner.
  bool run_batch(const runs::ModelFile& model, runs::Predictor& predictor, Metrics& metrics,
                 const std::string& name);

 private:
  const std::size_t max_rows_;
  const std::chrono::microseconds max_wait_;
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::deque<BatchJob> queue_;
  std::uint64_t queued_rows_ = 0;
  std::chrono::steady_clock::time_point first_arrival_;
  bool running_ = false;
};

// One model version, loaded: what predicting with it needs. Only the
// batcher's runner uses the predictor.
struct LoadedVersion {
  LoadedVersion(std::size_t max_batch, std::chrono::microseconds max_wait) : batcher(max_batch, max_wait) {}
  ModelRecord record;
  runs::ModelFile model;
  InputShape shape;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<runs::Predictor> predictor;
  Batcher batcher;
};

// How a server batches: rows per batch and the longest wait for more.
struct BatchLimits {
  std::size_t max_rows = 256;
  std::chrono::microseconds max_wait{0};
};

// What a request is answered with: a loaded version, or why the model is
// not ready (its reference resolves to nothing, or its version does not load).
struct Resolution {
  std::shared_ptr<LoadedVersion> version;
  std::string not_ready;
};

class ServedModel {
 public:
  ServedModel(ModelRef ref, BackendOptions compute, BatchLimits batching, ServeLog log, Metrics& metrics);
  // NAME@ALIAS (or NAME@vN, NAME): how requests address it.
  const std::string& name() const { return name_; }
  const ModelRef& ref() const { return ref_; }

  // Resolves the reference in the catalog now and returns the version it
  // points at, loading that version when it is not the one loaded (once:
  // concurrent callers wait for that load). A version that failed to load
  // is not tried again until the reference moves. The catalog is read again
  // only when its change counter has moved since the last resolution, so
  // a request that starts after an alias move has committed always sees
  // it, and the others cost a counter read. Thread-safe.
  Resolution resolve(StorePool& stores);

 private:
  ModelRef ref_;
  std::string name_;
  BackendOptions compute_;
  BatchLimits batching_;
  ServeLog log_;
  Metrics& metrics_;
  std::mutex load_mutex_;     // held while a version loads
  std::mutex state_mutex_;    // guards the three below; never held while loading
  std::shared_ptr<LoadedVersion> loaded_;
  std::int64_t failed_id_ = 0;
  std::string failed_reason_;
  // The last resolution: the catalog counter read before it, the model id
  // it found (0: none, unresolved_ says why).
  bool resolved_ = false;
  std::int64_t resolved_at_ = 0, resolved_id_ = 0;
  std::string unresolved_;
};

// `rows` read and preprocessed for `version`'s model, by anneal/prediction.h
// as predict does. Throws anneal::Error for rows the model cannot read
// (kUsage, kBadData), as predict does. Thread-safe.
runs::PreparedRows prepare(const LoadedVersion& version, const DecodedRows& rows);

}  // namespace anneal::serve
