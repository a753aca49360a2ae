// Appending to the audit trail (anneal/audit.h), for store/ only.
#pragma once

#include <nlohmann/json.hpp>

#include <string_view>

#include "sqlite.h"

namespace anneal {

class Store;

// Appends the record of a change to the chain, as the actor `store` was
// opened with (StoreAccess). Must be called inside the sql::Transaction on
// store.db() that makes the change, so the
// change and its record commit (or roll back) together; the transaction is
// BEGIN IMMEDIATE, so no other writer can append between reading the head
// and writing the new one. Throws kCorrupt when the head row is missing.
void append_audit(Store& store, std::string_view action, const nlohmann::json& detail);

// The key_check of the last store.encrypt or store.rekey record; empty when
// there is none (or it names none).
std::string recorded_key_check(sql::Database& db);

}  // namespace anneal
