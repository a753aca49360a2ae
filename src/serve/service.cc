#include "serve/service.h"

#include <chrono>
#include <cmath>
#include <exception>
#include <span>

#include <nlohmann/json.hpp>

#include "anneal/audit.h"
#include "anneal/catalog_jobs.h"
#include "anneal/error.h"
#include "anneal/fault_point.h"
#include "anneal/model_kind.h"
#include "anneal/version.h"

namespace anneal::serve {
namespace {

using nlohmann::json;

// JSON text of a string; bytes that are not UTF-8 (a class name is data)
// become U+FFFD rather than failing the answer.
std::string json_text(const std::string& s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

// A number as predict's CSV writes it, which is valid JSON; null for a
// value that is not finite (JSON has no NaN).
std::string json_number(double v) { return std::isfinite(v) ? runs::prediction_number_text(v) : "null"; }

HttpResponse json_response(int status, const json& document) {
  HttpResponse r;
  r.status = status;
  r.body = document.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

// Percent-decodes one path segment; false for a malformed escape.
bool percent_decode(std::string_view in, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out += in[i];
      continue;
    }
    if (i + 2 >= in.size()) return false;
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    const int hi = hex(in[i + 1]), lo = hex(in[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return true;
}

std::string datatype_of(const runs::ModelFile& model, const ColumnTransform& column) {
  if (column.one_hot) return "BYTES";
  for (const ColumnSchema& c : model.dataset_columns)
    if (c.name == column.column && c.type == ColumnType::kDatetime) return "BYTES";
  return "FP32";
}

std::string header_of(std::string_view content_type) {
  const std::size_t semicolon = content_type.find(';');
  std::string type(content_type.substr(0, semicolon));
  while (!type.empty() && type.back() == ' ') type.pop_back();
  for (char& c : type) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return type;
}

// A batch's predictions for one request's rows.
struct Answered {
  std::uint64_t rows = 0;
  std::span<const float> predictions;
  TransformCounts counts;
};

// The answers as KServe V2 outputs (and their parameters).
std::string infer_answer(const ServedModel& served, const LoadedVersion& version, const std::string& request_id,
                         const Answered& predictions) {
  const runs::ModelFile& model = version.model;
  const runs::PredictionAnswers answers = runs::prediction_answers(model, predictions.predictions, predictions.rows);
  const std::string n = std::to_string(predictions.rows);
  std::string out = "{\"model_name\":" + json_text(served.name()) + ",\"model_version\":\"" +
                    std::to_string(version.record.version) + "\"";
  if (!request_id.empty()) out += ",\"id\":" + json_text(request_id);
  out += ",\"outputs\":[";
  if (answers.classification) {
    const auto& names = model.labels.class_names();
    const std::size_t k = names.size();
    out += "{\"name\":\"prediction\",\"datatype\":\"BYTES\",\"shape\":[" + n + "],\"data\":[";
    for (std::size_t r = 0; r < predictions.rows; ++r)
      out.append(r ? "," : "").append(json_text(names[answers.best_class[r]]));
    out += "]},{\"name\":\"probabilities\",\"datatype\":\"FP32\",\"shape\":[" + n + "," + std::to_string(k) +
           "],\"data\":[";
    for (std::size_t i = 0; i < answers.probabilities.size(); ++i)
      out.append(i ? "," : "").append(json_number(answers.probabilities[i]));
    out += "]}],\"parameters\":{\"model\":" + json_text(version.record.ref()) + ",\"class_names\":[";
    for (std::size_t j = 0; j < k; ++j) out.append(j ? "," : "").append(json_text(names[j]));
    out += "]";
  } else {
    out += "{\"name\":\"prediction\",\"datatype\":\"FP64\",\"shape\":[" + n + "],\"data\":[";
    for (std::size_t r = 0; r < predictions.rows; ++r) out.append(r ? "," : "").append(json_number(answers.values[r]));
    out += "]}],\"parameters\":{\"model\":" + json_text(version.record.ref());
  }
  out += ",\"missing\":" + std::to_string(predictions.counts.missing) +
         ",\"unseen\":" + std::to_string(predictions.counts.unseen) + "}}";
  return out;
}

// The answers as MLflow's {"predictions": [...]}: one record per row with
// predict's CSV columns (prediction, p_CLASS...).
std::string mlflow_answer(const ServedModel& served, const LoadedVersion& version, const Answered& predictions) {
  const runs::ModelFile& model = version.model;
  const runs::PredictionAnswers answers = runs::prediction_answers(model, predictions.predictions, predictions.rows);
  std::string out = "{\"predictions\":[";
  const auto& names = model.labels.class_names();
  std::vector<std::string> keys;
  for (const std::string& name : names) keys.push_back(json_text("p_" + name));
  for (std::size_t r = 0; r < predictions.rows; ++r) {
    out += r ? ",{" : "{";
    if (answers.classification) {
      out += "\"prediction\":" + json_text(names[answers.best_class[r]]);
      for (std::size_t j = 0; j < names.size(); ++j)
        out += "," + keys[j] + ":" + json_number(answers.probabilities[r * names.size() + j]);
    } else {
      out += "\"prediction\":" + json_number(answers.values[r]);
    }
    out += "}";
  }
  out += "],\"model_name\":" + json_text(served.name()) + ",\"model_version\":\"" +
         std::to_string(version.record.version) + "\",\"model\":" + json_text(version.record.ref()) + "}";
  return out;
}

void add_version_header(HttpResponse& response, const LoadedVersion& version) {
  response.headers.emplace_back("Anneal-Model-Version", version.record.ref());
}

}  // namespace

HttpResponse error_response(int status, const std::string& message, const std::string& limit) {
  json document{{"error", message}};
  if (!limit.empty()) document["limit"] = limit;
  return json_response(status, document);
}

struct Service::Responder {
  Responder(Service& service, Reply reply)
      : service(service), reply(std::move(reply)), start(std::chrono::steady_clock::now()) {}
  // Counts the answer, then hands it on.
  void send(HttpResponse response) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::string limit;
    if (response.status >= 400 && response.status < 500 && response.body.find("\"limit\"") != std::string::npos) {
      const json document = json::parse(response.body, nullptr, false);
      if (document.is_object() && document.contains("limit")) limit = document["limit"].get<std::string>();
    }
    service.metrics_.request(route, response.status, seconds, limit);
    reply(std::move(response));
  }
  // The answer to an exception that stopped the request: a client's
  // mistake is 4xx (predict's kUsage and kBadData among them), anything
  // else the server's (500, logged).
  void fail(std::exception_ptr error) {
    try {
      std::rethrow_exception(error);
    } catch (const RequestError& e) {
      send(error_response(e.status(), e.what(), e.limit()));
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::kUsage || e.kind() == ErrorKind::kBadData) return send(error_response(400, e.what()));
      if (service.options_.log) service.options_.log("error", e.what(), "{}");
      send(error_response(500, e.what()));
    } catch (const std::exception& e) {
      if (service.options_.log) service.options_.log("error", std::string("internal error: ") + e.what(), "{}");
      send(error_response(500, std::string("internal error: ") + e.what()));
    }
  }
  Service& service;
  Reply reply;
  std::chrono::steady_clock::time_point start;
  std::string route = "other";
};

Service::Service(const ServeOptions& options, Post post)
    : options_(options), post_(std::move(post)), stores_(options.store, options.access) {
  std::vector<ModelRef> refs = options.models;
  {
    StorePool::Lease lease = stores_.lease();
    if (refs.empty()) {
      for (const AliasRecord& alias : list_aliases(lease.store())) refs.push_back({alias.name, std::nullopt, alias.alias});
      if (refs.empty())
        throw usage_error("the store has no model alias to serve; name the models to serve or set an alias");
    }
    // A reference to a model that does not exist at all is a mistake in
    // what was asked; an alias not (yet) set is a model not ready.
    const std::vector<ModelRecord> registered = list_models(lease.store());
    for (const ModelRef& ref : refs) {
      bool exists = false;
      for (const ModelRecord& m : registered) exists = exists || m.name == ref.name;
      if (!exists) throw Error(ErrorKind::kNotFound, "no model named '" + ref.name + "'").with(Remedy::kListModels);
    }
  }
  for (const ModelRef& ref : refs) {
    auto model = std::make_unique<ServedModel>(
        ref, options.compute, BatchLimits{options.max_batch_rows, options.max_batch_wait}, options.log, metrics_);
    if (by_name_.count(model->name())) continue;  // named twice: served once
    by_name_.emplace(model->name(), model.get());
    models_.push_back(std::move(model));
  }
  for (auto& model : models_) {
    const Resolution r = model->resolve(stores_);
    if (!r.version && options.log)
      options.log("warning", model->name() + " is not ready: " + r.not_ready,
                  json{{"model", model->name()}}.dump());
  }
  if (options.tokens_file) tokens_ = std::make_shared<const TokenTable>(TokenTable::read(*options.tokens_file));
}

std::vector<std::string> Service::model_names() const {
  std::vector<std::string> names;
  for (const auto& model : models_) names.push_back(model->name());
  return names;
}

namespace {

json counts_of(const TokenTable& table) {
  return {{"predict", table.count(Role::kPredict)}, {"admin", table.count(Role::kAdmin)}};
}

}  // namespace

void Service::reload_tokens() {
  if (!options_.tokens_file) return;
  auto table = std::make_shared<const TokenTable>(TokenTable::read(*options_.tokens_file));
  // Recorded before the tokens change: a reload the trail cannot show is
  // not done.
  record("serve.tokens-reload", {{"tokens", counts_of(*table)}});
  std::lock_guard lock(tokens_mutex_);
  tokens_ = std::move(table);
}

void Service::record(std::string_view action, const json& detail) {
  // An admin action about to be recorded: a test fails the record here
  // (serve_ops_test: a reload the trail cannot show is not done).
  fault_point("serve.recording");
  StorePool::Lease lease = stores_.lease();
  record_audit_action(lease.store(), action, detail);
}

json Service::token_counts() const {
  std::lock_guard lock(tokens_mutex_);
  return tokens_ ? counts_of(*tokens_) : json(nullptr);
}

std::unique_ptr<HttpResponse> Service::refuse_unless(const HttpRequest& request, Role needed) {
  std::shared_ptr<const TokenTable> tokens;
  {
    std::lock_guard lock(tokens_mutex_);
    tokens = tokens_;
  }
  if (!tokens) return nullptr;
  constexpr std::string_view kBearer = "Bearer ";
  auto unauthorized = [](const std::string& message) {
    auto r = std::make_unique<HttpResponse>(error_response(401, message));
    r->headers.emplace_back("WWW-Authenticate", "Bearer");
    return r;
  };
  if (request.authorization.empty()) return unauthorized("this route needs a bearer token");
  if (request.authorization.size() <= kBearer.size() ||
      !std::equal(kBearer.begin(), kBearer.end(), request.authorization.begin(),
                  [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) ==
                                              std::tolower(static_cast<unsigned char>(b)); }))
    return unauthorized("the Authorization header must be \"Bearer TOKEN\"");
  const std::optional<Role> role = tokens->role_of(request.authorization.substr(kBearer.size()));
  if (!role) return unauthorized("the bearer token is not accepted");
  if (static_cast<int>(*role) < static_cast<int>(needed))
    return std::make_unique<HttpResponse>(error_response(403, "this route needs the admin role"));
  return nullptr;
}

ServedModel* Service::model_named(const std::string& name) {
  auto found = by_name_.find(name);
  return found == by_name_.end() ? nullptr : found->second;
}

void Service::handle(const HttpRequest& request, Reply reply) {
  auto out = std::make_shared<Responder>(*this, std::move(reply));
  try {
    route(request, out);
  } catch (...) {
    out->fail(std::current_exception());
  }
}

void Service::route(const HttpRequest& request, const std::shared_ptr<Responder>& out) {
  std::string_view path = request.target.substr(0, request.target.find('?'));
  std::vector<std::string> parts;
  for (std::size_t start = 1; start <= path.size();) {
    const std::size_t end = std::min(path.find('/', start), path.size());
    std::string segment;
    if (!percent_decode(path.substr(start, end - start), segment)) throw RequestError(400, "a malformed %-escape in the path");
    parts.push_back(std::move(segment));
    start = end + 1;
  }
  if (!path.empty() && path.back() == '/') parts.pop_back();  // "/v2/" is "/v2"
  const bool get = request.method == "GET", post = request.method == "POST";
  auto method_not_allowed = [&](const char* allowed) {
    HttpResponse r = error_response(405, std::string(request.method) + " is not allowed here; use " + allowed);
    r.headers.emplace_back("Allow", allowed);
    out->send(std::move(r));
  };

  if (parts.size() == 3 && parts[0] == "v2" && parts[1] == "health") {
    out->route = "health";
    if (!get) return method_not_allowed("GET");
    if (parts[2] == "live") return out->send(json_response(200, json{{"live", true}}));
    if (parts[2] == "ready") {
      if (draining_) return out->send(json_response(503, json{{"ready", false}, {"error", "the server is shutting down"}}));
      return out->send(json_response(200, json{{"ready", true}}));
    }
  }
  if (parts.size() == 1 && parts[0] == "ping") {
    out->route = "health";
    if (!get) return method_not_allowed("GET");
    return out->send(json_response(200, json{{"live", true}}));
  }
  if (parts.size() == 1 && parts[0] == "metrics") {
    out->route = "metrics";
    if (!get) return method_not_allowed("GET");
    if (auto refused = refuse_unless(request, Role::kAdmin)) return out->send(std::move(*refused));
    HttpResponse r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = metrics_.text();
    return out->send(std::move(r));
  }
  if (parts.size() == 1 && parts[0] == "v2") {
    out->route = "metadata";
    if (!get) return method_not_allowed("GET");
    if (auto refused = refuse_unless(request, Role::kPredict)) return out->send(std::move(*refused));
    return out->send(json_response(200, json{{"name", "anneal"}, {"version", version()}, {"extensions", json::array()}}));
  }
  // /v2/models/{name}[/versions/{v}][/ready|/infer]
  if (parts.size() >= 3 && parts[0] == "v2" && parts[1] == "models") {
    std::string version;
    std::size_t next = 3;
    if (parts.size() >= 5 && parts[3] == "versions") {
      version = parts[4];
      next = 5;
    }
    const std::string action = parts.size() == next + 1 ? parts[next] : parts.size() == next ? "" : "?";
    if (action != "" && action != "ready" && action != "infer")
      return out->send(error_response(404, "no such route: " + std::string(path)));
    out->route = action.empty() ? "metadata" : action;
    const Role needed = action.empty() ? Role::kAdmin : Role::kPredict;
    if (auto refused = refuse_unless(request, needed)) return out->send(std::move(*refused));
    ServedModel* model = model_named(parts[2]);
    if (!model) return out->send(error_response(404, "no served model is named '" + parts[2] + "'"));
    if (action.empty()) return get ? out->send(model_metadata(*model, version)) : method_not_allowed("GET");
    if (action == "ready") return get ? out->send(model_ready(*model, version)) : method_not_allowed("GET");
    return post ? infer(*model, version, request, out) : method_not_allowed("POST");
  }
  // MLflow: /invocations (one served model), /models/{name}/invocations.
  if ((parts.size() == 1 && parts[0] == "invocations") ||
      (parts.size() == 3 && parts[0] == "models" && parts[2] == "invocations")) {
    out->route = "invocations";
    if (!post) return method_not_allowed("POST");
    if (auto refused = refuse_unless(request, Role::kPredict)) return out->send(std::move(*refused));
    ServedModel* model = nullptr;
    if (parts.size() == 3) {
      model = model_named(parts[1]);
      if (!model) return out->send(error_response(404, "no served model is named '" + parts[1] + "'"));
    } else if (models_.size() == 1) {
      model = models_.front().get();
    } else {
      std::string names;
      for (const auto& m : models_) names.append(names.empty() ? "" : ", ").append(m->name());
      return out->send(error_response(400, "several models are served (" + names +
                                               "); post to /models/NAME/invocations to say which"));
    }
    return invocations(*model, request, out);
  }
  return out->send(error_response(404, "no such route: " + std::string(path)));
}

namespace {

// The version a request resolves to, or the answer that refuses it: 503
// for a model that is not ready, 404 for a version other than the one the
// reference points at.
std::shared_ptr<LoadedVersion> answerable(ServedModel& model, StorePool& stores, const std::string& version,
                                          HttpResponse& refusal) {
  Resolution r = model.resolve(stores);
  if (!r.version) {
    refusal = error_response(503, r.not_ready);
    return nullptr;
  }
  if (!version.empty() && version != std::to_string(r.version->record.version)) {
    refusal = error_response(404, model.name() + " is answered by version " +
                                      std::to_string(r.version->record.version) + ", not version " + version);
    return nullptr;
  }
  return r.version;
}

}  // namespace

HttpResponse Service::model_metadata(ServedModel& model, const std::string& version) {
  HttpResponse refusal;
  const std::shared_ptr<LoadedVersion> v = answerable(model, stores_, version, refusal);
  if (!v) return refusal;
  const runs::ModelFile& m = v->model;
  json inputs = json::array();
  if (v->shape.delimited) {
    for (const ColumnTransform& column : m.features.columns())
      inputs.push_back({{"name", column.column}, {"datatype", datatype_of(m, column)}, {"shape", {-1}}});
  } else {
    inputs.push_back({{"name", "input"}, {"datatype", "FP32"}, {"shape", {-1, v->shape.raw_width}}});
  }
  json outputs = json::array();
  json parameters{{"model", v->record.ref()},
                  {"kind", std::string(runs::model_kind(m).name())},
                  {"precision", runs::model_kind(m).precision(m)},
                  {"created_at", v->record.created_at}};
  if (m.labels.classification()) {
    outputs.push_back({{"name", "prediction"}, {"datatype", "BYTES"}, {"shape", {-1}}});
    outputs.push_back({{"name", "probabilities"}, {"datatype", "FP32"}, {"shape", {-1, m.labels.classes()}}});
    parameters["class_names"] = m.labels.class_names();
  } else {
    outputs.push_back({{"name", "prediction"}, {"datatype", "FP64"}, {"shape", {-1}}});
  }
  HttpResponse r = json_response(200, json{{"name", model.name()},
                                           {"versions", {std::to_string(v->record.version)}},
                                           {"platform", "anneal"},
                                           {"inputs", inputs},
                                           {"outputs", outputs},
                                           {"parameters", parameters}});
  add_version_header(r, *v);
  return r;
}

HttpResponse Service::model_ready(ServedModel& model, const std::string& version) {
  HttpResponse refusal;
  const std::shared_ptr<LoadedVersion> v = answerable(model, stores_, version, refusal);
  if (!v) {
    json document = json::parse(refusal.body);
    document["name"] = model.name();
    document["ready"] = false;
    return json_response(refusal.status, document);
  }
  HttpResponse r = json_response(
      200, json{{"name", model.name()}, {"ready", true}, {"version", std::to_string(v->record.version)}});
  add_version_header(r, *v);
  return r;
}

void Service::submit(const std::shared_ptr<LoadedVersion>& version, const ServedModel& model, BatchJob job) {
  if (version->batcher.submit(std::move(job), metrics_, model.name())) run_batches(version, model.name());
}

void Service::run_batches(const std::shared_ptr<LoadedVersion>& version, const std::string& name) {
  // One batch now; the next, if any, after whatever else the threads have
  // to do (reading requests, answering them), so a busy model cannot keep
  // a thread from its connections.
  if (version->batcher.run_batch(version->model, *version->predictor, metrics_, name))
    post_([this, version, name] { run_batches(version, name); });
}

void Service::infer(ServedModel& model, const std::string& version, const HttpRequest& request,
                    const std::shared_ptr<Responder>& out) {
  HttpResponse refusal;
  const std::shared_ptr<LoadedVersion> v = answerable(model, stores_, version, refusal);
  if (!v) return out->send(std::move(refusal));
  const DecodedRows rows = decode_infer_request(request.body, v->shape, options_.limits.max_rows);
  // A request in flight, holding the version it resolved to: a test stops
  // it here while an alias moves (serve_alias_test).
  fault_point("serve.answering");
  runs::PreparedRows prepared = prepare(*v, rows);
  BatchJob job;
  job.rows = prepared.rows;
  job.x = std::move(prepared.x);
  job.done = [&model, v, out, id = rows.request_id, counts = prepared.counts, n = prepared.rows](
                 std::span<const float> predictions, std::exception_ptr error) {
    if (error) return out->fail(error);
    try {
      HttpResponse r;
      r.body = infer_answer(model, *v, id, Answered{n, predictions, counts});
      add_version_header(r, *v);
      out->send(std::move(r));
    } catch (...) {
      out->fail(std::current_exception());
    }
  };
  submit(v, model, std::move(job));
}

void Service::invocations(ServedModel& model, const HttpRequest& request, const std::shared_ptr<Responder>& out) {
  HttpResponse refusal;
  const std::shared_ptr<LoadedVersion> v = answerable(model, stores_, "", refusal);
  if (!v) return out->send(std::move(refusal));
  const std::string type = header_of(request.content_type);
  DecodedRows rows;
  if (type == "text/csv") rows = decode_csv_body(request.body, v->shape, options_.limits.max_rows);
  else if (type == "application/json" || type.empty())
    rows = decode_mlflow_json(request.body, v->shape, options_.limits.max_rows);
  else
    throw RequestError(415, "Content-Type '" + type + "' is not one this route reads (application/json or text/csv)");
  runs::PreparedRows prepared = prepare(*v, rows);
  const bool csv = header_of(request.accept) == "text/csv";
  BatchJob job;
  job.rows = prepared.rows;
  job.x = std::move(prepared.x);
  job.done = [&model, v, out, csv, counts = prepared.counts, n = prepared.rows](std::span<const float> predictions,
                                                                               std::exception_ptr error) {
    if (error) return out->fail(error);
    try {
      HttpResponse r;
      if (csv) {
        r.content_type = "text/csv";
        r.body = runs::prediction_csv(v->model, predictions, n);
      } else {
        r.body = mlflow_answer(model, *v, Answered{n, predictions, counts});
      }
      add_version_header(r, *v);
      out->send(std::move(r));
    } catch (...) {
      out->fail(std::current_exception());
    }
  };
  submit(v, model, std::move(job));
}

}  // namespace anneal::serve
