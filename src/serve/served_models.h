// The models a server answers with: each a model reference resolved in the
// catalog for every request, and the version it resolved to loaded once and
// held by shared_ptr (a request in flight keeps the version it started
// with alive after the reference has moved on). Internal to src/serve/.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "anneal/catalog_runs.h"
#include "anneal/device.h"
#include "anneal/model_file.h"
#include "anneal/prediction.h"
#include "anneal/serve.h"
#include "anneal/store.h"
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

 private:
  std::filesystem::path root_;
  StoreAccess access_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Store>> idle_;
};

// One model version, loaded: what predicting with it needs. Predicting
// takes predict_mutex (a Predictor is one thread at a time).
struct LoadedVersion {
  ModelRecord record;
  runs::ModelFile model;
  InputShape shape;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<runs::Predictor> predictor;
  std::mutex predict_mutex;
};

// What a request is answered with: a loaded version, or why the model is
// not ready (its reference resolves to nothing, or its version does not load).
struct Resolution {
  std::shared_ptr<LoadedVersion> version;
  std::string not_ready;
};

class ServedModel {
 public:
  ServedModel(ModelRef ref, BackendOptions compute, ServeLog log);
  // NAME@ALIAS (or NAME@vN, NAME): how requests address it.
  const std::string& name() const { return name_; }
  const ModelRef& ref() const { return ref_; }

  // Resolves the reference in the catalog now and returns the version it
  // points at, loading that version when it is not the one loaded (once:
  // concurrent callers wait for that load). A version that failed to load
  // is not tried again until the reference moves. Thread-safe.
  Resolution resolve(StorePool& stores);

 private:
  ModelRef ref_;
  std::string name_;
  BackendOptions compute_;
  ServeLog log_;
  std::mutex load_mutex_;     // held while a version loads
  std::mutex state_mutex_;    // guards the three below; never held while loading
  std::shared_ptr<LoadedVersion> loaded_;
  std::int64_t failed_id_ = 0;
  std::string failed_reason_;
};

// The answer of `version` for `rows`: its raw predictions, by
// anneal/prediction.h as predict computes them. Throws anneal::Error for
// rows the model cannot read (kUsage, kBadData) as predict does.
runs::RowPredictions predict(LoadedVersion& version, const DecodedRows& rows);

}  // namespace anneal::serve
