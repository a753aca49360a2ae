// init, data import/list/show/diff/export, fsck, gc: parse arguments, call
// store/, print the result as text or JSON.
#include <algorithm>
#include <cmath>
#include <iostream>

#include "anneal/data_check.h"
#include "anneal/datasets.h"
#include "anneal/error.h"
#include "anneal/maintenance.h"
#include "anneal/runs.h"
#include "anneal/store.h"
#include "command.h"
#include "error_text.h"
#include "output.h"

namespace anneal::cli {
namespace {

using nlohmann::json;

// "1048576", "512K", "64M", "4G" (binary multiples); throws kUsage naming
// `flag` on anything else, zero, or a size beyond 2^62.
std::uint64_t parse_byte_size(const std::string& text, const char* flag) {
  std::size_t digits = std::min(text.find_first_not_of("0123456789"), text.size());
  std::string_view suffix = std::string_view(text).substr(digits);
  int shift = suffix.empty() ? 0 : suffix == "K" ? 10 : suffix == "M" ? 20 : suffix == "G" ? 30 : -1;
  std::uint64_t value = 0;
  if (digits >= 1 && digits <= 12 && shift >= 0) value = std::stoull(text.substr(0, digits)) << shift;
  if (value == 0 || value > (std::uint64_t{1} << 62))
    throw usage_error(std::string(flag) + " '" + text + "': expected a size in bytes, optionally with K, M or G");
  return value;
}

json stream_json(const DatasetStream& s) {
  json j = {{"role", s.role}, {"blob", s.blob}, {"size", s.size}, {"chunks", s.chunks}};
  if (!s.file_name.empty()) j["file_name"] = s.file_name;
  if (!s.dtype.empty()) {
    j["dtype"] = s.dtype;
    j["shape"] = s.shape;
  }
  return j;
}

// The stored schema, plus each datetime column's statistics as text
// ("min_text", "max_text", "mean_text": "2023-01-02 11:32"), which the
// schema holds in days since 1970.
json columns_json(const std::vector<ColumnSchema>& columns) {
  json out = columns_to_json(columns);
  for (std::size_t c = 0; c < columns.size(); ++c) {
    if (columns[c].type != ColumnType::kDatetime || columns[c].count == 0) continue;
    out[c]["min_text"] = datetime_text(columns[c].min, columns[c]);
    out[c]["max_text"] = datetime_text(columns[c].max, columns[c]);
    out[c]["mean_text"] = datetime_text(columns[c].mean, columns[c]);
  }
  return out;
}

json version_json(const DatasetVersion& v) {
  json streams = json::array();
  for (const auto& s : v.streams) streams.push_back(stream_json(s));
  return {{"ref", v.ref()},           {"name", v.name},
          {"version", v.version},     {"created_at", v.created_at},
          {"fingerprint", v.fingerprint}, {"format", v.format},
          {"rows", v.rows},           {"train_rows", v.train_rows},
          {"test_rows", v.test_rows}, {"label_column", v.label_column},
          {"sample_shape", v.sample_shape}, {"columns", columns_json(v.columns)},
          {"options", v.options},     {"streams", streams}};
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::vector<std::string> parts;
  for (auto d : shape) parts.push_back(std::to_string(d));
  return join(parts, "x");
}

std::string rows_text(const DatasetVersion& v) {
  return std::to_string(v.rows) + " (train " + std::to_string(v.train_rows) + ", test " +
         std::to_string(v.test_rows) + ")";
}

void print_version(const DatasetVersion& v) {
  std::cout << terminal_text(v.ref()) << "\n";
  std::vector<std::vector<std::string>> info = {
      {"  created", v.created_at},
      {"  format", v.format},
      {"  rows", rows_text(v)},
      {"  label", v.label_column},
      {"  features", shape_text(v.sample_shape) + " per row"}};
  for (const auto& s : v.streams)
    if (!s.file_name.empty())
      info.push_back({"  " + s.role, s.file_name + "  " + human_bytes(s.size) + "  blob " + s.blob});
  print_table(std::cout, info);
  std::cout << "\n";
  std::vector<std::vector<std::string>> rows = {
      {"COLUMN", "TYPE", "MISSING", "MIN", "MAX", "MEAN", "STD", "DETAILS"}};
  for (const auto& c : v.columns) {
    std::string type = column_type_name(c.type);
    if (!c.shape.empty()) type.append("[").append(shape_text(c.shape)).append("]");
    if (c.name == v.label_column) type += " (label)";
    std::string categories;
    if (c.type == ColumnType::kCategorical) {
      std::vector<std::string> shown(c.categories.begin(),
                                     c.categories.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(c.categories.size(), 5)));
      categories = std::to_string(c.categories.size()) + ": " + join(shown, ", ") +
                   (c.categories.size() > 5 ? ", ..." : "");
    }
    if (c.type == ColumnType::kDatetime) {
      // Dates as dates; the spread in days.
      bool any = c.count > 0;
      rows.push_back({c.name, type, std::to_string(c.missing), any ? datetime_text(c.min, c) : "",
                      any ? datetime_text(c.max, c) : "", any ? datetime_text(c.mean, c) : "",
                      any ? format_double(c.std) + " days" : "", "format " + c.datetime_format});
      continue;
    }
    bool numeric = c.type == ColumnType::kNumeric;
    rows.push_back({c.name, type, std::to_string(c.missing), numeric ? format_double(c.min) : "",
                    numeric ? format_double(c.max) : "", numeric ? format_double(c.mean) : "",
                    numeric ? format_double(c.std) : "", categories});
  }
  print_table(std::cout, rows);
}

int run_init(const Invocation& inv) {
  if (inv.args["encrypt"].as<bool>()) return run_init_encrypted(inv);
  bool created = Store::init(inv.global.store);
  if (inv.global.json)
    print_json({{"store", inv.global.store.string()}, {"created", created},
                {"schema_version", Store::schema_version()}});
  else
    std::cout << (created ? "created store " : "store already exists at ") << terminal_text(inv.global.store.string())
              << "\n";
  return kExitOk;
}

void print_check_report(const DataCheckReport& report);

int run_import(const Invocation& inv) {
  const auto& a = inv.args;
  ImportRequest request;
  request.dataset = a["NAME"].as<std::string>();
  request.file = a["FILE"].as<std::string>();
  if (a.count("labels")) request.labels = a["labels"].as<std::string>();
  if (a.count("test")) request.test = a["test"].as<std::string>();
  if (a.count("test-labels")) request.test_labels = a["test-labels"].as<std::string>();
  if (a.count("format")) request.format = parse_format_name(a["format"].as<std::string>());
  request.header = !a["no-header"].as<bool>();
  if (a.count("label")) request.label = a["label"].as<std::string>();
  if (a.count("categorical")) request.categorical = a["categorical"].as<std::vector<std::string>>();
  if (a.count("date-format"))
    for (const auto& text : a["date-format"].as<std::vector<std::string>>())
      request.date_formats.push_back(parse_date_format_option(text));
  request.split = a["split"].as<double>();
  request.seed = a["seed"].as<std::uint64_t>();
  request.nonfinite = parse_nonfinite_name(a["nonfinite"].as<std::string>());
  request.max_columns = a["max-columns"].as<std::uint64_t>();
  if (request.max_columns < 2 || request.max_columns > kCeilingMaxColumns)
    throw usage_error("--max-columns " + std::to_string(request.max_columns) + ": expected 2 to " +
                      std::to_string(kCeilingMaxColumns));
  request.decompress_limits.max_bytes = parse_byte_size(a["max-decompressed-size"].as<std::string>(),
                                                        "--max-decompressed-size");
  request.decompress_limits.max_ratio = a["max-decompression-ratio"].as<std::uint64_t>();
  if (request.decompress_limits.max_ratio == 0)
    throw usage_error("--max-decompression-ratio 0: expected a ratio of at least 1");
  if (request.test && !a["split"].defaulted())
    throw usage_error("--split: a version with --test FILE takes its test split from that file");
  const bool check = a["check"].as<bool>();
  if (!check && (a.count("max-psi") || a.count("max-ks") || a.count("max-missing-increase") || a.count("max-unseen")))
    throw usage_error("--max-psi, --max-ks, --max-missing-increase and --max-unseen: give --check too");
  const DriftThresholds thresholds = drift_thresholds_of(inv);

  Store store = Store::open(inv.global.store, inv.global.access);
  TerminalReporter reporter(inv.global.log_format);
  CheckedImport checked;
  if (check) checked = import_checked(store, request, thresholds, reporter);
  else checked.import = import_dataset(store, request, reporter);
  const ImportResult& result = checked.import;
  const int code = checked.checks && !checked.checks->passed() ? kExitDataCheckFailed : kExitOk;
  if (inv.global.json) {
    json hints = json::array();
    for (const auto& hint : result.date_format_hints)
      hints.push_back({{"column", hint.column}, {"formats", hint.formats}});
    json out = {{"created", result.created}, {"bytes_added", result.bytes_added},
                {"source_bytes", result.source_bytes}, {"date_format_hints", hints},
                {"version", version_json(result.version)}, {"exit_code", code}};
    if (check) {
      out["data_checks"] = checked.checks ? checked.checks->to_json() : json(nullptr);
      if (!checked.not_checked.empty()) out["not_checked"] = checked.not_checked;
    }
    print_json(out);
    return code;
  }
  // Always shown (not a progress note): the column was read as text.
  for (const auto& hint : result.date_format_hints) {
    std::string flags;
    for (const auto& format : hint.formats)
      flags += (flags.empty() ? "--date-format " : " or ") + hint.column + "=" + format;
    std::cerr << "note: column '" << terminal_text(hint.column) << "' is read as text though its values look like dates in "
              << join(hint.formats, " or ") << "; " << terminal_text(flags) << " reads them as dates\n";
  }
  if (result.created) {
    std::cout << "imported " << terminal_text(result.version.ref()) << ": " << rows_text(result.version) << " rows, "
              << result.version.columns.size() << " columns; " << human_bytes(result.bytes_added)
              << " new in the store\n";
  } else {
    std::cout << "unchanged: identical content and options are already " << terminal_text(result.version.ref());
    if (result.bytes_added > 0)
      std::cout << "; rewrote " << human_bytes(result.bytes_added) << " of missing or damaged objects";
    std::cout << "\n";
  }
  if (checked.checks) print_check_report(*checked.checks);
  else if (check) std::cout << "not checked: " << terminal_text(checked.not_checked) << "\n";
  return code;
}

int run_list(const Invocation& inv) {
  Store store = Store::open(inv.global.store, inv.global.access);
  auto datasets = list_datasets(store);
  if (inv.global.json) {
    json out = json::array();
    for (const auto& d : datasets)
      out.push_back({{"name", d.name}, {"versions", d.versions}, {"latest", d.latest.ref()},
                     {"rows", d.latest.rows}, {"format", d.latest.format},
                     {"created_at", d.latest.created_at}});
    print_json({{"datasets", out}});
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {{"NAME", "LATEST", "VERSIONS", "FORMAT", "ROWS", "CREATED"}};
  for (const auto& d : datasets)
    rows.push_back({d.name, d.latest.ref(), std::to_string(d.versions), d.latest.format,
                    std::to_string(d.latest.rows), d.latest.created_at});
  print_table(std::cout, rows);
  return kExitOk;
}

int run_show(const Invocation& inv) {
  Store store = Store::open(inv.global.store, inv.global.access);
  DatasetRef ref = parse_dataset_ref(inv.args["REF"].as<std::string>(), "REF");
  DatasetVersion v = find_dataset(store, ref);
  if (inv.global.json) print_json(version_json(v));
  else print_version(v);
  return kExitOk;
}

int run_diff(const Invocation& inv) {
  Store store = Store::open(inv.global.store, inv.global.access);
  DatasetRef from = parse_dataset_ref(inv.args["FROM"].as<std::string>(), "FROM");
  DatasetRef to = parse_dataset_ref(inv.args["TO"].as<std::string>(), "TO");
  DatasetDiff diff = diff_datasets(store, from, to);
  if (inv.global.json) {
    print_json({{"from", diff.from.ref()}, {"to", diff.to.ref()},
                {"rows", {{"from", diff.from.rows}, {"to", diff.to.rows}}},
                {"schema_changes", diff.schema_changes},
                {"bytes", {{"from", diff.from_bytes}, {"to", diff.to_bytes},
                           {"shared", diff.shared_bytes}, {"source_shared", diff.source_shared_bytes}}}});
    return kExitOk;
  }
  std::cout << terminal_text(diff.from.ref()) << " -> " << terminal_text(diff.to.ref()) << "\n";
  long long delta = static_cast<long long>(diff.to.rows) - static_cast<long long>(diff.from.rows);
  std::cout << "  rows: " << diff.from.rows << " -> " << diff.to.rows << " ("
            << (delta >= 0 ? "+" : "") << delta << ")\n";
  if (diff.schema_changes.empty()) std::cout << "  schema: unchanged\n";
  for (const auto& change : diff.schema_changes) std::cout << "  schema: " << terminal_text(change) << "\n";
  double pct = diff.to_bytes ? 100.0 * static_cast<double>(diff.shared_bytes) / static_cast<double>(diff.to_bytes) : 0;
  std::cout << "  bytes shared: " << human_bytes(diff.shared_bytes) << " of " << human_bytes(diff.to_bytes)
            << " (" << format_double(pct, 3) << "%)\n";
  return kExitOk;
}

}  // namespace

void add_drift_options(po::options_description& o) {
  o.add_options()("max-psi", po::value<double>()->value_name("X"), "largest population stability index (0.2)")
      ("max-ks", po::value<double>()->value_name("X"), "largest Kolmogorov-Smirnov statistic (0.2)")
      ("max-missing-increase", po::value<double>()->value_name("X"), "largest growth of a missing rate (0.1)")
      ("max-unseen", po::value<double>()->value_name("X"), "largest share of unseen levels (0.1)");
}

DriftThresholds drift_thresholds_of(const Invocation& inv) {
  DriftThresholds t;
  auto read = [&](const char* flag, double& value) {
    if (!inv.args.count(flag)) return;
    value = inv.args[flag].as<double>();
    if (!std::isfinite(value) || value < 0)
      throw usage_error(std::string("--") + flag + " " + format_double(value, 6) + ": expected a number >= 0");
  };
  read("max-psi", t.psi);
  read("max-ks", t.ks);
  read("max-missing-increase", t.missing_increase);
  read("max-unseen", t.unseen);
  return t;
}

namespace {

std::string optional_number(const std::optional<double>& v) { return v ? format_double(*v, 3) : "-"; }

// The data checks' table, a line per new column, and the verdict.
void print_check_report(const DataCheckReport& report) {
  std::cout << terminal_text(report.candidate) << " (" << report.candidate_rows << " rows) against "
            << terminal_text(report.reference) << " (" << report.reference_rows << " rows)\n";
  std::vector<std::vector<std::string>> rows = {{"  column", "kind", "missing", "psi", "ks", "unseen", "check"}};
  for (const ColumnCheck& c : report.columns) {
    std::string check = "ok";
    if (!c.failures.empty()) {
      check = "FAIL";
      for (const std::string& f : c.failures) check += (check == "FAIL" ? " " : ", ") + f;
    }
    rows.push_back({"  " + terminal_text(c.column) + (c.label ? " (label)" : ""), c.kind,
                    c.present ? format_double(c.reference_missing, 3) + " -> " + format_double(c.missing, 3) : "-",
                    optional_number(c.psi), optional_number(c.ks), optional_number(c.unseen), terminal_text(check)});
  }
  print_table(std::cout, rows);
  for (const std::string& name : report.new_columns)
    std::cout << "  new column " << terminal_text(name) << " (not in " << terminal_text(report.reference) << ")\n";
  std::cout << (report.passed() ? "passed" : "failed: " + terminal_text(report.failure_line())) << "\n";
}

int run_check(const Invocation& inv) {
  if (!inv.args.count("against")) throw usage_error("--against: data check needs the reference version (--against REF)");
  const DriftThresholds thresholds = drift_thresholds_of(inv);
  Store store = Store::open(inv.global.store, inv.global.access);
  DatasetRef candidate = parse_dataset_ref(inv.args["NEW"].as<std::string>(), "NEW");
  DatasetRef reference = parse_dataset_ref(inv.args["against"].as<std::string>(), "--against");
  const DataCheckReport report = check_data(store, candidate, reference, thresholds);
  const int code = report.passed() ? kExitOk : kExitDataCheckFailed;
  if (inv.global.json) {
    json out = report.to_json();
    out["exit_code"] = code;
    print_json(out);
    return code;
  }
  print_check_report(report);
  return code;
}

int run_export(const Invocation& inv) {
  if (!inv.args.count("output")) throw usage_error("-o: data export needs an output file (-o FILE)");
  Store store = Store::open(inv.global.store, inv.global.access);
  DatasetRef ref = parse_dataset_ref(inv.args["REF"].as<std::string>(), "REF");
  std::string out = inv.args["output"].as<std::string>();
  export_dataset(store, ref, inv.args["part"].as<std::string>(), out, inv.args["force"].as<bool>());
  if (inv.global.json) print_json({{"ref", ref.to_string()}, {"output", out}});
  return kExitOk;
}

int run_fsck(const Invocation& inv) {
  Store store = Store::open(inv.global.store, inv.global.access);
  TerminalReporter reporter(inv.global.log_format);
  FsckReport report = fsck(store, reporter);
  fsck_runs(store, reporter, report);
  std::vector<std::string> findings;
  for (const auto& f : report.findings) findings.push_back(f.text + remedy_command(f.remedy, f.remedy_argument));
  if (inv.global.json) {
    print_json({{"ok", report.ok()}, {"objects_checked", report.objects_checked},
                {"blobs_checked", report.blobs_checked}, {"problems", report.problems},
                {"findings", findings},
                {"unreferenced_objects", report.unreferenced_objects},
                {"stale_temp_files", report.stale_temp_files}});
  } else {
    for (const auto& p : report.problems) std::cout << "BROKEN " << terminal_text(p) << "\n";
    for (const auto& f : findings) std::cout << "NOTE " << terminal_text(f) << "\n";
    std::cout << "checked " << report.objects_checked << " objects, " << report.blobs_checked << " streams: "
              << (report.ok() ? "ok" : std::to_string(report.problems.size()) + " problems") << "\n";
    if (report.unreferenced_objects || report.stale_temp_files)
      std::cout << report.unreferenced_objects << " unreferenced objects and " << report.stale_temp_files
                << " stale temporary files ('anneal gc' removes them)\n";
  }
  return report.ok() ? kExitOk : kExitFailure;
}

int run_gc(const Invocation& inv) {
  Store store = Store::open(inv.global.store, inv.global.access);
  TerminalReporter reporter(inv.global.log_format);
  GcReport report = gc(store, inv.args["dry-run"].as<bool>(), reporter);
  if (inv.global.json) {
    print_json({{"dry_run", report.dry_run}, {"blobs_removed", report.blobs_removed},
                {"objects_removed", report.objects_removed}, {"bytes_freed", report.bytes_freed},
                {"temp_files_removed", report.temp_files_removed}});
  } else {
    std::cout << (report.dry_run ? "would remove " : "removed ") << report.objects_removed << " objects, "
              << report.temp_files_removed << " temporary files (" << human_bytes(report.bytes_freed) << ")\n";
  }
  return kExitOk;
}

}  // namespace

void add_store_commands(std::vector<Command>& out) {
  out.push_back({"init", "", "create a store (or bring an existing one's catalog up to date)",
                 "Creates catalog.db (SQLite) and objects/ under the store directory, owner-only "
                 "(0700 directories, 0600 files). With --encrypt, every object is encrypted with the key "
                 "in --key-file FILE (or $ANNEAL_KEY_FILE), a new random key written there when FILE does "
                 "not exist; an existing unencrypted store is encrypted as by 'anneal encrypt'.",
                 [](po::options_description& o) {
                   o.add_options()("encrypt", po::bool_switch(),
                                   "encrypt the store's objects (XChaCha20-Poly1305) with the key in --key-file");
                 },
                 {}, run_init});
  out.push_back(
      {"data import", "NAME FILE [options]", "import a file as a new immutable version NAME@vN",
       "Formats: CSV and TSV (RFC 4180 quoting, CRLF, UTF-8 BOM; empty, NA and NaN are missing; "
       "dates such as 2024-03-01, 2024-03-01T09:30:00Z, 2024/03/01 and 01.03.2024 become datetime "
       "columns, 01/03/2024 only with --date-format; other "
       "string columns become categorical), IDX (MNIST style; --labels FILE), LIBSVM. .gz and .zst "
       "input is decompressed. Without --test, a reproducible split (--split, --seed) decided per row "
       "by its content holds out a test set: a row stays on its side as the file grows. Importing identical content with the same options again creates no "
       "version and names the existing one. With --check the new version is checked against the dataset's latest "
       "version before it, as 'data check' does (thresholds --max-psi, --max-ks, --max-missing-increase, "
       "--max-unseen); it is imported either way, and exit code 3 says a check failed.",
       [](po::options_description& o) {
         o.add_options()
             ("labels", po::value<std::string>()->value_name("FILE"), "IDX: the labels file of FILE")
             ("test", po::value<std::string>()->value_name("FILE"), "a separate test split, same format")
             ("test-labels", po::value<std::string>()->value_name("FILE"), "IDX: the labels of --test")
             ("format", po::value<std::string>()->value_name("FMT"), "csv, tsv, idx or libsvm (default: from the name/content)")
             ("no-header", po::bool_switch(), "CSV/TSV: the first line is data; columns are named col1..colN")
             ("label", po::value<std::string>()->value_name("COL"), "label column: name or 0-based index (default: the last)")
             ("categorical", po::value<std::vector<std::string>>()->multitoken()->value_name("COL"),
              "treat these columns as categorical even if numeric or dates")
             ("date-format", po::value<std::vector<std::string>>()->value_name("[COL=]FORMAT"),
              "CSV/TSV: read COL (or every text column that fits) as dates written in FORMAT, "
              "e.g. DD/MM/YYYY or MM/DD/YYYY HH:MM (repeatable)")
             ("split", po::value<double>()->default_value(0.2)->value_name("FRACTION"),
              "fraction held out as the test split when no --test is given")
             ("seed", po::value<std::uint64_t>()->default_value(0)->value_name("N"), "seed of the split")
             ("nonfinite", po::value<std::string>()->default_value("error")->value_name("error|missing"),
              "inf, -inf, nan spelled otherwise than NaN, and numbers beyond float32: bad input (error) or missing")
             ("max-columns", po::value<std::uint64_t>()->default_value(kDefaultMaxColumns)->value_name("N"),
              "most CSV/TSV columns, or highest LIBSVM feature index")
             ("max-decompressed-size", po::value<std::string>()->default_value("4G")->value_name("BYTES"),
              ".gz/.zst input: most bytes it may expand to (suffix K, M or G)")
             ("max-decompression-ratio",
              po::value<std::uint64_t>()->default_value(kDefaultMaxDecompressionRatio)->value_name("N"),
              ".gz/.zst input: most times its compressed size it may expand to")
             ("check", po::bool_switch(), "check the new version against the latest one before it (drift)");
         add_drift_options(o);
       },
       {"NAME", "FILE"}, run_import});
  out.push_back({"data list", "", "list datasets and their latest versions", "", nullptr, {}, run_list});
  out.push_back({"data show", "REF", "show a version's sources, row counts and schema",
                 "REF is NAME (the latest version), NAME@latest or NAME@vN.", nullptr, {"REF"}, run_show});
  out.push_back({"data diff", "FROM TO", "compare two versions: schema, rows, bytes shared", "", nullptr,
                 {"FROM", "TO"}, run_diff});
  out.push_back({"data check", "NEW --against REF [--max-psi X] [--max-ks X] [--max-missing-increase X] [--max-unseen X]",
                 "check a version's columns against a reference version (drift)",
                 "For every column of REF: present in NEW with the same type; its missing rate grown by at most "
                 "--max-missing-increase (default 0.1); for numeric columns the population stability index over "
                 "ten bins at REF's deciles (at most --max-psi, default 0.2) and the Kolmogorov-Smirnov "
                 "statistic at REF's percentiles (at most --max-ks, default 0.2); for categorical columns the "
                 "PSI over levels and the share of NEW's rows with a level REF never had (at most --max-unseen, "
                 "default 0.1). The label is checked as its type. Datetime columns and identifier-like "
                 "categorical columns (most values distinct) are checked for presence and missing rate only. "
                 "Both splits of each version are read a block at a time, in bounded memory. Exit codes: 0 "
                 "every check passed, 3 a check failed (each named), 2 a bad flag or an image version.",
                 [](po::options_description& o) {
                   o.add_options()("against", po::value<std::string>()->value_name("REF"), "the reference version");
                   add_drift_options(o);
                 },
                 {"NEW"}, run_check});
  out.push_back({"data export", "REF -o FILE [--force] [--part PART]",
                 "write a version's source file back out, bit-identical",
                 "PART is source (default), source.labels, test.source or test.source.labels for the "
                 "files as imported, or a parsed stream (features, labels, split, test.features, "
                 "test.labels) as raw little-endian arrays.",
                 [](po::options_description& o) {
                   o.add_options()("output,o", po::value<std::string>()->value_name("FILE"), "where to write")
                       ("force", po::bool_switch(), "replace FILE if it exists")
                       ("part", po::value<std::string>()->default_value("source")->value_name("PART"),
                        "which stored stream to export");
                 },
                 {"REF"}, run_export});
  out.push_back({"fsck", "", "verify every object and catalog reference",
                 "Re-hashes every object, checks that every catalog reference resolves, that every JSON "
                 "column parses, that dataset streams match their shapes and that every model and "
                 "checkpoint decodes, and that the audit trail's hash chain verifies (as 'anneal audit "
                 "verify'). Lists what is broken and exits 1 when anything is; lists runs "
                 "and jobs left running by a process that died as notes (exit 0). Waits for a "
                 "running gc.",
                 nullptr, {}, run_fsck});
  out.push_back({"gc", "[--dry-run]", "remove objects nothing references",
                 "Waits for running imports, then removes unreferenced streams, objects and leftover "
                 "temporary files.",
                 [](po::options_description& o) {
                   o.add_options()("dry-run", po::bool_switch(), "only report what would be removed");
                 },
                 {}, run_gc});
}

}  // namespace anneal::cli
