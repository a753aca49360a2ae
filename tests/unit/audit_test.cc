// The audit trail (store/audit.cc): the canonical encoding its hashes are
// taken over, the chain a sequence of changes leaves, and what verify_audit
// reports for each way of tampering with it (edit, delete in the middle and
// at the end, reorder, an added record); appends from two threads at once;
// an old store migrated to a version with the trail.
#include <gtest/gtest.h>

#include <thread>

#include "anneal/audit.h"
#include "anneal/catalog_jobs.h"
#include "anneal/error.h"
#include "anneal/hash.h"
#include "anneal/store.h"
#include "sqlite.h"
#include "test_util.h"

namespace anneal {
namespace {

namespace fs = std::filesystem;

class AuditTest : public ::testing::Test {
 protected:
  void SetUp() override {
    test::init_store_with_dataset(root(), "iris", "iris.csv");
  }
  fs::path root() const { return dir_.path() / "store"; }
  static StoreAccess alice() {
    StoreAccess a;
    a.actor = {"alice", "box", "anneal test"};
    return a;
  }
  static JobSpec spec(const std::string& name) {
    JobSpec s;
    s.name = name;
    s.config_text = "name = " + name + "\n";
    s.config_source = name + ".ini";
    s.cores = 1;
    return s;
  }
  // The store with records 1 (the import) to 4 (three submits).
  Store four_records() {
    Store store = Store::open(root(), alice());
    for (const char* name : {"a", "b", "c"}) submit_job(store, spec(name), 100);
    return store;
  }
  test::TempDir dir_;
};

std::string le64(std::uint64_t n) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out;
}

TEST(AuditEncoding, IsTheDocumentedLengthPrefixedFields) {
  AuditRecord r{7, "2026-11-26T05:00:00Z", "bob", "h", "anneal gc", "gc", "{}", std::string(64, 'a'), ""};
  const std::string expected = "anneal-audit-v1\n" + le64(1) + "7" + le64(20) + "2026-11-26T05:00:00Z" + le64(3) +
                               "bob" + le64(1) + "h" + le64(9) + "anneal gc" + le64(2) + "gc" + le64(2) + "{}" +
                               le64(64) + std::string(64, 'a');
  EXPECT_EQ(audit_encoding(r), expected);
  EXPECT_EQ(audit_record_hash(r), to_hex(hash_bytes(expected)));
  // The stored hash is not part of what is hashed.
  r.hash = "anything";
  EXPECT_EQ(audit_record_hash(r), to_hex(hash_bytes(expected)));
  // Moving a byte from one field to the next changes the hash.
  AuditRecord shifted = r;
  shifted.user = "bo";
  shifted.host = "bh";
  EXPECT_NE(audit_record_hash(shifted), audit_record_hash(r));
}

TEST(AuditCommandLine, ElidesTheValuesOfSecretFlagsAndKeys) {
  EXPECT_EQ(audit_command_line({"/usr/bin/anneal", "data", "import", "iris", "/data/iris.csv"}),
            "anneal data import iris /data/iris.csv");
  EXPECT_EQ(audit_command_line({"anneal", "init", "--encrypt", "--key-file", "/etc/anneal.key", "--json"}),
            "anneal init --encrypt --key-file <elided> --json");
  EXPECT_EQ(audit_command_line({"anneal", "init", "--key-file=/etc/anneal.key"}), "anneal init --key-file=<elided>");
  EXPECT_EQ(audit_command_line({"anneal", "x", "--Password", "hunter 2", "--api-token=t0k"}),
            "anneal x --Password <elided> --api-token=<elided>");
  EXPECT_EQ(audit_command_line({"anneal", "train", "a b.ini", "--set", "encryption.key=abc", "--set", "lr=0.1"}),
            "anneal train 'a b.ini' --set encryption.key=<elided> --set lr=0.1");
  // rekey's second key file, both spellings.
  EXPECT_EQ(audit_command_line({"anneal", "--key-file", "/k/old", "rekey", "--new-key-file", "/k/new"}),
            "anneal --key-file <elided> rekey --new-key-file <elided>");
  EXPECT_EQ(audit_command_line({"anneal", "rekey", "--new-key-file=/k/new"}), "anneal rekey --new-key-file=<elided>");
  // A path holding '=' is not a KEY=VALUE word.
  EXPECT_EQ(audit_command_line({"anneal", "submit", "/tmp/token=1.ini"}), "anneal submit /tmp/token=1.ini");
  EXPECT_EQ(audit_command_line({"anneal", "jobs", "cancel", "it's"}), "anneal jobs cancel 'it'\\''s'");
}

TEST_F(AuditTest, EachChangeAppendsOneLinkedRecordAsItsStoresActor) {
  Store store = four_records();
  const std::vector<AuditRecord> log = audit_log(store);
  ASSERT_EQ(log.size(), 4u);
  EXPECT_EQ(log[0].action, "dataset.import");
  EXPECT_EQ(log[0].prev_hash, audit_genesis_hash());
  const auto detail = nlohmann::json::parse(log[0].detail);
  EXPECT_EQ(detail["dataset"], "iris");
  EXPECT_EQ(detail["version"], 1);
  EXPECT_TRUE(is_hex_digest(detail["streams"]["source"].get<std::string>()));
  // The import came through a store opened with the default access (this
  // process's user and host, no command line), the rest through alice's.
  const AuditActor me = current_user_actor();
  EXPECT_EQ(log[0].user, me.user);
  EXPECT_EQ(log[0].host, me.host);
  EXPECT_EQ(log[0].command, "");
  for (std::size_t i = 0; i < log.size(); ++i) {
    EXPECT_EQ(log[i].seq, static_cast<std::int64_t>(i + 1));
    if (i > 0) {
      EXPECT_EQ(log[i].user, "alice");
      EXPECT_EQ(log[i].host, "box");
      EXPECT_EQ(log[i].command, "anneal test");
    }
    EXPECT_EQ(log[i].hash, audit_record_hash(log[i]));
    if (i > 0) {
      EXPECT_EQ(log[i].prev_hash, log[i - 1].hash);
    }
  }
  EXPECT_EQ(log[3].action, "job.submit");
  EXPECT_EQ(nlohmann::json::parse(log[3].detail)["job"], 3);
  const AuditVerdict v = verify_audit(store);
  EXPECT_TRUE(v.ok()) << v.problem;
  EXPECT_EQ(v.records, 4);
  ASSERT_TRUE(v.head);
  EXPECT_EQ(v.head->count, 4);
  EXPECT_EQ(v.head->hash, log[3].hash);
}

TEST_F(AuditTest, AFailedChangeLeavesNoRecord) {
  Store store = four_records();
  // Retrying a queued job is refused inside its transaction: no record.
  EXPECT_THROW(retry_job(store, 1, 200), Error);
  EXPECT_EQ(audit_log(store).size(), 4u);
  EXPECT_TRUE(verify_audit(store).ok());
}

// An admin action that changes no catalog row (serve starting) is one record
// of its own, as the store's actor, in the same chain.
TEST_F(AuditTest, AnAdminActionIsARecordOfItsOwnInTheChain) {
  Store store = four_records();
  record_audit_action(store, "serve.start", {{"port", 8080}, {"tokens", {{"predict", 1}, {"admin", 0}}}});
  const std::vector<AuditRecord> log = audit_log(store);
  ASSERT_EQ(log.size(), 5u);
  EXPECT_EQ(log.back().action, "serve.start");
  EXPECT_EQ(log.back().user, "alice");
  EXPECT_EQ(log.back().command, "anneal test");
  EXPECT_EQ(nlohmann::json::parse(log.back().detail)["tokens"]["predict"], 1);
  EXPECT_EQ(log.back().prev_hash, log[3].hash);
  EXPECT_TRUE(verify_audit(store).ok());
  // A missing head row refuses it, as any change.
  store.db().exec("DELETE FROM audit_head");
  EXPECT_THROW(record_audit_action(store, "serve.stop", nlohmann::json::object()), Error);
}

TEST_F(AuditTest, AnEditedRecordIsNamed) {
  Store store = four_records();
  store.db().exec("UPDATE audit SET user = 'mallory' WHERE seq = 2");
  const AuditVerdict v = verify_audit(store);
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.bad_seq, 2);
  EXPECT_NE(v.problem.find("audit record 2: its hash does not match"), std::string::npos) << v.problem;
}

TEST_F(AuditTest, AnEditWithARecomputedHashIsCaughtAtTheNextRecord) {
  Store store = four_records();
  AuditRecord r = audit_log(store)[1];
  r.detail = R"({"job":99})";
  store.db().prepare("UPDATE audit SET detail = ?, hash = ? WHERE seq = 2")
      .bind(1, r.detail).bind(2, audit_record_hash(r)).run();
  const AuditVerdict v = verify_audit(store);
  EXPECT_EQ(v.bad_seq, 3);
  EXPECT_NE(v.problem.find("does not name the hash of record 2"), std::string::npos) << v.problem;
}

TEST_F(AuditTest, ADeletedRecordInTheMiddleIsNamed) {
  Store store = four_records();
  store.db().exec("DELETE FROM audit WHERE seq = 2");
  const AuditVerdict v = verify_audit(store);
  EXPECT_EQ(v.bad_seq, 2);
  EXPECT_NE(v.problem.find("audit record 2 is missing"), std::string::npos) << v.problem;
}

TEST_F(AuditTest, ADeletedLastRecordIsCaughtByTheHead) {
  Store store = four_records();
  store.db().exec("DELETE FROM audit WHERE seq = 4");
  const AuditVerdict v = verify_audit(store);
  EXPECT_EQ(v.bad_seq, 4);
  EXPECT_NE(v.problem.find("the head says 4 records, the chain ends at 3"), std::string::npos) << v.problem;
}

TEST_F(AuditTest, ATruncationThatRewroteTheHeadIsCaughtOnlyByAnExpectedHead) {
  Store store = four_records();
  const std::string noted = verify_audit(store).head->hash;
  const std::string third = audit_log(store)[2].hash;
  store.db().exec("DELETE FROM audit WHERE seq = 4");
  store.db().prepare("UPDATE audit_head SET count = 3, hash = ?").bind(1, third).run();
  // Consistent in itself: what the docs say a catalog alone cannot catch.
  EXPECT_TRUE(verify_audit(store).ok());
  const AuditVerdict v = verify_audit(store, noted);
  EXPECT_FALSE(v.ok());
  EXPECT_NE(v.problem.find("no record has the expected hash"), std::string::npos) << v.problem;
  EXPECT_TRUE(verify_audit(store, third).ok());
}

TEST_F(AuditTest, ReorderedRecordsAreNamed) {
  Store store = four_records();
  // Swap records 2 and 3, renumbering each to the other's place.
  store.db().exec("UPDATE audit SET seq = 1000002 WHERE seq = 2");
  store.db().exec("UPDATE audit SET seq = 2 WHERE seq = 3");
  store.db().exec("UPDATE audit SET seq = 3 WHERE seq = 1000002");
  const AuditVerdict v = verify_audit(store);
  EXPECT_EQ(v.bad_seq, 2);
  EXPECT_FALSE(v.ok());
}

TEST_F(AuditTest, ARecordAddedByHandIsNamed) {
  Store store = four_records();
  AuditRecord forged = audit_log(store)[3];
  forged.seq = 5;
  forged.prev_hash = forged.hash;
  forged.hash = audit_record_hash(forged);
  store.db().prepare("INSERT INTO audit VALUES (5, ?, ?, ?, ?, ?, ?, ?, ?)")
      .bind(1, forged.at).bind(2, forged.user).bind(3, forged.host).bind(4, forged.command).bind(5, forged.action)
      .bind(6, forged.detail).bind(7, forged.prev_hash).bind(8, forged.hash).run();
  const AuditVerdict v = verify_audit(store);
  EXPECT_EQ(v.bad_seq, 5);
  EXPECT_NE(v.problem.find("the head says the chain ends before it"), std::string::npos) << v.problem;
}

TEST_F(AuditTest, AMissingHeadRefusesChangesAndIsReported) {
  Store store = four_records();
  store.db().exec("DELETE FROM audit_head");
  EXPECT_FALSE(verify_audit(store).ok());
  try {
    submit_job(store, spec("d"), 100);
    FAIL() << "a change was made without a head to chain it to";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCorrupt);
  }
  EXPECT_EQ(list_jobs(store).size(), 3u);  // the submit rolled back with its record
}

TEST_F(AuditTest, TwoWritersAtOnceMakeOneChain) {
  constexpr int kEach = 15;
  auto writer = [&](const std::string& prefix) {
    Store store = Store::open(root(), alice());
    for (int i = 0; i < kEach; ++i) submit_job(store, spec(prefix + std::to_string(i)), 100);
  };
  std::thread a(writer, "a"), b(writer, "b");
  a.join();
  b.join();
  Store store = Store::open(root(), alice());
  const AuditVerdict v = verify_audit(store);
  EXPECT_TRUE(v.ok()) << v.problem;
  EXPECT_EQ(v.records, 1 + 2 * kEach);
}

TEST_F(AuditTest, AStoreFromBeforeTheTrailOpensWithAnEmptyChain) {
  {
    // What a version-6 catalog looks like: no audit tables (nor what
    // later versions added).
    sql::Database db(root() / "catalog.db", false);
    db.exec("DROP TABLE audit; DROP TABLE audit_head; ALTER TABLE retrains DROP COLUMN data_checks; "
            "PRAGMA user_version = 6");
  }
  Store store = Store::open(root(), alice());
  EXPECT_TRUE(audit_log(store).empty());
  EXPECT_TRUE(verify_audit(store).ok());
  submit_job(store, spec("after"), 100);
  const std::vector<AuditRecord> log = audit_log(store);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].prev_hash, audit_genesis_hash());
  EXPECT_TRUE(verify_audit(store).ok());
}

}  // namespace
}  // namespace anneal
