#include "serve/metrics.h"

#include <cmath>
#include <sstream>

#include "anneal/jobs.h"

namespace anneal::serve {
namespace {

template <std::size_t N, class H>
void add(H& h, const std::array<double, N>& bounds, double value) {
  std::size_t i = 0;
  while (i < N && value > bounds[i]) ++i;
  if (i < N) ++h.counts[i];
  ++h.count;
  h.sum += value;
}

template <std::size_t N, class H>
void write_histogram(std::ostringstream& out, const std::string& name, const std::string& label,
                     const std::string& value, const std::array<double, N>& bounds, const H& h) {
  const std::string labels = label + "=\"" + prometheus_label_value(value) + "\"";
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < N; ++i) {
    cumulative += h.counts[i];
    out << name << "_bucket{" << labels << ",le=\"" << bounds[i] << "\"} " << cumulative << "\n";
  }
  out << name << "_bucket{" << labels << ",le=\"+Inf\"} " << h.count << "\n";
  out << name << "_sum{" << labels << "} " << h.sum << "\n";
  out << name << "_count{" << labels << "} " << h.count << "\n";
}

}  // namespace

void Metrics::request(const std::string& route, int status, double seconds, const std::string& limit) {
  std::lock_guard lock(mutex_);
  ++requests_[{route, status}];
  if (status >= 400 && status < 500) ++refused_[limit.empty() ? "none" : limit];
  add(latency_[route], kLatencyBuckets, seconds);
}

void Metrics::batch(const std::string& model, std::uint64_t rows) {
  std::lock_guard lock(mutex_);
  add(batches_[model], kBatchBuckets, static_cast<double>(rows));
}

void Metrics::queued(const std::string& model, std::int64_t delta) {
  std::lock_guard lock(mutex_);
  queued_[model] += delta;
}

void Metrics::model_state(const std::string& model, int version, bool ready) {
  std::lock_guard lock(mutex_);
  models_[model] = {version, ready};
}

std::string Metrics::text() const {
  std::ostringstream out;
  out.precision(17);
  std::lock_guard lock(mutex_);
  out << "# HELP anneal_serve_requests_total Requests answered, by route and HTTP status code.\n"
         "# TYPE anneal_serve_requests_total counter\n";
  for (const auto& [key, n] : requests_)
    out << "anneal_serve_requests_total{route=\"" << prometheus_label_value(key.first) << "\",code=\"" << key.second << "\"} "
        << n << "\n";
  out << "# HELP anneal_serve_refused_total Requests refused with a 4xx status, by the limit they broke (none: "
         "another reason).\n"
         "# TYPE anneal_serve_refused_total counter\n";
  for (const auto& [limit, n] : refused_)
    out << "anneal_serve_refused_total{limit=\"" << prometheus_label_value(limit) << "\"} " << n << "\n";
  out << "# HELP anneal_serve_request_duration_seconds Time from a request read whole to its answer made, by "
         "route.\n"
         "# TYPE anneal_serve_request_duration_seconds histogram\n";
  for (const auto& [route, h] : latency_)
    write_histogram(out, "anneal_serve_request_duration_seconds", "route", route, kLatencyBuckets, h);
  out << "# HELP anneal_serve_batch_rows Rows per forward pass, by model.\n"
         "# TYPE anneal_serve_batch_rows histogram\n";
  for (const auto& [model, h] : batches_) write_histogram(out, "anneal_serve_batch_rows", "model", model, kBatchBuckets, h);
  out << "# HELP anneal_serve_queued_rows Rows waiting for a forward pass, by model.\n"
         "# TYPE anneal_serve_queued_rows gauge\n";
  for (const auto& [model, rows] : queued_)
    out << "anneal_serve_queued_rows{model=\"" << prometheus_label_value(model) << "\"} " << rows << "\n";
  out << "# HELP anneal_serve_model_version The model version answering for each served model (0 when none).\n"
         "# TYPE anneal_serve_model_version gauge\n";
  for (const auto& [model, state] : models_)
    out << "anneal_serve_model_version{model=\"" << prometheus_label_value(model) << "\"} " << state.first << "\n";
  out << "# HELP anneal_serve_model_ready Whether each served model can answer (1) or not (0).\n"
         "# TYPE anneal_serve_model_ready gauge\n";
  for (const auto& [model, state] : models_)
    out << "anneal_serve_model_ready{model=\"" << prometheus_label_value(model) << "\"} " << (state.second ? 1 : 0) << "\n";
  out << "# HELP anneal_serve_connections Open connections.\n"
         "# TYPE anneal_serve_connections gauge\n"
         "anneal_serve_connections "
      << connections_.load() << "\n";
  return out.str();
}

}  // namespace anneal::serve
