// Promotion gates and alias moves: parse_gate, evaluate_gate, promote_model.
#include <pwd.h>
#include <unistd.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <sstream>

#include "anneal/error.h"
#include "anneal/jobs.h"

namespace anneal {
namespace {

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

bool compare(double a, const std::string& op, double b) {
  if (op == ">=") return a >= b;
  if (op == ">") return a > b;
  if (op == "<=") return a <= b;
  if (op == "<") return a < b;
  if (op == "==") return a == b;
  return a != b;
}

std::string number_text(double v) {
  std::ostringstream out;
  out.precision(6);
  out << v;
  return out.str();
}

double metric_of(const ModelRecord& model, const std::string& metric, std::string_view what) {
  const auto& m = model.metrics;
  if (!m.contains(metric) || !m[metric].is_number()) {
    std::string known;
    for (const auto& [key, value] : m.items())
      if (value.is_number()) known += (known.empty() ? "" : ", ") + key;
    throw usage_error(std::string(what) + ": " + model.ref() + " has no metric '" + metric + "' (it has: " +
                      (known.empty() ? "none" : known) + ")");
  }
  return m[metric].get<double>();
}

}  // namespace

Gate parse_gate(std::string_view text, std::string_view what) {
  Gate gate;
  gate.text = trim(text);
  const std::string& s = gate.text;
  std::size_t at = s.find_first_of("<>=!");
  auto bad = [&](const std::string& why) {
    return usage_error(std::string(what) + " '" + s + "': " + why +
                       "; expected METRIC OP VALUE, OP one of >= > <= < == != and VALUE a number or an alias, "
                       "e.g. 'val_accuracy >= production'");
  };
  if (at == std::string::npos) throw bad("no comparison operator");
  std::size_t len = (at + 1 < s.size() && s[at + 1] == '=') ? 2 : 1;
  gate.op = s.substr(at, len);
  if (gate.op == "=" || gate.op == "!") throw bad("unknown operator '" + gate.op + "'");
  gate.metric = trim(std::string_view(s).substr(0, at));
  gate.rhs = trim(std::string_view(s).substr(at + len));
  if (gate.metric.empty()) throw bad("no metric before the operator");
  for (char c : gate.metric)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') throw bad("'" + gate.metric + "' is not a metric name");
  if (gate.rhs.empty()) throw bad("nothing after the operator");
  double value = 0;
  auto [end, ec] = std::from_chars(gate.rhs.data(), gate.rhs.data() + gate.rhs.size(), value);
  if (ec == std::errc() && end == gate.rhs.data() + gate.rhs.size() && std::isfinite(value)) {
    gate.constant = value;
  } else {
    try {
      validate_alias_name(gate.rhs);
    } catch (const Error&) {
      throw bad("'" + gate.rhs + "' is neither a number nor an alias");
    }
  }
  return gate;
}

GateVerdict evaluate_gate(Store& store, const Gate& gate, const ModelRecord& candidate) {
  const double value = metric_of(candidate, gate.metric, "gate");
  GateVerdict verdict;
  double against = 0;
  std::string against_text;
  if (gate.constant) {
    against = *gate.constant;
    against_text = number_text(against);
  } else {
    std::optional<ModelRecord> holder = find_alias(store, candidate.name, gate.rhs);
    if (!holder) {
      verdict.passed = true;
      verdict.reason = candidate.name + "@" + gate.rhs + " is not set, so there is nothing to beat";
      return verdict;
    }
    against = metric_of(*holder, gate.metric, "gate");
    against_text = number_text(against) + " (" + gate.rhs + ": " + holder->ref() + ")";
  }
  verdict.passed = compare(value, gate.op, against);
  verdict.reason = gate.metric + " " + number_text(value) + (verdict.passed ? " " : " not ") + gate.op + " " +
                   against_text;
  return verdict;
}

std::string acting_user() {
  std::string user;
  if (const passwd* pw = ::getpwuid(::geteuid()); pw && pw->pw_name) user = pw->pw_name;
  else user = "uid " + std::to_string(::geteuid());
  return user + "@" + host_name();
}

GateVerdict promote_model(Store& store, const ModelRecord& model, const std::string& alias,
                          const std::optional<Gate>& gate, const std::string& reason) {
  validate_alias_name(alias);
  GateVerdict verdict;
  verdict.passed = true;
  if (gate) verdict = evaluate_gate(store, *gate, model);
  if (!verdict.passed) return verdict;
  std::string why = reason;
  if (why.empty()) why = gate ? "gate " + gate->text + ": " + verdict.reason : "promoted";
  set_alias(store, model, alias, "promote", acting_user(), why);
  return verdict;
}

}  // namespace anneal
