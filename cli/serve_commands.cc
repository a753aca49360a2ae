// `anneal serve`: flags into anneal::serve::ServeOptions, and the server's
// log on stderr. The server itself is src/serve/ (anneal/serve.h).
#include <chrono>
#include <cmath>
#include <iostream>
#include <mutex>

#include "anneal/error.h"
#include "anneal/serve.h"
#include "command.h"
#include "output.h"
#include "train_support.h"

namespace anneal::cli {
namespace {

constexpr std::uint64_t kDefaultBodyBytes = std::uint64_t{16} << 20;
constexpr std::uint64_t kDefaultRows = 10000;
constexpr std::uint64_t kDefaultHeaderBytes = 16 << 10;
constexpr std::uint64_t kDefaultConnections = 256;
constexpr double kDefaultRequestSeconds = 30;

std::uint64_t positive(const Invocation& inv, const char* flag, std::uint64_t fallback, std::uint64_t max) {
  if (!inv.args.count(flag)) return fallback;
  const long long v = inv.args[flag].as<long long>();
  if (v < 1 || static_cast<unsigned long long>(v) > max)
    throw usage_error(std::string("--") + flag + " must be in 1.." + std::to_string(max) + ", not " +
                      std::to_string(v));
  return static_cast<std::uint64_t>(v);
}

// The server's events on stderr: a line of text each, or (--log-format
// json) one JSON object per line with the event's fields.
serve::ServeLog stderr_log(LogFormat format) {
  auto mutex = std::make_shared<std::mutex>();
  return [format, mutex](std::string_view level, std::string_view message, std::string_view fields) {
    std::string line;
    if (format == LogFormat::kJson) {
      nlohmann::json document = nlohmann::json::parse(json_log_line(level, message));
      const nlohmann::json extra = nlohmann::json::parse(fields, nullptr, false);
      if (extra.is_object())
        for (auto it = extra.begin(); it != extra.end(); ++it) document.emplace(it.key(), it.value());
      line = document.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    } else {
      line = "anneal serve: " + (level == "info" ? std::string() : std::string(level) + ": ") +
             terminal_text(message) + "\n";
    }
    std::lock_guard lock(*mutex);
    std::cerr << line << std::flush;
  };
}

int run_serve(const Invocation& inv) {
  const auto& a = inv.args;
  serve::ServeOptions options;
  options.store = inv.global.store;
  options.access = inv.global.access;
  if (a.count("model"))
    for (const std::string& text : a["model"].as<std::vector<std::string>>())
      options.models.push_back(parse_model_ref(text, "--model"));
  options.bind_address = a["bind"].as<std::string>();
  const int port = a["port"].as<int>();
  if (port < 0 || port > 65535) throw usage_error("--port must be in 0..65535, not " + std::to_string(port));
  options.port = static_cast<std::uint16_t>(port);
  if (a.count("tokens")) options.tokens_file = std::filesystem::absolute(a["tokens"].as<std::string>());
  options.limits.max_body_bytes = positive(inv, "max-body-bytes", kDefaultBodyBytes, std::uint64_t{1} << 32);
  options.limits.max_rows = positive(inv, "max-rows", kDefaultRows, std::uint64_t{1} << 24);
  options.limits.max_header_bytes =
      static_cast<std::uint32_t>(positive(inv, "max-header-bytes", kDefaultHeaderBytes, 1u << 20));
  options.limits.max_connections =
      static_cast<std::size_t>(positive(inv, "max-connections", kDefaultConnections, 65536));
  const double seconds = a.count("request-timeout") ? a["request-timeout"].as<double>() : kDefaultRequestSeconds;
  if (!(seconds > 0 && seconds <= 3600))
    throw usage_error("--request-timeout must be more than 0 and at most 3600 seconds");
  options.limits.request_time = std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(seconds * 1000)));
  options.io_threads = static_cast<int>(positive(inv, "io-threads", 2, 256));
  options.max_batch_rows = static_cast<std::size_t>(positive(inv, "max-batch", 256, 65536));
  if (a.count("max-wait")) {
    const long long us = a["max-wait"].as<long long>();
    if (us < 0 || us > 1000000) throw usage_error("--max-wait must be in 0..1000000 microseconds, not " + std::to_string(us));
    options.max_batch_wait = std::chrono::microseconds(us);
  }
  if (a.count("tls-cert") != a.count("tls-key")) throw usage_error("--tls-cert and --tls-key go together");
  if (a.count("tls-cert")) {
    options.tls_certificate = std::filesystem::absolute(a["tls-cert"].as<std::string>());
    options.tls_key = std::filesystem::absolute(a["tls-key"].as<std::string>());
  }
  // --threads as predict has it (default: every core): the thread count is
  // part of what makes an answer predict's byte for byte (pruned models'
  // sparse kernel splits its sums by thread).
  options.compute = compute_options_of(inv);
  options.log = stderr_log(inv.global.log_format);

  serve::Server server(std::move(options));
  // The first line on stdout says where the server listens (a script
  // started with --port 0 reads the port from it).
  if (inv.global.json) {
    std::cout << nlohmann::json{{"address", a["bind"].as<std::string>()},
                                {"port", server.port()},
                                {"models", server.model_names()}}
                     .dump()
              << std::endl;
  } else {
    const std::string host = a["bind"].as<std::string>();
    const bool v6 = host.find(':') != std::string::npos;
    std::cout << "listening on " << (a.count("tls-cert") ? "https" : "http") << "://" << (v6 ? "[" + host + "]" : host) << ":" << server.port() << std::endl;
    for (const std::string& name : server.model_names()) std::cout << "serving " << terminal_text(name) << std::endl;
  }
  server.run();
  return kExitOk;
}

}  // namespace

void add_serve_commands(std::vector<Command>& out) {
  out.push_back(
      {"serve", "[--model NAME@ALIAS]... [--bind ADDR] [--port N] [--tokens FILE] [options]",
       "serve models over HTTP (Open Inference Protocol, MLflow scoring)",
       "Answers POST /v2/models/NAME@ALIAS/infer (KServe V2: named column tensors or one [N,F] FP32 tensor) and "
       "POST /invocations (MLflow: dataframe_split, dataframe_records or text/csv) with the class names, the "
       "probabilities and the model version that answered; GET /v2/health/live, /v2/health/ready, "
       "/v2/models/NAME[/versions/V] and .../ready. Rows are read and preprocessed as 'anneal predict' reads a "
       "file, so the answers are predict's. Without --model every alias set in the store is served. Each request "
       "resolves its model's alias again: after 'anneal model promote', retrain or rollback the next request is "
       "answered by the new version, requests in flight finish on the old one. A model that cannot be loaded "
       "answers 503 with the reason while the others serve. Listens on 127.0.0.1 unless --bind says otherwise "
       "(another address needs --tokens); prints 'listening on http://ADDR:PORT' as its first line. The tokens "
       "file is owner-only, one 'ROLE TOKEN' per line: predict (infer, readiness) or admin (also model "
       "metadata); requests then carry 'Authorization: Bearer TOKEN'. A request over a limit gets a 4xx JSON "
       "error whose \"limit\" names it. SIGTERM or SIGINT: the requests in flight are answered, then exit 0; "
       "SIGHUP: the tokens file is read again. The start, each reload that takes effect and the stop are "
       "recorded in the audit trail (anneal audit log), with how many tokens of each role, never a token. "
       "docs/SERVING.md has the details.",
       [](po::options_description& o) {
         o.add_options()
             ("model", po::value<std::vector<std::string>>()->value_name("NAME@ALIAS"),
              "a model to serve (repeatable; NAME@vN and NAME too); default: every alias of the store")
             ("bind", po::value<std::string>()->value_name("ADDR")->default_value("127.0.0.1"),
              "the address to listen on (an IPv4 or IPv6 literal)")
             ("port", po::value<int>()->value_name("N")->default_value(8080), "the port; 0 picks a free one")
             ("tokens", po::value<std::string>()->value_name("FILE"),
              "owner-only file of bearer tokens, 'ROLE TOKEN' per line (ROLE predict or admin)")
             ("max-body-bytes", po::value<long long>()->value_name("N"), "request body limit (default 16777216)")
             ("max-rows", po::value<long long>()->value_name("N"), "rows per request (default 10000)")
             ("max-header-bytes", po::value<long long>()->value_name("N"), "request header limit (default 16384)")
             ("max-connections", po::value<long long>()->value_name("N"), "open connections (default 256)")
             ("request-timeout", po::value<double>()->value_name("SECONDS"),
              "time to receive a request, and to send its answer (default 30)")
             ("max-batch", po::value<long long>()->value_name("ROWS"),
              "rows of concurrent requests for one model coalesced into one forward pass (default 256; 1: none)")
             ("max-wait", po::value<long long>()->value_name("MICROSECONDS"),
              "how long a batch that is not full waits for more requests (default 0: it takes what has arrived)")
             ("tls-cert", po::value<std::string>()->value_name("FILE"), "PEM certificate chain: serve HTTPS")
             ("tls-key", po::value<std::string>()->value_name("FILE"), "PEM private key of --tls-cert")
             ("io-threads", po::value<long long>()->value_name("N"),
              "threads reading, answering and predicting (default 2)")
             ("threads", po::value<int>()->value_name("N"), "compute threads of a forward pass (default: all cores)");
         add_compute_options(o, false);
       },
       {},
       run_serve});
}

}  // namespace anneal::cli
