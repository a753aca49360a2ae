// Fault points as test builds have them: ANNEAL_FAULT decides what happens at
// each named point. See fault_point.h for the syntax and the actions.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "anneal/error.h"
#include "anneal/fault_point.h"

namespace anneal {
namespace {

struct Rule {
  std::string point;  // exact name, or a prefix when `prefix`
  bool prefix = false;
  long hit = 1;       // fire on this hit of the point
  std::string action;
};

[[noreturn]] void bad_spec(const std::string& spec, const std::string& why) {
  std::fprintf(stderr, "anneal: ANNEAL_FAULT '%s': %s\n", spec.c_str(), why.c_str());
  std::abort();
}

std::vector<Rule> parse_rules(const char* text) {
  std::vector<Rule> rules;
  if (text == nullptr) return rules;
  const std::string spec(text);
  std::size_t start = 0;
  while (start <= spec.size()) {
    std::size_t end = spec.find(';', start);
    if (end == std::string::npos) end = spec.size();
    const std::string item = spec.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) bad_spec(spec, "expected POINT[@N]=ACTION, found '" + item + "'");
    Rule rule;
    rule.point = item.substr(0, eq);
    rule.action = item.substr(eq + 1);
    if (const std::size_t at = rule.point.rfind('@'); at != std::string::npos) {
      const std::string count = rule.point.substr(at + 1);
      char* rest = nullptr;
      rule.hit = std::strtol(count.c_str(), &rest, 10);
      if (count.empty() || *rest != '\0' || rule.hit < 1) bad_spec(spec, "hit count '" + count + "' is not a number >= 1");
      rule.point.resize(at);
    }
    if (!rule.point.empty() && rule.point.back() == '*') {
      rule.prefix = true;
      rule.point.pop_back();
    }
    static const char* const kActions[] = {"crash", "segv", "abort", "fail", "enospc", "pause"};
    bool known = false;
    for (const char* a : kActions) known = known || rule.action == a;
    if (!known) bad_spec(spec, "unknown action '" + rule.action + "' (crash, segv, abort, fail, enospc, pause)");
    rules.push_back(rule);
  }
  return rules;
}

// The rules and the per-point hit counts of this process. Test builds only:
// the one piece of process-wide state in anneal, because a fault plan is a
// property of the process the test started, not of any object in it.
struct Plan {
  std::vector<Rule> rules = parse_rules(std::getenv("ANNEAL_FAULT"));
  std::mutex mutex;
  std::map<std::string, long, std::less<>> hits;
};

Plan& plan() {
  static Plan the_plan;
  return the_plan;
}

void die_by(int sig) {
  // The default action, whatever handler a sanitizer or the runtime set.
  std::signal(sig, SIG_DFL);
  std::raise(sig);
  std::_Exit(128 + sig);
}

// The FIFO `name` a pause at `point` meets: in $ANNEAL_FAULT_DIR/POINT/
// when the test made that directory (two threads of one process paused at
// once, each released on its own), else in $ANNEAL_FAULT_DIR.
std::string fifo_path(std::string_view point, const char* name) {
  const char* dir = std::getenv("ANNEAL_FAULT_DIR");
  if (dir == nullptr || *dir == '\0') {
    std::fprintf(stderr, "anneal: ANNEAL_FAULT pause needs ANNEAL_FAULT_DIR (holding FIFOs 'reached' and 'resume')\n");
    std::abort();
  }
  const std::string own = std::string(dir) + "/" + std::string(point);
  struct stat st;
  if (::stat(own.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return own + "/" + name;
  return std::string(dir) + "/" + name;
}

int open_retrying(const std::string& path, int flags) {
  for (;;) {
    int fd = ::open(path.c_str(), flags | O_CLOEXEC);
    if (fd >= 0 || errno != EINTR) return fd;
  }
}

// Tells the test where the process is and waits for its go-ahead.
void pause_at(std::string_view point) {
  const std::string reached = fifo_path(point, "reached"), resume = fifo_path(point, "resume");
  int out = open_retrying(reached, O_WRONLY);
  if (out < 0) {
    std::perror(reached.c_str());
    std::abort();
  }
  const std::string line = std::string(point) + " " + std::to_string(::getpid()) + "\n";
  [[maybe_unused]] ssize_t written = ::write(out, line.data(), line.size());
  ::close(out);
  int in = open_retrying(resume, O_RDONLY);
  if (in < 0) {
    std::perror(resume.c_str());
    std::abort();
  }
  char buffer[64];
  for (;;) {  // until the test closes its end
    const ssize_t n = ::read(in, buffer, sizeof buffer);
    if (n > 0 || (n < 0 && errno == EINTR)) continue;
    break;
  }
  ::close(in);
}

}  // namespace

void fault_point(std::string_view name) {
  Plan& p = plan();
  if (p.rules.empty()) return;
  std::string action;
  {
    std::lock_guard lock(p.mutex);
    auto it = p.hits.find(name);
    if (it == p.hits.end()) it = p.hits.emplace(std::string(name), 0).first;
    const long hit = ++it->second;
    for (const Rule& rule : p.rules) {
      const bool matches = rule.prefix ? name.substr(0, rule.point.size()) == rule.point : name == rule.point;
      if (matches && rule.hit == hit) {
        action = rule.action;
        break;
      }
    }
  }
  if (action.empty()) return;
  if (action == "crash") die_by(SIGKILL);
  if (action == "segv") die_by(SIGSEGV);
  if (action == "abort") die_by(SIGABRT);
  if (action == "fail") throw failure("fault point " + std::string(name) + ": injected failure");
  if (action == "enospc") throw failure("fault point " + std::string(name) + ": write failed: " + std::strerror(ENOSPC));
  pause_at(name);
}

}  // namespace anneal
