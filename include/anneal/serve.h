// `anneal serve`: a store's models answering other programs over HTTP/1.1
// (Boost.Beast), in the protocols their clients already speak: the Open
// Inference Protocol (KServe V2 REST) and MLflow's scoring format.
// docs/SERVING.md documents the routes, formats, limits and roles.
//
// Each served model is a model reference (NAME@ALIAS, NAME@vN or NAME),
// resolved in the catalog again for every request: when an alias moves, the
// next request is answered by the version it points at now, while requests
// already running finish on the version they started with (a loaded version
// is held by shared_ptr for as long as a request uses it). A model whose
// version cannot be loaded (a damaged object, an unknown kind) is not ready,
// and says why, while the others serve.
//
// Rows are read, validated and preprocessed by anneal/prediction.h, what
// `anneal predict` runs, so a row's answer is predict's, byte for byte.
//
// Defined in src/serve/. Knows nothing of the command line: cli/ turns
// flags into ServeOptions.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "anneal/catalog_runs.h"
#include "anneal/device.h"
#include "anneal/store.h"

namespace anneal::serve {

// What one request may ask for. A request that breaks a limit is refused
// with a 4xx JSON error whose "limit" names it (docs/SERVING.md, "Limits").
struct ServeLimits {
  std::uint64_t max_body_bytes = std::uint64_t{16} << 20;   // "body_bytes": 413
  std::uint64_t max_rows = 10000;                           // "rows": 413
  std::uint32_t max_header_bytes = 16u << 10;               // "header_bytes": 431
  std::size_t max_connections = 256;                        // "connections": 429, then closed
  std::chrono::milliseconds request_time{30000};            // "request_time": 408, then closed
};

// One structured log event: a level ("info", "warning", "error"), a
// message, and fields (a JSON object's text, "{}" when none).
using ServeLog = std::function<void(std::string_view level, std::string_view message, std::string_view fields)>;

struct ServeOptions {
  std::filesystem::path store;   // the store's root
  StoreAccess access;            // the audit actor and key file every Store::open gets
  // The models to serve; empty: every alias set in the store when the
  // server starts (kUsage when there is none).
  std::vector<ModelRef> models;
  std::string bind_address = "127.0.0.1";  // IPv4 or IPv6 literal
  std::uint16_t port = 0;                  // 0: a free port (Server::port() says which)
  // The owner-only file of bearer tokens, one "ROLE TOKEN" per line (ROLE
  // predict or admin); none: every request is allowed, which is refused
  // unless the address is a loopback one.
  std::optional<std::filesystem::path> tokens_file;
  ServeLimits limits;
  // Batching: requests for one model version that arrive while a forward
  // pass runs (or within max_batch_wait of the first of them) share the
  // next pass, up to max_batch_rows rows; a request of more rows runs alone.
  // With max_batch_rows 1 every request has its own passes, predict's.
  std::size_t max_batch_rows = 256;
  std::chrono::microseconds max_batch_wait{0};
  // HTTPS: a PEM certificate chain and its PEM private key (both or
  // neither); TLS 1.2 and later.
  std::optional<std::filesystem::path> tls_certificate, tls_key;
  int io_threads = 2;            // threads answering requests
  BackendOptions compute;        // the backend each model version predicts on
  ServeLog log;                  // where events go; empty: nowhere
};

class Server {
 public:
  // Opens the store, resolves and loads every model (one that fails to
  // load is logged and served as not ready), reads the tokens file and
  // listens on bind_address:port. Throws anneal::Error: kUsage for an
  // address that is not an IP literal, a tokens file that is not owner-only
  // or is malformed (Subject::kTokensFile), no token with a non-loopback
  // address, no model to serve, a TLS certificate or key that cannot be
  // read or do not match; kNotFound for a model reference that names
  // no model at all; kFailure when the address cannot be listened on.
  explicit Server(ServeOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The port listened on (the one chosen when options.port was 0).
  std::uint16_t port() const;
  // The served models' names as requests address them ("iris@production").
  std::vector<std::string> model_names() const;

  // Answers requests on options.io_threads threads (forward passes run on
  // them too) until stop() or SIGTERM or SIGINT: then accepts no more
  // connections, lets the requests in flight finish and be answered, and
  // returns. SIGHUP re-reads the tokens
  // file (a bad file is logged and the old tokens kept). Call once, from
  // one thread; the signals are handled while it runs.
  void run();
  // Asks run() to drain and return. Thread-safe; callable before run().
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace anneal::serve
