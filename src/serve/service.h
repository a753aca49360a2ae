// What a server answers, apart from HTTP's bytes (server.cc): the routes,
// who may call them, and the JSON and CSV of the answers. Internal to
// src/serve/.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "anneal/serve.h"
#include "serve/metrics.h"
#include "serve/served_models.h"
#include "serve/tokens.h"

namespace anneal::serve {

// A request as the routes need it: views into the HTTP request, valid for
// the call.
struct HttpRequest {
  std::string_view method;         // "GET", "POST", ...
  std::string_view target;         // "/v2/models/iris@production/infer?x=1"
  std::string_view authorization;  // the Authorization header, "" when absent
  std::string_view content_type;
  std::string_view accept;
  std::string_view body;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // beyond Content-Type and Content-Length
};

// A JSON error answer: {"error": message} and, when it names one,
// {"limit": limit}.
HttpResponse error_response(int status, const std::string& message, const std::string& limit = "");

// Receives the answer to one request, exactly once, on whichever thread
// made it (the one that ran its batch, for an infer).
using Reply = std::function<void(HttpResponse)>;

// Runs `work` later on one of the server's threads.
using Post = std::function<void(std::function<void()> work)>;

class Service {
 public:
  // Opens the store's connections, resolves and loads the models (logging
  // those that are not ready) and reads the tokens file. Errors as
  // Server::Server. `post` must stay usable while the service lives.
  Service(const ServeOptions& options, Post post);

  // Answers `request` through `reply`: at once, or for a prediction once
  // its batch has run. `request` need only live until this returns.
  // Thread-safe; never throws for anything a client sends (a failure of
  // the server itself is a 500 answer).
  void handle(const HttpRequest& request, Reply reply);

  // What the server counts (GET /metrics).
  Metrics& metrics() { return metrics_; }

  // Reads the tokens file again and records it in the store's audit trail
  // (serve.tokens-reload: how many tokens of each role, never a token or
  // its digest), then takes the new tokens. On an error (a file that does
  // not read, a record that cannot be written) keeps the tokens it had and
  // rethrows: new tokens the trail does not show are never in force.
  // Thread-safe.
  void reload_tokens();
  // Appends an admin action of this server to the store's audit trail, as
  // the actor the store was opened with (record_audit_action). Thread-safe.
  void record(std::string_view action, const nlohmann::json& detail);
  // The tokens in force as an audit detail: {"predict": N, "admin": M};
  // null without a tokens file (every request allowed). Thread-safe.
  nlohmann::json token_counts() const;
  // From now on readiness says 503 (draining). Thread-safe.
  void set_draining() { draining_ = true; }

  std::vector<std::string> model_names() const;

  struct Responder;  // a request's reply, its route and its start

 private:
  void route(const HttpRequest& request, const std::shared_ptr<Responder>& out);
  // nullptr when allowed; else the 401/403 answer.
  std::unique_ptr<HttpResponse> refuse_unless(const HttpRequest& request, Role needed);
  ServedModel* model_named(const std::string& name);
  HttpResponse model_metadata(ServedModel& model, const std::string& version);
  HttpResponse model_ready(ServedModel& model, const std::string& version);
  void infer(ServedModel& model, const std::string& version, const HttpRequest& request,
             const std::shared_ptr<Responder>& out);
  void invocations(ServedModel& model, const HttpRequest& request, const std::shared_ptr<Responder>& out);
  // Queues `job` on `version`'s batcher and runs batches when no one is.
  void submit(const std::shared_ptr<LoadedVersion>& version, const ServedModel& model, BatchJob job);
  void run_batches(const std::shared_ptr<LoadedVersion>& version, const std::string& name);

  const ServeOptions& options_;
  Post post_;
  Metrics metrics_;
  StorePool stores_;
  std::vector<std::unique_ptr<ServedModel>> models_;
  std::map<std::string, ServedModel*, std::less<>> by_name_;
  mutable std::mutex tokens_mutex_;
  std::shared_ptr<const TokenTable> tokens_;  // null: no tokens file, every request allowed
  std::atomic<bool> draining_{false};
};

}  // namespace anneal::serve
