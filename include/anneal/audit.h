// The audit trail: one hash-chained record per change a command makes to the
// store, written in the same catalog transaction as the change itself. See
// docs/STORE.md ("Audit trail") for the record's canonical byte encoding,
// which anyone can use to verify the chain without anneal.
//
// store/ knows nothing of command lines: whoever starts the process (cli/)
// names the actor in the StoreAccess it opens stores with (anneal/store.h),
// and each store records its changes as that actor.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace anneal {

class Store;

struct AuditActor {
  std::string user;     // the effective OS user's name ("uid N" when it has none)
  std::string host;     // gethostname()
  std::string command;  // the command line, secrets already elided by the caller
};

// The effective user's name and the host name, with no command: the
// default actor (StoreAccess).
AuditActor current_user_actor();
// argv as one shell-quoted line for an actor's command: the program's path
// cut to its name, and the value of every flag (--key-file F, --key-file=F)
// and KEY=VALUE word (--set encryption.key=V) whose name contains key,
// password, passphrase, passwd, secret, token or credential replaced by
// <elided>. Short flags (-k V) are not recognised: secrets take long flags.
std::string audit_command_line(const std::vector<std::string>& argv);

struct AuditRecord {
  std::int64_t seq = 0;   // 1, 2, 3, ... with no gaps
  std::string at;         // ISO 8601 UTC, as every catalog timestamp
  std::string user;
  std::string host;
  std::string command;
  std::string action;     // what changed: "dataset.import", "model.register", ...
  std::string detail;     // a JSON object: the ids and hashes of what changed
  std::string prev_hash;  // the previous record's hash; 64 zeros for record 1
  std::string hash;       // hex BLAKE2b-256 of audit_encoding(*this)
};

// The hash of the record before the first one.
const std::string& audit_genesis_hash();
// The canonical bytes a record's hash is taken over (docs/STORE.md).
std::string audit_encoding(const AuditRecord& record);
// hex(BLAKE2b-256(audit_encoding(record))), ignoring record.hash.
std::string audit_record_hash(const AuditRecord& record);

// Every record, by seq.
std::vector<AuditRecord> audit_log(Store& store);

// Appends the record of an admin action that changes who may use the
// store's models rather than the catalog (`anneal serve` starting, taking
// new tokens, stopping: docs/SERVING.md), in a BEGIN IMMEDIATE transaction
// of its own, as the actor `store` was opened with. `action` names it
// ("serve.start"); `detail` is a JSON object saying what, never a secret.
// Throws what a catalog write throws (kBusy when another writer holds the
// catalog past the busy timeout, kCorrupt without the head row).
void record_audit_action(Store& store, std::string_view action, const nlohmann::json& detail);

struct AuditHead {
  std::int64_t count = 0;
  std::string hash;  // the last record's hash; the genesis hash when count is 0
};

struct AuditVerdict {
  std::int64_t records = 0;            // records verified before the first bad one (all when ok)
  std::optional<AuditHead> head;       // as the catalog's head row says; none when it is missing
  std::optional<std::int64_t> bad_seq; // the first bad record, when one is named
  std::string problem;                 // empty when the chain verifies
  // Empty, or a change the store shows and the chain lacks: STORE/encryption
  // names another key (or none) than the last store.encrypt or store.rekey
  // record. The key switch is a file and the record a catalog row, so they
  // cannot commit together: an encrypt or rekey killed between the two
  // leaves this, and running it again records it (docs/STORE.md). Not a
  // damaged chain: ok() does not look at it; `audit verify` fails on it,
  // fsck lists it as a finding.
  std::string unrecorded;
  bool ok() const { return problem.empty(); }
};

// Checks the chain: seqs run 1..N without gaps, each record's hash matches
// its contents and names the record before it, and the head row (count and
// last hash, updated in each record's transaction) matches the last record.
// With expect_head (a hash noted earlier, e.g. from `anneal audit verify`),
// also checks that a record with that hash is still in the chain, which
// catches a truncation that rewrote the head row too. Reads only.
// Also compares the store's encryption state with the chain (unrecorded).
AuditVerdict verify_audit(Store& store, const std::optional<std::string>& expect_head = std::nullopt);

// The key check (64 hex digits) of the key the last store.encrypt or
// store.rekey record says the store is encrypted with; empty when no such
// record exists.
std::string audit_recorded_key_check(Store& store);

}  // namespace anneal
