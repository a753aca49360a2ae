// The audit trail from the command line: who anneal acts for (the actor
// every store change is recorded under) and the `audit` commands.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <iostream>

#include "anneal/audit.h"
#include "anneal/error.h"
#include "anneal/hash.h"
#include "anneal/store.h"
#include "command.h"
#include "output.h"

namespace anneal::cli {
namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

// The audit commands read the catalog alone, which is not encrypted: they
// need no key, so whoever audits a store need not be able to read its data.
int run_audit_log(const Invocation& inv) {
  Store store = Store::open_catalog(inv.global.store, inv.global.access);
  const std::vector<AuditRecord> records = audit_log(store);
  if (inv.global.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const AuditRecord& r : records) {
      nlohmann::json detail;
      try {
        detail = nlohmann::json::parse(r.detail);
      } catch (const std::exception&) {
        detail = r.detail;  // a damaged record is shown as stored; audit verify names it
      }
      out.push_back({{"seq", r.seq},       {"at", r.at},         {"user", r.user},
                     {"host", r.host},     {"command", r.command}, {"action", r.action},
                     {"detail", detail},   {"prev_hash", r.prev_hash}, {"hash", r.hash}});
    }
    print_json({{"records", out}});
    return kExitOk;
  }
  // Every field as recorded, escaped: a command line holds whatever file
  // names and values it was given, and a record must not pose as another.
  for (const AuditRecord& r : records)
    std::cout << r.seq << "  " << terminal_text(r.at) << "  " << terminal_text(r.user) << "@" << terminal_text(r.host)
              << "  " << terminal_text(r.action) << "  " << terminal_text(r.detail) << "\n    "
              << terminal_text(r.command) << "\n";
  return kExitOk;
}

int run_audit_verify(const Invocation& inv) {
  std::optional<std::string> expect;
  if (inv.args.count("expect-head")) {
    expect = lower(inv.args["expect-head"].as<std::string>());
    if (!is_hex_digest(*expect))
      throw usage_error("--expect-head '" + inv.args["expect-head"].as<std::string>() +
                        "': expected a record hash of 64 hex digits");
  }
  Store store = Store::open_catalog(inv.global.store, inv.global.access);
  const AuditVerdict v = verify_audit(store, expect);
  // A change the chain lacks (an encrypt or rekey killed before its record)
  // fails the check too, though the chain itself is intact.
  const bool complete = v.unrecorded.empty();
  if (inv.global.json) {
    nlohmann::json out = {{"ok", v.ok() && complete}, {"records", v.records}};
    out["head"] = v.head ? nlohmann::json(v.head->hash) : nlohmann::json(nullptr);
    out["bad_record"] = v.bad_seq ? nlohmann::json(*v.bad_seq) : nlohmann::json(nullptr);
    out["problem"] = v.ok() ? nlohmann::json(nullptr) : nlohmann::json(v.problem);
    out["unrecorded"] = complete ? nlohmann::json(nullptr) : nlohmann::json(v.unrecorded);
    print_json(out);
    return v.ok() && complete ? kExitOk : kExitFailure;
  }
  // A broken chain is a damaged store: the same error path (one line on
  // stderr, exit 1) as any other corruption.
  if (!v.ok()) throw corrupt(v.problem);
  if (!complete) throw failure(v.unrecorded);
  std::cout << "audit chain ok: " << v.records << " records, head " << v.head->hash << "\n";
  return kExitOk;
}

}  // namespace

void add_audit_commands(std::vector<Command>& out) {
  out.push_back({"audit log", "[--json]", "show the audit trail: every change made to the store, and by whom",
                 "One record per change (import, train, quantize, prune, alias set, promote, rollback, gc, "
                 "job submit, cancel and retry, retrain, encrypt and rekey): when, the OS user and host, the command line "
                 "(values of flags and keys that name keys, passwords, tokens or secrets elided), the "
                 "action and the ids and hashes it changed. Each record holds the hash of the one "
                 "before it (docs/STORE.md).",
                 nullptr, {}, run_audit_log});
  out.push_back({"audit verify", "[--expect-head HASH]", "check the audit trail's hash chain",
                 "Recomputes every record's hash and checks that each names the one before it, that "
                 "the records run 1..N without gaps and that the chain's head (count and last hash, "
                 "kept in its own row) matches the last record. Exits 1 naming the first bad record "
                 "when a record was edited, deleted, reordered or added by hand. Keep the printed head "
                 "hash somewhere else and pass it to --expect-head later to catch a truncation that "
                 "also rewrote the head row. Also exits 1 when the store is encrypted with a key that no "
                 "store.encrypt or store.rekey record names (one killed before its record: running it "
                 "again records it). Reads only the catalog, so neither this nor 'audit log' needs the "
                 "key of an encrypted store.",
                 [](po::options_description& o) {
                   o.add_options()("expect-head", po::value<std::string>()->value_name("HASH"),
                                   "a head hash printed earlier: fail unless a record still has it");
                 },
                 {}, run_audit_verify});
}

}  // namespace anneal::cli
