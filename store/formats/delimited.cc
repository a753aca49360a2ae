// CSV and TSV: one parser, parameterized by the delimiter.
//
// The text is parsed in steps:
//   1. check that it is UTF-8 without NULs (in parallel);
//   2. read the header and infer column types (numeric, datetime and the
//      date format, categorical) from the first 1000 rows (sequential,
//      small);
//   3. cut the rest into ~1 MB blocks at record boundaries (quote parity,
//      in parallel) and count each block's records (in parallel), so every
//      block knows its first row;
//   4. parse every block straight into the Table's features and labels, with
//      block-local categorical dictionaries (in parallel);
//   5. merge the dictionaries in block order, so codes follow first-seen
//      order in the file, renumber the codes and take statistics (in
//      parallel).
// Writing in place matters: staging the cells per block and copying them
// costs a third of the parse in page faults alone. Block boundaries depend
// only on the bytes, so the Table does not depend on the number of threads.
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "anneal/delimited_scan.h"
#include "anneal/error.h"
#include "anneal/formats.h"
#include "anneal/spelling.h"
#include "formats/datetime.h"
#include "formats/delimited_reader.h"
#include "formats/number.h"
#include "formats/stats.h"
#include "formats/text.h"

namespace anneal {

namespace {

using formats::DateTimeFormat;
using formats::Field;
using formats::FieldReader;
using formats::TextError;
using formats::is_missing;
using formats::field_number;
using formats::read_record;
using formats::trimmed_content;

constexpr std::size_t kInferenceRows = 1000;
// Codes are stored as float; above 2^24 consecutive integers are not exact.
constexpr std::size_t kMaxCategories = std::size_t{1} << 24;

// Who decided a column's type: the first rows, an option naming the column
// (--categorical, COLUMN=FORMAT), a date format given for any column that
// fits, or the train part.
enum class TypeOrigin { kInferred, kForced, kDateOption, kReference };

struct ColumnPlan {
  std::string name;
  ColumnType type = ColumnType::kNumeric;
  TypeOrigin origin = TypeOrigin::kInferred;
  std::size_t dictionary = 0;  // categorical: its slot among the dictionaries
  std::optional<DateTimeFormat> date_format;  // datetime: how its values are written
  const DateFormatOption* date_option = nullptr;  // kForced datetime: the option that asked
  bool skipped = false;  // not in options.read_columns: fields read, cells NaN, no dictionary
};

// The smallest and largest datetime value of a column, exact (the cells
// are float32, within minutes): what 'data show' prints.
struct DateRange {
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  void add(double days) {
    min = std::min(min, days);
    max = std::max(max, days);
  }
  void merge(const DateRange& other) {
    min = std::min(min, other.min);
    max = std::max(max, other.max);
  }
};

// What the header and options decided before the rows are parsed.
struct Layout {
  std::vector<ColumnPlan> columns;
  std::vector<std::size_t> categorical;  // columns with a dictionary, by slot
  // The label column; columns.size() (no column) for input without one,
  // so `column == label` never holds and `column > label` never either.
  std::size_t label = 0;
  bool labelled = true;
  std::size_t data_begin = 0;  // offset of the first data record

  std::size_t features() const { return columns.size() - (labelled ? 1 : 0); }
};

std::string column_list(const std::vector<ColumnPlan>& columns) {
  std::string out;
  for (const auto& column : columns) out += (out.empty() ? "" : ", ") + column.name;
  return out;
}

// Resolves the label column or a categorical column as the import names it
// (`subject`, for the error): a column name, else a 0-based index written as
// digits.
std::size_t resolve_column(const std::vector<ColumnPlan>& columns, const std::string& wanted,
                           Subject subject, const std::string& display_name) {
  for (std::size_t i = 0; i < columns.size(); ++i)
    if (columns[i].name == wanted) return i;
  bool digits = !wanted.empty() && wanted.size() < 10 &&
                wanted.find_first_not_of("0123456789") == std::string::npos;
  if (digits && std::stoul(wanted) < columns.size()) return std::stoul(wanted);
  throw Error(ErrorKind::kBadData, subject,
              ": no column '" + wanted + "' in " + display_name + " (columns: " + column_list(columns) + ")");
}

class DelimitedParser {
 public:
  struct Block;

  // `text` is the whole input, or (streaming) a first window of it that
  // holds the header; set_text narrows it before choose_types.
  DelimitedParser(std::string_view text, char delimiter, const ParseOptions& options)
      : text_(text),
        delimiter_(delimiter),
        options_(options),
        reader_(text.data(), text.data() + text.size(), delimiter) {}

  // The whole input at once.
  Table parse();

  // The steps parse() takes, for a caller that reads the input in windows
  // (DelimitedScanner): the header from the first window, the types from
  // the first whole records, then batches of blocks in file order.
  void read_header();
  void set_text(std::string_view text) {
    text_ = text;
    reader_ = FieldReader(text.data(), text.data() + text.size(), delimiter_);
  }
  // Whether text_ holds the first kInferenceRows records after the header,
  // or a malformed one before them, so that choose_types sees what it would
  // see in the whole input (text_ must end at a record boundary).
  bool holds_inference_rows() const;
  void choose_types();
  std::size_t data_begin() const { return layout_.data_begin; }
  // Each block keeps statistics per column: with very wide rows, larger
  // blocks keep that small next to the data itself.
  std::size_t block_bytes() const { return std::max(formats::kParseBlockBytes, layout_.columns.size() * 256); }
  // Names, types and shape of the result, no rows.
  Table empty_table() const;
  // Counts and parses the blocks [begin, end) (offsets into the whole
  // input) that `window` (starting at input offset `window_offset`) holds,
  // into `batch`'s rows, resized to hold them; categorical codes become the
  // file's codes and statistics are merged in block order. Returns the first
  // error in the blocks instead, and then merges nothing.
  std::optional<TextError> parse_batch(std::string_view window, std::size_t window_offset,
                                       const std::vector<std::pair<std::size_t, std::size_t>>& ranges, Table& batch);
  // Stores the merged statistics and dictionaries into `table`'s columns;
  // throws when a column has too many distinct values.
  void finish(Table& table);
  // The categorical columns (indices into the columns) by dictionary slot,
  // and each slot's values merged so far, in code order.
  const std::vector<std::size_t>& categorical_columns() const { return layout_.categorical; }
  const std::vector<std::string>& categories(std::size_t slot) const { return dictionaries_[slot].categories; }

 private:
  class BlockParser;

  [[noreturn]] void fail(std::size_t offset, const std::string& what, Remedy remedy = Remedy::kNone) const {
    formats::throw_text_error(options_.display_name, text_, TextError{offset, what, remedy, ""});
  }
  void name_columns(const std::vector<Field>& first_record);
  void check_against_reference(const std::vector<Field>& header_fields) const;
  void force_date_columns();
  void infer_types();
  void count_records(std::string_view window, std::size_t window_offset, std::vector<Block>& blocks) const;
  void merge_batch(std::vector<Block>& blocks, Table& batch);

  std::string_view text_;
  char delimiter_;
  const ParseOptions& options_;
  FieldReader reader_;
  Layout layout_;
  // Merged over the batches so far, in file order.
  struct Dictionary {
    std::unordered_map<std::string, std::uint32_t> codes;
    std::vector<std::string> categories;
  };
  std::vector<Dictionary> dictionaries_;  // per categorical slot
  std::vector<ColumnStats> stats_;        // per feature, then the label
  std::vector<DateRange> date_ranges_;    // per column
  bool merging_started_ = false;
};

// A dictionary of one categorical column within one block: block-local codes
// in first-seen order, later renumbered into the column's global codes.
struct LocalDictionary {
  std::unordered_map<std::string_view, std::uint32_t> codes;
  std::vector<std::string_view> values;  // code -> value
  std::deque<std::string> owned;         // values that are not slices of the text

  std::uint32_t code_of(const Field& field) {
    if (!field.escaped) return code_of(field.content(), nullptr);
    std::string value = field.value();
    return code_of(value, &value);
  }

 private:
  std::uint32_t code_of(std::string_view value, std::string* to_own) {
    auto found = codes.find(value);
    if (found != codes.end()) return found->second;
    if (to_own != nullptr) value = owned.emplace_back(std::move(*to_own));
    auto code = static_cast<std::uint32_t>(values.size());
    codes.emplace(value, code);
    values.push_back(value);
    return code;
  }
};

struct DelimitedParser::Block {
  std::size_t begin = 0, end = 0;  // byte range of whole records
  std::uint64_t first_row = 0;
  std::uint64_t rows = 0;          // counted before parsing
  std::vector<LocalDictionary> dictionaries;  // per categorical column
  std::optional<TextError> error;
  std::vector<ColumnStats> stats;  // per feature, then the label
  std::vector<DateRange> date_ranges;  // per column (datetime columns only)
};

// Parses the records of one block into its rows of the Table. Numbers in
// numeric columns are parsed straight from the text; everything else goes
// through the FieldReader. Categorical cells get block-local codes.
class DelimitedParser::BlockParser {
 public:
  BlockParser(const DelimitedParser& parser, std::string_view window, std::size_t window_offset, Block& block,
              Table& table)
      : layout_(parser.layout_),
        reader_(window.data(), window.data() + (block.end - window_offset), parser.delimiter_, window_offset),
        block_(block),
        columns_(layout_.columns.size()),
        features_(layout_.features()),
        feature_rows_(table.features.data() + block.first_row * features_),
        labels_(layout_.labelled ? table.labels.data() + block.first_row : nullptr),
        nonfinite_(parser.options_.nonfinite) {}

  void parse() {
    block_.dictionaries.resize(layout_.categorical.size());
    block_.date_ranges.assign(columns_, DateRange{});
    const char* p = reader_.skip_empty_lines(reader_.begin_of(block_.begin));
    std::uint64_t row = 0;
    for (; p < reader_.end(); ++row) {
      if (row == block_.rows) {
        // Where the count stopped at malformed text: this record fails to
        // parse too, maybe earlier than where the count noticed.
        std::vector<float> scratch(features_);
        float scratch_label;
        parse_record(p, scratch.data(), &scratch_label);
        throw block_.error ? *block_.error : record_count_mismatch(row + 1);
      }
      p = parse_record(p, feature_rows_ + row * features_, labels_ != nullptr ? labels_ + row : nullptr);
      p = reader_.skip_empty_lines(p);
    }
    if (row != block_.rows) throw record_count_mismatch(row);
  }

 private:
  TextError record_count_mismatch(std::uint64_t parsed) const {
    return TextError{block_.begin, "expected " + std::to_string(block_.rows) +
                                       " records in this part of the file (internal count), found " +
                                       std::to_string(parsed)};
  }

  // `label`: where the label cell goes; null without a label column.
  const char* parse_record(const char* p, float* feature_row, float* label) {
    const char* record_start = p;
    for (std::size_t column = 0;; ++column) {
      if (column == columns_) {
        std::size_t found = reader_.count_remaining(p, columns_);
        throw TextError{reader_.offset(p), "expected " + std::to_string(columns_) +
                                               " fields, found " + std::to_string(found)};
      }
      bool record_end;
      float& cell = column == layout_.label ? *label : feature_row[column - (column > layout_.label)];
      p = parse_cell(p, column, cell, record_end);
      if (record_end) {
        if (column + 1 < columns_) throw too_few_fields(record_start, p, column + 1);
        return p;
      }
    }
  }

  TextError too_few_fields(const char* record_start, const char* next, std::size_t found) const {
    // Point just past the record's last field, on the line where it ends.
    const char* line_end = next;
    if (line_end > record_start && line_end[-1] == '\n') --line_end;
    if (line_end > record_start && line_end[-1] == '\r') --line_end;
    return TextError{reader_.offset(line_end), "expected " + std::to_string(columns_) +
                                                   " fields, found " + std::to_string(found)};
  }

  const char* parse_cell(const char* p, std::size_t column, float& cell, bool& record_end) {
    const ColumnPlan& plan = layout_.columns[column];
    if (plan.skipped) {
      Field field;
      const char* next = reader_.read(p, field, record_end);
      cell = NAN;
      return next;
    }
    if (plan.type == ColumnType::kNumeric) {
      float value;
      const char* number_end = formats::parse_float_prefix(p, reader_.end(), value);
      const char* next;
      // Non-finite values (and the NaN of a missing token) take the path
      // below, which tells them apart.
      if (number_end != nullptr && std::isfinite(value) && reader_.ends_field(number_end, next, record_end)) {
        cell = value;
        return next;
      }
    }
    Field field;
    const char* next = reader_.read(p, field, record_end);
    if (is_missing(field)) {
      if (column == layout_.label) throw missing_label(field.start, field.value());
      cell = NAN;
    } else if (plan.type == ColumnType::kNumeric) {
      cell = numeric_value(field, column);
    } else if (plan.type == ColumnType::kDatetime) {
      cell = datetime_value(field, column);
    } else {
      cell = static_cast<float>(block_.dictionaries[plan.dictionary].code_of(field));
    }
    return next;
  }

  float numeric_value(const Field& field, std::size_t column) const {
    const ColumnPlan& plan = layout_.columns[column];
    float number;
    if (field_number(field, reader_.end(), number)) {
      if (std::isfinite(number)) return number;
      if (nonfinite_ == NonFinite::kMissing && column != layout_.label) return NAN;
      throw TextError{reader_.offset(field.begin),
                      "expected a finite number, found " + formats::quote_for_message(trimmed_content(field)) +
                          " in column '" + plan.name + "'" + (column == layout_.label ? " (the label)" : ""),
                      column == layout_.label ? Remedy::kNone : Remedy::kReadNonFiniteAsMissing};
    }
    std::string why = plan.origin == TypeOrigin::kReference
                          ? "numeric in the train part"
                          : "inferred numeric from its first " + std::to_string(kInferenceRows) + " rows";
    throw TextError{reader_.offset(field.begin),
                    "expected a number in column '" + plan.name + "' (" + why + "), found " +
                        formats::quote_for_message(field.value()),
                    plan.origin == TypeOrigin::kReference ? Remedy::kNone : Remedy::kDeclareCategorical, plan.name};
  }

  float datetime_value(const Field& field, std::size_t column) {
    const ColumnPlan& plan = layout_.columns[column];
    const DateTimeFormat& format = *plan.date_format;
    double days = 0;
    const auto match = field.escaped ? DateTimeFormat::Match::kNoMatch : format.read(trimmed_content(field), days);
    if (match == DateTimeFormat::Match::kOk) {
      block_.date_ranges[column].add(days);
      return static_cast<float>(days);
    }
    std::string why = plan.origin == TypeOrigin::kReference ? " as in the train part"
                      : plan.date_option != nullptr && plan.date_option->as_trained ? " as the model was trained"
                                                                                     : "";
    Remedy remedy = Remedy::kDeclareCategorical;
    std::string remedy_argument = plan.name;
    if (!why.empty()) {
      remedy = Remedy::kNone;
    } else if (plan.origin == TypeOrigin::kForced) {
      remedy = Remedy::kCheckDateFormat;
      remedy_argument = date_format_option_text(*plan.date_option);
    }
    throw TextError{reader_.offset(field.begin),
                    std::string("expected ") + (format.has_time() ? "a date-time" : "a date") + " like " +
                        format.example() + " (column '" + plan.name + "', format " + format.notation() + why +
                        "), found " + formats::quote_for_message(field.value()) +
                        (match == DateTimeFormat::Match::kInvalid ? " (no such date or time)" : ""),
                    remedy, remedy_argument};
  }

  TextError missing_label(const char* at, std::string_view value) const {
    std::string found = value.empty() ? std::string("an empty field") : formats::quote_for_message(value);
    return TextError{reader_.offset(at), "expected a value in the label column '" +
                                             layout_.columns[layout_.label].name + "', found " + found};
  }

  const Layout& layout_;
  FieldReader reader_;
  Block& block_;
  std::size_t columns_, features_;
  float* feature_rows_;
  float* labels_;  // null without a label column
  NonFinite nonfinite_;
};

Table DelimitedParser::parse() {
  formats::check_utf8_text(text_, options_.display_name);
  read_header();
  choose_types();
  std::vector<std::size_t> starts = formats::split_records(text_, layout_.data_begin, block_bytes());
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  for (std::size_t b = 0; b + 1 < starts.size(); ++b) ranges.emplace_back(starts[b], starts[b + 1]);
  Table table = empty_table();
  if (auto error = parse_batch(text_, 0, ranges, table)) formats::throw_text_error(options_.display_name, text_, *error);
  if (table.rows == 0)
    fail(text_.size(), std::string("expected a data row") + (options_.header ? " after the header" : "") +
                           ", found end of input");
  finish(table);
  return table;
}

std::optional<TextError> DelimitedParser::parse_batch(std::string_view window, std::size_t window_offset,
                                                      const std::vector<std::pair<std::size_t, std::size_t>>& ranges,
                                                      Table& batch) {
  std::vector<Block> blocks(ranges.size());
  for (std::size_t b = 0; b < ranges.size(); ++b) std::tie(blocks[b].begin, blocks[b].end) = ranges[b];
  count_records(window, window_offset, blocks);
  batch.rows = 0;
  for (Block& block : blocks) {
    block.first_row = batch.rows;
    batch.rows += block.rows;
  }
  batch.features.resize(batch.rows * layout_.features());
  batch.labels.resize(layout_.labelled ? batch.rows : 0);
  tbb::parallel_for(std::size_t{0}, blocks.size(), [&](std::size_t b) {
    try {
      BlockParser(*this, window, window_offset, blocks[b], batch).parse();
    } catch (TextError& error) {
      // The parse may find an error before the one the count met.
      if (!blocks[b].error || error.offset < blocks[b].error->offset) blocks[b].error = std::move(error);
    }
  });
  std::vector<std::optional<TextError>> errors;
  for (auto& block : blocks) errors.push_back(std::move(block.error));
  if (const TextError* error = formats::first_error(errors)) return *error;
  merge_batch(blocks, batch);
  return std::nullopt;
}

// Counts each block's records: quote-free blocks (nearly all) by counting
// lines, others by tokenizing. A count that meets malformed text keeps the
// error and the records before it; parsing that block then finds the first
// error in it, which may come earlier.
void DelimitedParser::count_records(std::string_view window, std::size_t window_offset,
                                    std::vector<Block>& blocks) const {
  tbb::parallel_for(std::size_t{0}, blocks.size(), [&](std::size_t b) {
    Block& block = blocks[b];
    const std::size_t begin = block.begin - window_offset, end = block.end - window_offset;
    if (std::memchr(window.data() + begin, '"', end - begin) == nullptr) {
      block.rows = formats::count_nonempty_lines(window, begin, end);
      return;
    }
    FieldReader reader(window.data(), window.data() + end, delimiter_, window_offset);
    std::vector<Field> fields;
    try {
      for (const char* p = reader.skip_empty_lines(window.data() + begin); p < reader.end();
           p = reader.skip_empty_lines(p)) {
        p = read_record(reader, p, fields, layout_.columns.size());
        ++block.rows;
      }
    } catch (TextError& error) {
      block.error = std::move(error);
    }
  });
}

Table DelimitedParser::empty_table() const {
  Table table;
  const std::size_t features = layout_.features();
  table.label_column = layout_.label;
  table.sample_shape = {static_cast<std::int64_t>(features)};
  table.columns.resize(layout_.columns.size());
  for (std::size_t c = 0; c < layout_.columns.size(); ++c) {
    table.columns[c].name = layout_.columns[c].name;
    table.columns[c].type = layout_.columns[c].type;
    if (layout_.columns[c].date_format) {
      table.columns[c].datetime_format = layout_.columns[c].date_format->notation();
      table.columns[c].has_time = layout_.columns[c].date_format->has_time();
    }
  }
  return table;
}

void DelimitedParser::read_header() {
  std::size_t start = text_.substr(0, 3) == "\xEF\xBB\xBF" ? 3 : 0;
  const char* first = reader_.skip_empty_lines(text_.data() + start);
  if (first == reader_.end())
    fail(reader_.offset(first), std::string("expected ") + (options_.header ? "a header row" : "a data row") +
                                    ", found end of input");
  std::vector<Field> fields;
  const char* after = first;
  try {
    // Not read_record: past the column limit the message names the limit.
    const std::uint64_t limit = options_.max_columns;
    for (bool record_end = false; !record_end;) {
      if (fields.size() == limit)
        fail(reader_.offset(after),
             "expected at most " + std::to_string(limit) + " columns, found " +
                 std::to_string(reader_.count_remaining(after, fields.size())),
             Remedy::kRaiseColumnLimit);
      fields.emplace_back();
      after = reader_.read(after, fields.back(), record_end);
    }
  } catch (const TextError& error) {
    formats::throw_text_error(options_.display_name, text_, error);
  }
  name_columns(fields);
  check_against_reference(fields);
  auto& columns = layout_.columns;
  layout_.data_begin = reader_.offset(options_.header ? after : first);
  layout_.labelled = options_.labelled;
  if (!layout_.labelled) {
    layout_.label = columns.size();  // every column is a feature (a header has at least one)
    return;
  }
  if (columns.size() < 2)
    fail(reader_.offset(first), "expected at least 2 columns (features and a label), found " +
                                    std::to_string(columns.size()));
  layout_.label = options_.label.empty()
                      ? columns.size() - 1
                      : resolve_column(columns, options_.label, Subject::kLabelColumn, options_.display_name);
}

// Names from the header (colN, 1-based, without one or for an empty name),
// which must be unique for --label and --categorical to mean one column.
void DelimitedParser::name_columns(const std::vector<Field>& first_record) {
  auto& columns = layout_.columns;
  columns.resize(first_record.size());
  std::unordered_map<std::string_view, std::size_t> seen;
  for (std::size_t i = 0; i < columns.size(); ++i) {
    columns[i].name = options_.header ? first_record[i].value() : std::string();
    if (columns[i].name.size() > kMaxColumnNameBytes)
      fail(reader_.offset(first_record[i].start),
           "expected a column name of at most " + std::to_string(kMaxColumnNameBytes) + " bytes, found one of " +
               std::to_string(columns[i].name.size()));
    if (columns[i].name.empty()) columns[i].name = "col" + std::to_string(i + 1);
  }
  for (std::size_t i = 0; i < columns.size(); ++i) {
    auto [it, fresh] = seen.emplace(columns[i].name, i);
    if (!fresh)
      fail(reader_.offset(first_record[i].start),
           "expected unique column names, found " + formats::quote_for_message(columns[i].name) +
               " again (column " + std::to_string(it->second + 1) + " has it too)");
  }
}

void DelimitedParser::check_against_reference(const std::vector<Field>& header_fields) const {
  const std::vector<ColumnSchema>* reference = options_.reference;
  if (reference == nullptr) return;
  const auto& columns = layout_.columns;
  if (columns.size() != reference->size())
    fail(reader_.offset(header_fields.front().start),
         "expected " + std::to_string(reference->size()) + " columns as in the train part, found " +
             std::to_string(columns.size()));
  for (std::size_t i = 0; i < columns.size(); ++i)
    if (columns[i].name != (*reference)[i].name)
      fail(reader_.offset(header_fields[i].start),
           "expected column " + std::to_string(i + 1) + " to be " +
               formats::quote_for_message((*reference)[i].name) + " as in the train part, found " +
               formats::quote_for_message(columns[i].name));
}

void DelimitedParser::choose_types() {
  auto& columns = layout_.columns;
  if (options_.reference != nullptr) {
    for (std::size_t i = 0; i < columns.size(); ++i) {
      const ColumnSchema& reference = (*options_.reference)[i];
      columns[i].type = reference.type;
      columns[i].origin = TypeOrigin::kReference;
      if (reference.type != ColumnType::kDatetime) continue;
      std::string why;
      columns[i].date_format = DateTimeFormat::compile(reference.datetime_format, why);
      if (!columns[i].date_format)
        throw corrupt("the train part's date format '" + reference.datetime_format + "' of column '" +
                      reference.name + "': " + why);
    }
  } else {
    for (const std::string& wanted : options_.categorical) {
      ColumnPlan& column = columns[resolve_column(columns, wanted, Subject::kCategoricalColumn, options_.display_name)];
      column.type = ColumnType::kCategorical;
      column.origin = TypeOrigin::kForced;
    }
    force_date_columns();
    if (const auto& typed = options_.typed_columns) {
      for (std::size_t i = 0; i < columns.size(); ++i) {
        if (i == layout_.label || columns[i].origin == TypeOrigin::kForced) continue;
        if (std::find(typed->begin(), typed->end(), columns[i].name) != typed->end()) continue;
        columns[i].type = ColumnType::kCategorical;
        columns[i].origin = TypeOrigin::kForced;
      }
    }
    if (const auto& read = options_.read_columns) {
      for (std::size_t i = 0; i < columns.size(); ++i) {
        if (i == layout_.label || std::find(read->begin(), read->end(), columns[i].name) != read->end()) continue;
        columns[i].skipped = true;
        columns[i].type = ColumnType::kCategorical;
        columns[i].origin = TypeOrigin::kForced;
        columns[i].date_format.reset();
        columns[i].date_option = nullptr;
      }
    }
  }
  infer_types();
  for (std::size_t i = 0; i < columns.size(); ++i) {
    if (columns[i].type != ColumnType::kCategorical || columns[i].skipped) continue;
    columns[i].dictionary = layout_.categorical.size();
    layout_.categorical.push_back(i);
  }
}

// COLUMN=FORMAT options: that column is read as dates in FORMAT, whatever
// its first rows look like; its values must all be written so.
void DelimitedParser::force_date_columns() {
  auto& columns = layout_.columns;
  for (const DateFormatOption& option : options_.date_formats) {
    if (option.column.empty()) continue;
    const std::string given = date_format_option_text(option);
    std::size_t index = columns.size();
    for (std::size_t i = 0; i < columns.size(); ++i)
      if (columns[i].name == option.column) index = i;
    if (index == columns.size() && option.as_trained) continue;  // the caller reports a missing column
    if (index == columns.size()) {
      std::vector<std::string_view> names;
      for (const auto& column : columns) names.push_back(column.name);
      throw Error(ErrorKind::kUsage, Subject::kDateFormat,
                  given + ": no column '" + option.column + "' in " + options_.display_name +
                      did_you_mean(option.column, names) + " (columns: " + column_list(columns) + ")");
    }
    ColumnPlan& column = columns[index];
    if (index == layout_.label)
      throw Error(ErrorKind::kUsage, Subject::kDateFormat,
                  given + ": '" + option.column + "' is the label column, which is never read as dates");
    if (column.origin == TypeOrigin::kForced)
      throw Error(ErrorKind::kUsage, Subject::kDateFormat,
                  given + ": column '" + option.column + "' is " +
                      (column.type == ColumnType::kCategorical ? "also declared categorical" : "given two date formats"));
    std::string why;
    column.date_format = DateTimeFormat::compile(option.format, why);
    if (!column.date_format) throw Error(ErrorKind::kUsage, Subject::kDateFormat, given + ": " + why);
    column.type = ColumnType::kDatetime;
    column.origin = TypeOrigin::kForced;
    column.date_option = &option;
  }
}

namespace {

// What the first rows say about one column whose type is inferred.
struct ColumnEvidence {
  bool all_numbers = true;
  bool any_value = false;         // a non-missing value was seen
  // The recognized date form of the first value, while every later value
  // is written in it too (-1: none, or one that was not).
  int date_form = -1;
  std::vector<char> fits_option;     // per date format given without a column
  std::vector<char> fits_ambiguous;  // per ambiguous form: every value a real date in it
};

}  // namespace

bool DelimitedParser::holds_inference_rows() const {
  const char* p = text_.data() + std::min(layout_.data_begin, text_.size());
  std::vector<Field> fields;
  try {
    for (std::size_t rows = 0; rows < kInferenceRows; ++rows) {
      p = reader_.skip_empty_lines(p);
      if (p == reader_.end()) return false;
      p = read_record(reader_, p, fields, layout_.columns.size());
      if (fields.size() != layout_.columns.size()) return true;
    }
  } catch (const TextError&) {
    return true;
  }
  return true;
}

// A column is numeric when every non-missing value in the first rows parses
// as a number; else datetime when they are all written in the recognized
// form of the first one, or all in a date format given without a column.
// A malformed record ends the look early; the block parser reports it in
// file order with everything else.
void DelimitedParser::infer_types() {
  auto& columns = layout_.columns;
  const bool dates = options_.reference == nullptr;
  std::vector<DateTimeFormat> option_formats;
  if (dates) {
    for (const DateFormatOption& option : options_.date_formats) {
      if (!option.column.empty()) continue;
      std::string why;
      std::optional<DateTimeFormat> format = DateTimeFormat::compile(option.format, why);
      if (!format) throw Error(ErrorKind::kUsage, Subject::kDateFormat, option.format + ": " + why);
      option_formats.push_back(std::move(*format));
    }
  }
  const auto recognized = formats::recognized_formats();
  const auto ambiguous = formats::ambiguous_formats();
  std::vector<ColumnEvidence> evidence(columns.size());
  for (std::size_t i = 0; i < columns.size(); ++i) {
    evidence[i].fits_option.assign(option_formats.size(), 1);
    evidence[i].fits_ambiguous.assign(ambiguous.size(), 1);
  }
  // Dates only where one may come of it: not the label, not a column
  // whose type an option or the train part fixed.
  auto may_be_date = [&](std::size_t i) {
    return dates && i != layout_.label && columns[i].origin == TypeOrigin::kInferred;
  };
  const char* p = text_.data() + layout_.data_begin;
  std::vector<Field> fields;
  float number;
  double days;
  try {
    for (std::size_t rows = 0; rows < kInferenceRows; ++rows) {
      p = reader_.skip_empty_lines(p);
      if (p == reader_.end()) break;
      p = read_record(reader_, p, fields, columns.size());
      if (fields.size() != columns.size()) break;
      for (std::size_t i = 0; i < fields.size(); ++i) {
        if (is_missing(fields[i])) continue;
        ColumnEvidence& seen = evidence[i];
        if (seen.all_numbers && !field_number(fields[i], reader_.end(), number)) seen.all_numbers = false;
        if (!may_be_date(i)) continue;
        // A quoted value with doubled quotes is no date.
        const bool escaped = fields[i].escaped;
        const std::string_view value = trimmed_content(fields[i]);
        auto written_in = [&](const DateTimeFormat& format) {
          return !escaped && format.read(value, days) != DateTimeFormat::Match::kNoMatch;
        };
        if (!seen.any_value) {
          for (std::size_t f = 0; f < recognized.size() && seen.date_form < 0; ++f)
            if (written_in(recognized[f])) seen.date_form = static_cast<int>(f);
        } else if (seen.date_form >= 0 && !written_in(recognized[static_cast<std::size_t>(seen.date_form)])) {
          seen.date_form = -1;
        }
        seen.any_value = true;
        for (std::size_t f = 0; f < option_formats.size(); ++f)
          if (seen.fits_option[f] && !written_in(option_formats[f])) seen.fits_option[f] = 0;
        for (std::size_t f = 0; f < ambiguous.size(); ++f)
          if (seen.fits_ambiguous[f] && (escaped || ambiguous[f].read(value, days) != DateTimeFormat::Match::kOk))
            seen.fits_ambiguous[f] = 0;
      }
    }
  } catch (const TextError&) {
    // Reported by the block parser, in order with errors before it.
  }
  for (std::size_t i = 0; i < columns.size(); ++i) {
    ColumnPlan& column = columns[i];
    if (column.origin != TypeOrigin::kInferred) continue;
    const ColumnEvidence& seen = evidence[i];
    column.type = seen.all_numbers ? ColumnType::kNumeric : ColumnType::kCategorical;
    if (seen.all_numbers || !may_be_date(i)) continue;
    if (seen.date_form >= 0) {
      column.type = ColumnType::kDatetime;
      column.date_format = recognized[static_cast<std::size_t>(seen.date_form)];
      continue;
    }
    for (std::size_t f = 0; f < option_formats.size() && !column.date_format; ++f) {
      if (!seen.fits_option[f]) continue;
      column.type = ColumnType::kDatetime;
      column.origin = TypeOrigin::kDateOption;
      column.date_format = option_formats[f];
    }
    if (column.date_format || options_.date_format_hints == nullptr) continue;
    DateFormatHint hint{column.name, {}};
    for (std::size_t f = 0; f < ambiguous.size(); ++f)
      if (seen.fits_ambiguous[f]) hint.formats.push_back(ambiguous[f].notation());
    if (!hint.formats.empty()) options_.date_format_hints->push_back(std::move(hint));
  }
}

// Numbers a batch's categorical cells in first-seen order over the whole
// file (after the reference's categories) and merges each column's
// statistics, block by block in file order: the same merges, in the same
// order, whether the file comes in one batch or many.
void DelimitedParser::merge_batch(std::vector<Block>& blocks, Table& batch) {
  const auto& plans = layout_.columns;
  const std::size_t columns = plans.size(), label = layout_.label, features = layout_.features();
  const std::size_t slots = layout_.categorical.size();
  if (!merging_started_) {
    merging_started_ = true;
    dictionaries_.resize(slots);
    for (std::size_t slot = 0; slot < slots; ++slot) {
      Dictionary& dictionary = dictionaries_[slot];
      if (options_.reference != nullptr) dictionary.categories = (*options_.reference)[layout_.categorical[slot]].categories;
      for (std::size_t i = 0; i < dictionary.categories.size(); ++i)
        dictionary.codes.emplace(dictionary.categories[i], static_cast<std::uint32_t>(i));
    }
    stats_.resize(columns);  // features, then the label if there is one
    date_ranges_.assign(columns, DateRange{});
  }
  // Per block and categorical column: local code -> global code.
  std::vector<std::vector<std::vector<float>>> global_codes(blocks.size(), std::vector<std::vector<float>>(slots));
  for (std::size_t slot = 0; slot < slots; ++slot) {
    Dictionary& dictionary = dictionaries_[slot];
    for (std::size_t b = 0; b < blocks.size(); ++b) {
      const auto& local = blocks[b].dictionaries[slot].values;
      auto& global = global_codes[b][slot];
      global.resize(local.size());
      for (std::size_t i = 0; i < local.size(); ++i) {
        auto [it, fresh] = dictionary.codes.try_emplace(std::string(local[i]),
                                                         static_cast<std::uint32_t>(dictionary.categories.size()));
        if (fresh) dictionary.categories.emplace_back(local[i]);
        global[i] = static_cast<float>(it->second);
      }
    }
  }

  tbb::parallel_for(std::size_t{0}, blocks.size(), [&](std::size_t b) {
    Block& block = blocks[b];
    block.stats.resize(columns);  // features in order, then the label if there is one
    if (block.rows == 0) return;  // no cells (and the arrays may be empty: no pointer into them)
    float* feature_rows = batch.features.data() + block.first_row * features;
    float* labels = layout_.labelled ? batch.labels.data() + block.first_row : nullptr;
    for (std::size_t slot = 0; slot < slots; ++slot) {
      const std::size_t c = layout_.categorical[slot];
      const std::vector<float>& global = global_codes[b][slot];
      float* cell = c == label ? labels : feature_rows + (c - (c > label));
      std::size_t stride = c == label ? 1 : features;
      for (std::uint64_t r = 0; r < block.rows; ++r, cell += stride)
        if (!std::isnan(*cell)) *cell = global[static_cast<std::size_t>(*cell)];
    }
    formats::add_row_stats(feature_rows, block.rows, features, block.stats.data());
    if (labels != nullptr) formats::add_row_stats(labels, block.rows, 1, &block.stats[features]);
  });
  for (const auto& block : blocks) {
    for (std::size_t i = 0; i < columns; ++i) stats_[i].merge(block.stats[i]);
    for (std::size_t c = 0; c < columns; ++c) date_ranges_[c].merge(block.date_ranges[c]);
  }
}

void DelimitedParser::finish(Table& table) {
  const auto& plans = layout_.columns;
  const std::size_t columns = plans.size(), label = layout_.label, features = layout_.features();
  for (std::size_t slot = 0; slot < layout_.categorical.size(); ++slot) {
    const std::size_t c = layout_.categorical[slot];
    std::vector<std::string>& categories = dictionaries_[slot].categories;
    if (categories.size() > kMaxCategories)
      throw data_error(options_.display_name + ": expected at most " + std::to_string(kMaxCategories) +
                       " distinct values in column '" + plans[c].name + "', found " +
                       std::to_string(categories.size()));
    table.columns[c].categories = std::move(categories);
  }
  for (std::size_t c = 0; c < columns; ++c) {
    std::size_t index = c == label ? features : c < label ? c : c - 1;
    stats_[index].store_into(table.columns[c]);
    if (plans[c].type != ColumnType::kDatetime || stats_[index].count == 0) continue;
    table.columns[c].min = date_ranges_[c].min;
    table.columns[c].max = date_ranges_[c].max;
  }
}

// Reads a file in windows and hands them to a DelimitedParser. Block
// boundaries are split_records' cuts of the whole text (a nominal cut every
// block_bytes after the header, moved to the end of its record by quote
// parity), found one at a time as the text arrives, so every block, every
// dictionary merge and every statistic is what the whole-text parse gets.
class DelimitedScanner {
 public:
  DelimitedScanner(const FileReader& file, char delimiter, const ParseOptions& options,
                   const DelimitedScanCallbacks& callbacks, std::size_t window_bytes, DelimitedScanPeak* peak)
      : file_(file), delimiter_(delimiter), options_(options), callbacks_(callbacks),
        window_bytes_(std::max<std::size_t>(window_bytes, 1)), peak_(peak) {}

  Table scan() {
    try {
      return scan_in_order();
    } catch (const Error& error) {
      // The whole-text parse checks all of the text's encoding first: an
      // encoding error later in the file comes before this one.
      if (error.kind() == ErrorKind::kFailure || utf8_failed_) throw;
      if (auto encoding = utf8_error_in_rest()) throw_at(*encoding);
      throw;
    }
  }

 private:
  Table scan_in_order() {
    read_more(window_bytes_);
    // The header record whole (a record ends at a '\n' outside quotes).
    for (;;) {
      const std::string_view text = buffer_;
      const std::size_t start = text.substr(0, 3) == "\xEF\xBB\xBF" ? 3 : 0;
      FieldReader reader(text.data(), text.data() + text.size(), delimiter_);
      const char* first = reader.skip_empty_lines(text.data() + start);
      if (at_eof() ||
          (first < reader.end() && formats::record_end_after(text, reader.offset(first), false) < text.size()))
        break;
      read_more(buffer_.size());
    }
    DelimitedParser parser(buffer_, delimiter_, options_);
    parser.read_header();
    block_bytes_ = parser.block_bytes();
    block_start_ = parity_to_ = parser.data_begin();
    next_nominal_ = block_start_ + block_bytes_;
    // Types come from the first records: give the parser whole records
    // until it has them all (nothing is dropped before the first batch, so
    // the buffer still starts at offset 0).
    for (;;) {
      cut_blocks();
      const std::size_t prefix_end = cuts_done_ ? read_to_ : ready_.empty() ? block_start_ : ready_.back().second;
      parser.set_text(std::string_view(buffer_).substr(0, prefix_end));
      if (at_eof() || parser.holds_inference_rows()) break;
      read_more(buffer_.size());
    }
    parser.choose_types();

    Table result = parser.empty_table();
    Table batch = parser.empty_table();
    std::uint64_t rows = 0;
    for (;;) {
      cut_blocks();
      if (!ready_.empty() && (cuts_done_ || ready_.back().second - ready_.front().first >= window_bytes_)) {
        if (auto error = parser.parse_batch(buffer_, buffer_begin_, ready_, batch)) throw_at(*error);
        rows += batch.rows;
        if (peak_ != nullptr) peak_->batch_rows = std::max(peak_->batch_rows, batch.rows);
        if (batch.rows > 0) hand_on_categories(parser, batch);
        if (batch.rows > 0 && callbacks_.on_rows) callbacks_.on_rows(batch);
        ready_.clear();
        drop_before(std::min(block_start_, parity_to_));
      }
      if (cuts_done_ && ready_.empty()) break;
      if (!at_eof()) read_more(window_bytes_);
    }
    if (rows == 0)
      throw_at(TextError{file_.size(), std::string("expected a data row") + (options_.header ? " after the header" : "") +
                                           ", found end of input"});
    parser.finish(result);
    result.rows = rows;
    return result;
  }

  bool at_eof() const { return read_to_ == file_.size(); }

  // The categorical values the last batch added, per column, to
  // on_categories.
  void hand_on_categories(const DelimitedParser& parser, const Table& batch) {
    if (!callbacks_.on_categories) return;
    const std::vector<std::size_t>& columns = parser.categorical_columns();
    categories_handed_.resize(columns.size());
    for (std::size_t slot = 0; slot < columns.size(); ++slot) {
      const std::vector<std::string>& values = parser.categories(slot);
      if (values.size() == categories_handed_[slot]) continue;
      const auto added = std::span<const std::string>(values).subspan(categories_handed_[slot]);
      callbacks_.on_categories(batch, columns[slot], added);
      categories_handed_[slot] = values.size();
    }
  }

  // Appends up to `bytes` more of the file to the buffer, hands them on and
  // checks the encoding of every whole line read so far.
  void read_more(std::size_t bytes) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(bytes, file_.size() - read_to_));
    const std::size_t old = buffer_.size();
    buffer_.resize(old + n);
    file_.read_at(read_to_, std::span<char>(buffer_.data() + old, n));
    read_to_ += n;
    if (at_eof()) file_.check_end();
    if (peak_ != nullptr) peak_->buffer_bytes = std::max(peak_->buffer_bytes, buffer_.size());
    if (callbacks_.on_bytes) callbacks_.on_bytes(std::string_view(buffer_).substr(old));
    std::size_t check_to = read_to_;
    if (!at_eof()) {
      const std::size_t newline = std::string_view(buffer_).rfind('\n');
      check_to = newline == std::string_view::npos ? buffer_begin_ : buffer_begin_ + newline + 1;
    }
    if (check_to <= utf8_checked_to_) return;
    const std::string_view unchecked =
        std::string_view(buffer_).substr(utf8_checked_to_ - buffer_begin_, check_to - utf8_checked_to_);
    if (auto error = formats::first_utf8_error(unchecked)) {
      error->offset += utf8_checked_to_;
      utf8_failed_ = true;
      throw_at(*error);
    }
    utf8_checked_to_ = check_to;
  }

  void drop_before(std::size_t offset) {
    buffer_.erase(0, offset - buffer_begin_);
    buffer_begin_ = offset;
  }

  // split_records, one nominal cut at a time: appends to ready_ every block
  // whose end the buffer decides.
  void cut_blocks() {
    if (cuts_done_) return;
    const std::string_view text = buffer_;
    while (next_nominal_ < file_.size()) {
      if (next_nominal_ > read_to_) return;
      if (parity_to_ < next_nominal_) {
        in_quote_ ^= formats::odd_quote_count(buffer_.data() + (parity_to_ - buffer_begin_), next_nominal_ - parity_to_);
        parity_to_ = next_nominal_;
      }
      const std::size_t cut = buffer_begin_ + formats::record_end_after(text, next_nominal_ - buffer_begin_, in_quote_);
      if (cut == read_to_ && !at_eof()) return;  // the record may go on past what is read
      if (cut > block_start_ && cut < file_.size()) {
        ready_.emplace_back(block_start_, cut);
        block_start_ = cut;
      }
      next_nominal_ += block_bytes_;
    }
    if (!at_eof()) return;
    ready_.emplace_back(block_start_, file_.size());
    cuts_done_ = true;
  }

  // The file's first encoding error after what read_more checked, if any;
  // read again piece by piece, whole lines at a time.
  std::optional<TextError> utf8_error_in_rest() const {
    std::string piece;
    std::uint64_t at = utf8_checked_to_;
    while (at < file_.size()) {
      const std::size_t n = static_cast<std::size_t>(
          std::min<std::uint64_t>(std::max(window_bytes_, piece.size() * 2), file_.size() - at));
      piece.resize(n);
      file_.read_at(at, std::span<char>(piece.data(), n));
      std::size_t whole = n;
      if (at + n < file_.size()) {
        const std::size_t newline = piece.rfind('\n');
        if (newline == std::string::npos) continue;  // a longer line: read a larger piece
        whole = newline + 1;
      }
      if (auto error = formats::first_utf8_error(std::string_view(piece).substr(0, whole))) {
        error->offset += at;
        return error;
      }
      at += whole;
      piece.clear();
    }
    return std::nullopt;
  }

  // "NAME:LINE:COLUMN" of a file offset, as formats::location gives it for
  // the whole text; counts the lines by reading the file again.
  std::string location_of(std::uint64_t offset) const {
    offset = std::min(offset, file_.size());
    std::string piece;
    std::uint64_t lines = 1, line_start = 0;
    for (std::uint64_t at = 0; at < offset;) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(window_bytes_, offset - at));
      piece.resize(n);
      file_.read_at(at, std::span<char>(piece.data(), n));
      lines += static_cast<std::uint64_t>(std::count(piece.begin(), piece.end(), '\n'));
      const std::size_t newline = piece.rfind('\n');
      if (newline != std::string::npos) line_start = at + newline + 1;
      at += n;
    }
    return options_.display_name + ":" + std::to_string(lines) + ":" + std::to_string(offset - line_start + 1);
  }

  [[noreturn]] void throw_at(const TextError& error) const {
    throw data_error(location_of(error.offset) + ": " + error.what).with(error.remedy, error.remedy_argument);
  }

  const FileReader& file_;
  char delimiter_;
  const ParseOptions& options_;
  const DelimitedScanCallbacks& callbacks_;
  std::size_t window_bytes_;
  DelimitedScanPeak* peak_;

  std::string buffer_;            // the file's bytes [buffer_begin_, read_to_)
  std::size_t buffer_begin_ = 0;
  std::size_t read_to_ = 0;
  std::size_t utf8_checked_to_ = 0;
  bool utf8_failed_ = false;

  std::size_t block_bytes_ = 0;
  std::size_t next_nominal_ = 0;  // the next nominal cut
  std::size_t parity_to_ = 0;     // quote parity is known up to here...
  bool in_quote_ = false;         // ...and is this
  std::size_t block_start_ = 0;   // where the next block starts
  bool cuts_done_ = false;
  std::vector<std::pair<std::size_t, std::size_t>> ready_;  // blocks cut, not yet parsed
  std::vector<std::size_t> categories_handed_;  // per dictionary slot: values passed to on_categories
};

}  // namespace

Table parse_delimited(std::string_view text, char delimiter, const ParseOptions& options) {
  return DelimitedParser(text, delimiter, options).parse();
}

Table scan_delimited(const FileReader& file, char delimiter, const ParseOptions& options,
                     const DelimitedScanCallbacks& callbacks, std::size_t window_bytes, DelimitedScanPeak* peak) {
  return DelimitedScanner(file, delimiter, options, callbacks, window_bytes, peak).scan();
}

}  // namespace anneal
