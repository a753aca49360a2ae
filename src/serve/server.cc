// The HTTP/1.1 side of `anneal serve` (anneal/serve.h): Boost.Beast over
// Asio. Every connection is a chain of asynchronous operations on its own
// strand, so a connection that is slow to send holds no thread; the threads
// run the answers (service.cc) as requests complete.
#include <array>
#include <atomic>
#include <csignal>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
// Boost 1.74's asio/awaitable.hpp uses std::exchange without including
// <utility>, which C++20's headers no longer bring in by themselves.
#include <utility>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <nlohmann/json.hpp>

#include "anneal/error.h"
#include "anneal/serve.h"
#include "serve/service.h"

namespace anneal::serve {
namespace {

namespace asio = boost::asio;
namespace ssl = asio::ssl;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using nlohmann::json;

bool is_loopback(const asio::ip::address& address) { return address.is_loopback(); }

// A connection, whatever its stream: what draining and the connection
// limit see of it.
class Connection {
 public:
  virtual ~Connection() = default;
  virtual void drain() = 0;
};

// What every connection shares: the service, the limits, and the set of
// open connections (for the connection limit and for draining).
struct Shared {
  Shared(Service& service, const ServeLimits& limits, ServeLog log)
      : service(service), limits(limits), log(std::move(log)) {}
  Service& service;
  const ServeLimits& limits;
  ServeLog log;
  std::mutex mutex;
  std::set<std::shared_ptr<Connection>> sessions;  // open, counted against the limit
  bool draining = false;
};

http::response<http::string_body> to_beast(const HttpResponse& answer, unsigned version, bool keep_alive) {
  http::response<http::string_body> res{static_cast<http::status>(answer.status), version};
  res.set(http::field::server, "anneal");
  res.set(http::field::content_type, answer.content_type);
  for (const auto& [name, value] : answer.headers) res.set(name, value);
  res.body() = answer.body;
  res.keep_alive(keep_alive);
  res.prepare_payload();
  return res;
}

// One connection: plain TCP (Stream beast::tcp_stream) or TLS
// (beast::ssl_stream<beast::tcp_stream>).
template <class Stream>
class Session : public Connection, public std::enable_shared_from_this<Session<Stream>> {
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;
  using std::enable_shared_from_this<Session<Stream>>::shared_from_this;

 public:
  template <class... TlsContext>
  Session(tcp::socket socket, Shared& shared, TlsContext&... tls)
      : stream_(std::move(socket), tls...), deadline_(stream_.get_executor()), shared_(shared) {
    shared_.service.metrics().connection_opened();
  }
  ~Session() override { shared_.service.metrics().connection_closed(); }

  // Starts reading requests (counted: this connection is one of the open
  // ones), after the TLS handshake when there is one.
  void start() {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      if constexpr (kTls) {
        self->timed_out_ = false;
        self->arm_deadline();
        self->stream_.async_handshake(ssl::stream_base::server, [self](beast::error_code ec) {
          self->deadline_.cancel();
          if (ec) return self->close();  // not TLS, a bad certificate, too slow: nothing to answer
          self->read_header();
        });
      } else {
        self->read_header();
      }
    });
  }

  // Answers the first request's header with `refusal` and closes (over
  // the connection limit: not counted).
  void refuse(HttpResponse refusal) {
    refusal_ = std::make_unique<HttpResponse>(std::move(refusal));
    start();
  }

  // Draining: closes the connection if it is between requests; one that is
  // reading or answering a request closes after the answer.
  void drain() override {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      if (self->idle_) self->close();
    });
  }

 private:
  void read_header() {
    parser_.emplace();
    parser_->header_limit(shared_.limits.max_header_bytes);
    parser_->body_limit(shared_.limits.max_body_bytes);
    idle_ = true;
    timed_out_ = false;
    arm_deadline();
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
  }

  // The time limit for receiving the request, whole. When it passes the
  // read is cancelled (not the connection closed), so that the client can
  // still be told why.
  void arm_deadline() {
    deadline_.expires_after(shared_.limits.request_time);
    deadline_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec) return;  // cancelled: the request arrived in time
      self->timed_out_ = true;
      beast::error_code ignored;
      self->socket().cancel(ignored);
    });
  }

  void on_header(beast::error_code ec) {
    idle_ = false;
    if (ec) return on_read_error(ec);
    const auto& req = parser_->get();
    if (refusal_) {
      deadline_.cancel();
      return refuse_now(*refusal_, req.version());
    }
    if (const auto length = parser_->content_length(); length && *length > shared_.limits.max_body_bytes) {
      deadline_.cancel();
      return refuse_now(error_response(413,
                                    "the request body is " + std::to_string(*length) + " bytes; the limit is " +
                                        std::to_string(shared_.limits.max_body_bytes),
                                    "body_bytes"),
                        req.version());
    }
    if (beast::iequals(req[http::field::expect], "100-continue")) {
      auto proceed = std::make_shared<http::response<http::empty_body>>(http::status::continue_, req.version());
      http::async_write(stream_, *proceed, [self = shared_from_this(), proceed](beast::error_code ec, std::size_t) {
        if (ec) return self->close();
        self->read_body();
      });
      return;
    }
    read_body();
  }

  void read_body() {
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_request(ec); });
  }

  void on_read_error(beast::error_code ec) {
    deadline_.cancel();
    const bool got_some = parser_ && parser_->got_some();
    if (timed_out_) {
      if (!got_some) return close();  // an idle keep-alive connection: just closed
      return refuse_now(error_response(408,
                                       "the request was not received within " +
                                           std::to_string(shared_.limits.request_time.count()) + " ms",
                                       "request_time"),
                        11);
    }
    if (ec == http::error::end_of_stream || ec == asio::error::operation_aborted ||
        ec == asio::error::connection_reset || ec == asio::error::eof || !got_some)
      return close();
    if (ec == http::error::header_limit)
      return refuse_now(error_response(431,
                                       "the request's header is over the limit of " +
                                           std::to_string(shared_.limits.max_header_bytes) + " bytes",
                                       "header_bytes"),
                        11);
    if (ec == http::error::body_limit)
      return refuse_now(error_response(413,
                                       "the request body is over the limit of " +
                                           std::to_string(shared_.limits.max_body_bytes) + " bytes",
                                       "body_bytes"),
                        11);
    refuse_now(error_response(400, "a malformed HTTP request: " + ec.message()), 11);
  }

  // Answers a request refused before it was read whole (counted as such)
  // and closes.
  void refuse_now(const HttpResponse& answer, unsigned version) {
    std::string limit;
    const json document = json::parse(answer.body, nullptr, false);
    if (document.is_object() && document.contains("limit")) limit = document["limit"].get<std::string>();
    shared_.service.metrics().request("-", answer.status, 0, limit);
    respond(answer, version, false);
  }

  void on_request(beast::error_code ec) {
    if (ec) return on_read_error(ec);
    deadline_.cancel();
    const auto& req = parser_->get();
    HttpRequest request;
    const beast::string_view method = req.method_string(), target = req.target();
    request.method = std::string_view(method.data(), method.size());
    request.target = std::string_view(target.data(), target.size());
    auto header = [&](http::field field) {
      const beast::string_view v = req[field];
      return std::string_view(v.data(), v.size());
    };
    request.authorization = header(http::field::authorization);
    request.content_type = header(http::field::content_type);
    request.accept = header(http::field::accept);
    request.body = req.body();
    const unsigned version = req.version();
    const bool keep_alive = req.keep_alive();
    // The answer may come from another thread (the one that ran the
    // request's batch): it is written on this connection's strand, and the
    // work guard keeps run() from returning while it is awaited.
    auto guard = std::make_shared<asio::executor_work_guard<asio::any_io_executor>>(stream_.get_executor());
    shared_.service.handle(request, [self = shared_from_this(), version, keep_alive, guard](HttpResponse answer) {
      asio::post(self->stream_.get_executor(), [self, version, keep_alive, guard, answer = std::move(answer)] {
        bool keep = keep_alive;
        {
          std::lock_guard lock(self->shared_.mutex);
          if (self->shared_.draining) keep = false;
        }
        self->respond(answer, version, keep);
      });
    });
  }

  void respond(const HttpResponse& answer, unsigned version, bool keep_alive) {
    response_ = std::make_shared<http::response<http::string_body>>(to_beast(answer, version, keep_alive));
    // A client that does not read its answer is cut off after the same time.
    beast::get_lowest_layer(stream_).expires_after(shared_.limits.request_time);
    http::async_write(stream_, *response_, [self = shared_from_this(), keep_alive](beast::error_code ec, std::size_t) {
      beast::get_lowest_layer(self->stream_).expires_never();
      self->response_.reset();
      if (ec) return self->close();
      if (!keep_alive) return self->linger_close();
      self->read_header();
    });
  }

  // Closes after an answer that leaves the request unread (a refusal, a
  // body over the limit): the sending side first, then what the client is
  // still sending is read and dropped until it closes too (or the time
  // limit passes), so that its unread bytes do not reset the connection
  // before it has read the answer.
  void linger_close() {
    beast::error_code ignored;
    socket().shutdown(tcp::socket::shutdown_send, ignored);
    deadline_.expires_after(std::min<std::chrono::milliseconds>(shared_.limits.request_time, std::chrono::seconds(5)));
    deadline_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (!ec) self->close();
    });
    drop_input();
  }

  void drop_input() {
    if (!scratch_) scratch_ = std::make_unique<std::array<char, 16384>>();
    socket().async_read_some(asio::buffer(*scratch_), [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec) return self->close();
      self->drop_input();
    });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    deadline_.cancel();
    beast::error_code ignored;
    socket().shutdown(tcp::socket::shutdown_both, ignored);
    socket().close(ignored);
    std::lock_guard lock(shared_.mutex);
    shared_.sessions.erase(shared_from_this());
  }

  tcp::socket& socket() { return beast::get_lowest_layer(stream_).socket(); }

  Stream stream_;
  asio::steady_timer deadline_;
  Shared& shared_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<http::response<http::string_body>> response_;
  std::unique_ptr<HttpResponse> refusal_;
  std::unique_ptr<std::array<char, 16384>> scratch_;
  bool idle_ = true, timed_out_ = false, closed_ = false;
};

}  // namespace

struct Server::Impl {
  explicit Impl(ServeOptions o)
      : options(std::move(o)),
        io(std::max(1, options.io_threads)),
        service(options, [this](std::function<void()> work) { asio::post(io, std::move(work)); }),
        acceptor(asio::make_strand(io)),
        signals(io, SIGTERM, SIGINT, SIGHUP),
        shared(service, options.limits, options.log) {
    if (options.tls_certificate || options.tls_key) load_tls();
  }

  // The certificate chain and key, checked now: a server that cannot prove
  // itself does not start.
  void load_tls() {
    if (!options.tls_certificate || !options.tls_key)
      throw usage_error("HTTPS needs both a TLS certificate and its private key");
    tls.emplace(ssl::context::tls_server);
    tls->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                     ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
    beast::error_code ec;
    tls->use_certificate_chain_file(options.tls_certificate->string(), ec);
    if (ec)
      throw usage_error("the TLS certificate " + options.tls_certificate->string() +
                        " cannot be used: " + ec.message());
    tls->use_private_key_file(options.tls_key->string(), ssl::context::pem, ec);
    if (ec)
      throw usage_error("the TLS key " + options.tls_key->string() + " cannot be used: " + ec.message());
    if (SSL_CTX_check_private_key(tls->native_handle()) != 1)
      throw usage_error("the TLS key " + options.tls_key->string() + " is not the key of the certificate " +
                        options.tls_certificate->string());
  }

  void listen() {
    beast::error_code ec;
    const asio::ip::address address = asio::ip::make_address(options.bind_address, ec);
    if (ec)
      throw Error(ErrorKind::kUsage, Subject::kListenAddress,
                  "'" + options.bind_address + "' is not an IPv4 or IPv6 address");
    if (!options.tokens_file && !is_loopback(address))
      throw Error(ErrorKind::kUsage, Subject::kListenAddress,
                  options.bind_address +
                      " is reachable from other machines; serving there needs a tokens file (loopback "
                      "addresses alone may serve without one)");
    const tcp::endpoint endpoint(address, options.port);
    acceptor.open(endpoint.protocol(), ec);
    if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec)
      throw failure("cannot listen on " + options.bind_address + " port " + std::to_string(options.port) + ": " +
                    ec.message());
  }

  void accept() {
    acceptor.async_accept(asio::make_strand(io), [this](beast::error_code ec, tcp::socket socket) {
      if (ec) {
        if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;  // stopped
        if (options.log) options.log("warning", "accept failed: " + ec.message(), "{}");
        return accept();
      }
      if (tls) open_session(std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(std::move(socket), shared, *tls));
      else open_session(std::make_shared<Session<beast::tcp_stream>>(std::move(socket), shared));
      accept();
    });
  }

  template <class S>
  void open_session(const std::shared_ptr<S>& session) {
    bool over = false;
    {
      std::lock_guard lock(shared.mutex);
      if (shared.draining) return;  // the acceptor is closing
      over = shared.sessions.size() >= options.limits.max_connections;
      if (!over) shared.sessions.insert(session);
    }
    if (over)
      session->refuse(error_response(429,
                                     "the server holds its limit of " +
                                         std::to_string(options.limits.max_connections) + " connections",
                                     "connections"));
    else
      session->start();
  }

  void wait_for_signals() {
    signals.async_wait([this](beast::error_code ec, int signal) {
      if (ec) return;
      if (signal == SIGHUP) {
        try {
          service.reload_tokens();
          if (options.log) options.log("info", "the tokens file was read again", "{}");
        } catch (const std::exception& e) {
          if (options.log) options.log("error", std::string("the old tokens stay: ") + e.what(), "{}");
        }
        return wait_for_signals();
      }
      drain(signal == SIGTERM ? "SIGTERM" : "SIGINT");
    });
  }

  // No new connections; idle ones closed; busy ones closed after their
  // answer. io.run() returns once the last one has gone.
  void drain(std::string why) {
    asio::post(acceptor.get_executor(), [this, why] {
      std::set<std::shared_ptr<Connection>> open;
      {
        std::lock_guard lock(shared.mutex);
        if (shared.draining) return;
        shared.draining = true;
        open = shared.sessions;
      }
      service.set_draining();
      beast::error_code ignored;
      acceptor.close(ignored);
      signals.cancel(ignored);
      // The server stops answering: recorded, but a trail that cannot take
      // the record (a full disk) does not keep it answering.
      try {
        service.record("serve.stop", json{{"reason", why}, {"connections", open.size()}});
      } catch (const std::exception& e) {
        if (options.log) options.log("error", std::string("the stop could not be recorded: ") + e.what(), "{}");
      }
      // Said once no new connection can arrive.
      if (options.log)
        options.log("info", "draining: the requests in flight finish, then the server exits",
                    json{{"reason", why}, {"connections", open.size()}}.dump());
      for (const auto& session : open) session->drain();
    });
  }

  ServeOptions options;
  asio::io_context io;
  Service service;
  std::optional<ssl::context> tls;
  tcp::acceptor acceptor;
  asio::signal_set signals;
  Shared shared;
};

Server::Server(ServeOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  impl_->listen();
  // Listening: from now on the models are answered, to whom the tokens
  // say. A start the audit trail cannot show does not serve (the error
  // propagates and the acceptor closes with the server).
  impl_->service.record("serve.start", json{{"address", impl_->options.bind_address},
                                            {"port", port()},
                                            {"tls", impl_->tls.has_value()},
                                            {"models", impl_->service.model_names()},
                                            {"tokens", impl_->service.token_counts()}});
}

Server::~Server() = default;

std::uint16_t Server::port() const { return impl_->acceptor.local_endpoint().port(); }

std::vector<std::string> Server::model_names() const { return impl_->service.model_names(); }

void Server::run() {
  impl_->wait_for_signals();
  impl_->accept();
  std::vector<std::thread> threads;
  for (int i = 1; i < std::max(1, impl_->options.io_threads); ++i) threads.emplace_back([this] { impl_->io.run(); });
  impl_->io.run();
  for (std::thread& t : threads) t.join();
}

void Server::stop() { impl_->drain("stop"); }

}  // namespace anneal::serve
