#include "serve/request_decoder.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>

#include <simdjson.h>

namespace anneal::serve {
namespace {

using Element = simdjson::dom::element;
using ElementType = simdjson::dom::element_type;

[[noreturn]] void bad_request(const std::string& message) { throw RequestError(400, message); }

void check_rows(std::uint64_t rows, std::uint64_t max_rows) {
  if (rows > max_rows)
    throw RequestError(413, std::to_string(rows) + " rows in one request; the limit is " + std::to_string(max_rows),
                       "rows");
}

// A body parsed by simdjson (its DOM: a few microseconds for a request of
// thousands of numbers, where a DOM of nlohmann::json nodes took most of
// the request's time). The parser owns the document the elements point
// into, so it lives as long as they are read.
class Document {
 public:
  explicit Document(std::string_view body) {
    // Depth is bounded (simdjson's parser refuses more than 1024 levels, and
    // walks them without recursion); the body is already bounded in size.
    if (parser_.parse(body.data(), body.size(), /*realloc_if_needed=*/true).get(root_) != simdjson::SUCCESS)
      bad_request("the body is not valid JSON");
    if (root_.type() != ElementType::OBJECT) bad_request("the body must be a JSON object");
  }
  simdjson::dom::object root() const { return simdjson::dom::object(root_); }

 private:
  simdjson::dom::parser parser_;
  Element root_;
};

// The member `key` of `object`, or std::nullopt.
std::optional<Element> member(const simdjson::dom::object& object, std::string_view key) {
  Element value;
  if (object.at_key(key).get(value) != simdjson::SUCCESS) return std::nullopt;
  return value;
}

bool is_number(const Element& value) {
  const ElementType t = value.type();
  return t == ElementType::INT64 || t == ElementType::UINT64 || t == ElementType::DOUBLE;
}

// JSON's name for the type of `value`, for errors.
std::string type_name(const Element& value) {
  switch (value.type()) {
    case ElementType::ARRAY: return "array";
    case ElementType::OBJECT: return "object";
    case ElementType::STRING: return "string";
    case ElementType::BOOL: return "boolean";
    case ElementType::NULL_VALUE: return "null";
    default: return "number";
  }
}

std::string string_of(const Element& value) { return std::string(std::string_view(value)); }

// Writes number `value` as text at `text` (64 bytes): integers as written,
// other numbers as the shortest text that reads back as the same double.
// Returns the end.
char* number_text(const Element& value, char* text) {
  switch (value.type()) {
    case ElementType::INT64: return std::to_chars(text, text + 64, std::int64_t(value)).ptr;
    case ElementType::UINT64: return std::to_chars(text, text + 64, std::uint64_t(value)).ptr;
    default: return std::to_chars(text, text + 64, double(value)).ptr;  // at most 24 characters
  }
}

// A JSON scalar as the text of a CSV cell: numbers as number_text, strings
// as they are, null as an empty (missing) cell. `where` names the tensor
// or column in an error.
std::string cell_text(const Element& value, const std::string& where) {
  char text[64];
  switch (value.type()) {
    case ElementType::NULL_VALUE: return "";
    case ElementType::STRING: return string_of(value);
    case ElementType::INT64:
    case ElementType::UINT64:
    case ElementType::DOUBLE: return std::string(text, static_cast<std::size_t>(number_text(value, text) - text));
    case ElementType::BOOL: bad_request(where + ": true/false is not a value a model reads");
    default: bad_request(where + ": expected a number, a string or null, not " + type_name(value));
  }
}

// Appends `value` to `csv` as one CSV cell (cell_text, quoted where it
// must be). Numbers go straight into the text: no string per cell.
void append_cell(std::string& csv, const Element& value, const std::string& where) {
  char text[64];
  switch (value.type()) {
    case ElementType::NULL_VALUE: return;
    case ElementType::INT64:
    case ElementType::UINT64:
    case ElementType::DOUBLE: csv.append(text, static_cast<std::size_t>(number_text(value, text) - text)); return;
    default: csv += csv_field(cell_text(value, where));
  }
}

// A JSON scalar as a raw feature value: numbers, null (missing: NaN).
float raw_value(const Element& value, const std::string& where) {
  double v;
  switch (value.type()) {
    case ElementType::NULL_VALUE: return std::numeric_limits<float>::quiet_NaN();
    case ElementType::DOUBLE: v = value.get_double().value_unsafe(); break;
    case ElementType::INT64: v = static_cast<double>(value.get_int64().value_unsafe()); break;
    case ElementType::UINT64: v = static_cast<double>(value.get_uint64().value_unsafe()); break;
    default: bad_request(where + ": expected a number or null, not " + type_name(value));
  }
  if (std::isfinite(v) && std::fabs(v) > std::numeric_limits<float>::max())
    bad_request(where + ": " + cell_text(value, where) + " is out of the FP32 range");
  return static_cast<float>(v);
}

// Appends the scalars of `data` (nested arrays, row-major) to `out`.
void flatten(const Element& data, std::vector<Element>& out, const std::string& where, int depth = 0) {
  if (data.type() != ElementType::ARRAY) {
    out.push_back(data);
    return;
  }
  if (depth > 8) bad_request(where + ": data nested deeper than a tensor's shape");
  // Held by value: value_unsafe() hands out the inside of a temporary.
  const simdjson::dom::array items = data.get_array().value_unsafe();
  for (Element item : items) {
    if (item.type() == ElementType::ARRAY) flatten(item, out, where, depth + 1);
    else out.push_back(item);
  }
}

void append_header(std::string& csv, const std::vector<std::string>& names) {
  for (std::size_t i = 0; i < names.size(); ++i) csv.append(i ? "," : "").append(csv_field(names[i]));
  csv += '\n';
}

// One tensor of an infer request, checked: its name, shape and scalars.
struct Tensor {
  std::string name;
  std::vector<std::uint64_t> shape;
  std::string datatype;
  std::vector<Element> values;
};

constexpr const char* kNumericTypes[] = {"BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8",
                                         "INT16", "INT32", "INT64", "FP16", "FP32", "FP64"};

// `body_bytes`: the size of the body it came from.
Tensor read_tensor(const Element& input, std::size_t index, std::size_t body_bytes) {
  Tensor t;
  const std::string where = "inputs[" + std::to_string(index) + "]";
  if (input.type() != ElementType::OBJECT) bad_request(where + " must be an object");
  const simdjson::dom::object fields(input);
  std::optional<Element> name = member(fields, "name");
  if (!name || name->type() != ElementType::STRING) bad_request(where + ": \"name\" must be a string");
  t.name = string_of(*name);
  const std::string tensor = "input '" + t.name + "'";
  std::optional<Element> shape = member(fields, "shape");
  if (!shape || shape->type() != ElementType::ARRAY || simdjson::dom::array(*shape).size() == 0)
    bad_request(tensor + ": \"shape\" must be a non-empty array");
  std::uint64_t elements = 1;
  for (Element d : simdjson::dom::array(*shape)) {
    const bool non_negative = d.type() == ElementType::UINT64 ||
                              (d.type() == ElementType::INT64 && std::int64_t(d) >= 0);
    if (!non_negative) bad_request(tensor + ": \"shape\" must hold non-negative integers");
    const auto n = d.type() == ElementType::UINT64 ? std::uint64_t(d) : static_cast<std::uint64_t>(std::int64_t(d));
    if (n != 0 && elements > std::numeric_limits<std::uint64_t>::max() / n) bad_request(tensor + ": shape too large");
    elements *= n;
    t.shape.push_back(n);
  }
  std::optional<Element> datatype = member(fields, "datatype");
  if (!datatype || datatype->type() != ElementType::STRING) bad_request(tensor + ": \"datatype\" must be a string");
  t.datatype = string_of(*datatype);
  bool known = t.datatype == "BYTES";
  for (const char* type : kNumericTypes) known = known || t.datatype == type;
  if (!known) bad_request(tensor + ": unknown datatype '" + t.datatype + "'");
  if (t.datatype == "BOOL") bad_request(tensor + ": BOOL is not a type a model reads");
  std::optional<Element> data = member(fields, "data");
  if (!data) bad_request(tensor + ": no \"data\"");
  // Room for the values the shape promises, as far as the body could hold
  // them (each takes at least two bytes of it): a shape is the client's
  // word, not a reason to allocate.
  t.values.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(elements, body_bytes / 2 + 1)));
  flatten(*data, t.values, tensor);
  if (t.values.size() != elements)
    bad_request(tensor + ": its shape holds " + std::to_string(elements) + " values, its data " +
                std::to_string(t.values.size()));
  const bool bytes = t.datatype == "BYTES";
  for (const Element& v : t.values) {
    const ElementType type = v.type();
    if (type == ElementType::NULL_VALUE) continue;
    if (bytes) {
      if (type != ElementType::STRING) bad_request(tensor + ": BYTES data must be strings");
    } else if (!is_number(v)) {
      bad_request(tensor + ": " + t.datatype + " data must be numbers (null for a missing value), not " + type_name(v));
    }
  }
  return t;
}

DecodedRows raw_rows(const std::vector<Element>& values, std::uint64_t rows, const std::string& where) {
  DecodedRows out;
  out.rows = rows;
  out.raw.reserve(values.size());
  for (const Element& v : values) out.raw.push_back(raw_value(v, where));
  return out;
}

}  // namespace

std::string csv_field(std::string_view text) {
  const bool quote = text.find_first_of(",\t\"\n\r") != std::string_view::npos ||
                     (!text.empty() && (text.front() == ' ' || text.back() == ' '));
  if (!quote) return std::string(text);
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

DecodedRows decode_infer_request(std::string_view body, const InputShape& shape, std::uint64_t max_rows) {
  const Document document(body);
  const simdjson::dom::object request = document.root();
  std::string id;
  if (std::optional<Element> found = member(request, "id")) {
    if (found->type() != ElementType::STRING) bad_request("\"id\" must be a string");
    id = string_of(*found);
  }
  std::optional<Element> inputs = member(request, "inputs");
  if (!inputs || inputs->type() != ElementType::ARRAY || simdjson::dom::array(*inputs).size() == 0)
    bad_request("\"inputs\" must be a non-empty array of tensors");
  std::vector<Tensor> tensors;
  for (Element input : simdjson::dom::array(*inputs)) tensors.push_back(read_tensor(input, tensors.size(), body.size()));

  DecodedRows out;
  // One tensor of rank 2 or more: a whole row per first-axis entry.
  if (tensors.size() == 1 && tensors[0].shape.size() >= 2) {
    const Tensor& t = tensors[0];
    const std::uint64_t rows = t.shape[0];
    check_rows(rows, max_rows);
    const std::uint64_t width = rows ? t.values.size() / rows : 0;
    const std::size_t want = shape.delimited ? shape.columns.size() : shape.raw_width;
    if (rows && width != want)
      bad_request("input '" + t.name + "': rows of " + std::to_string(width) + " values; the model takes " +
                  std::to_string(want) + " per row");
    if (!shape.delimited) {
      if (t.datatype == "BYTES") bad_request("input '" + t.name + "': the model takes numbers, not BYTES");
      out = raw_rows(t.values, rows, "input '" + t.name + "'");
    } else {
      out.rows = rows;
      append_header(out.csv, shape.columns);
      const std::string where = "input '" + t.name + "'";
      for (std::uint64_t r = 0; r < rows; ++r) {
        for (std::size_t c = 0; c < want; ++c) {
          if (c) out.csv += ',';
          append_cell(out.csv, t.values[r * want + c], where);
        }
        out.csv += '\n';
      }
    }
    out.request_id = id;
    return out;
  }
  if (!shape.delimited)
    bad_request("the model takes one tensor of shape [N, " + std::to_string(shape.raw_width) + "]");
  // Named column tensors: one per column, [N] or [N, 1], all of N rows.
  const std::uint64_t rows = tensors[0].shape[0];
  check_rows(rows, max_rows);
  std::vector<std::string> names;
  for (const Tensor& t : tensors) {
    if (t.shape[0] != rows)
      bad_request("input '" + t.name + "' has " + std::to_string(t.shape[0]) + " rows; input '" + tensors[0].name +
                  "' has " + std::to_string(rows));
    if (t.values.size() != rows)
      bad_request("input '" + t.name + "': a column tensor holds one value per row (shape [N] or [N, 1])");
    names.push_back(t.name);
  }
  out.rows = rows;
  append_header(out.csv, names);
  std::vector<std::string> where;
  for (const Tensor& t : tensors) where.push_back("input '" + t.name + "'");
  for (std::uint64_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < tensors.size(); ++c) {
      if (c) out.csv += ',';
      append_cell(out.csv, tensors[c].values[r], where[c]);
    }
    out.csv += '\n';
  }
  out.request_id = id;
  return out;
}

DecodedRows decode_mlflow_json(std::string_view body, const InputShape& shape, std::uint64_t max_rows) {
  const Document document(body);
  const simdjson::dom::object request = document.root();
  DecodedRows out;
  std::vector<std::string> names;
  // Each row's cells, in the order of `names`; std::nullopt: a record
  // without that key (a missing cell).
  std::vector<std::vector<std::optional<Element>>> rows;
  if (std::optional<Element> split = member(request, "dataframe_split")) {
    if (split->type() != ElementType::OBJECT) bad_request("\"dataframe_split\" must be an object");
    const simdjson::dom::object fields(*split);
    std::optional<Element> columns = member(fields, "columns");
    std::optional<Element> data = member(fields, "data");
    if (!columns || columns->type() != ElementType::ARRAY) bad_request("dataframe_split: \"columns\" must be an array");
    if (!data || data->type() != ElementType::ARRAY) bad_request("dataframe_split: \"data\" must be an array of rows");
    for (Element c : simdjson::dom::array(*columns)) {
      if (c.type() != ElementType::STRING) bad_request("dataframe_split: column names must be strings");
      names.push_back(string_of(c));
    }
    const simdjson::dom::array data_rows(*data);
    check_rows(data_rows.size(), max_rows);
    for (Element row : data_rows) {
      if (row.type() != ElementType::ARRAY || simdjson::dom::array(row).size() != names.size())
        bad_request("dataframe_split: row " + std::to_string(rows.size()) + " must be an array of " +
                    std::to_string(names.size()) + " values");
      std::vector<std::optional<Element>> cells;
      for (Element cell : simdjson::dom::array(row)) cells.emplace_back(cell);
      rows.push_back(std::move(cells));
    }
  } else if (std::optional<Element> records = member(request, "dataframe_records")) {
    if (records->type() != ElementType::ARRAY) bad_request("\"dataframe_records\" must be an array of objects");
    const simdjson::dom::array all(*records);
    check_rows(all.size(), max_rows);
    // The columns: every key of every record, in order of first appearance.
    for (Element record : all) {
      if (record.type() != ElementType::OBJECT) bad_request("dataframe_records: each record must be an object");
      for (simdjson::dom::key_value_pair field : simdjson::dom::object(record))
        if (std::find(names.begin(), names.end(), field.key) == names.end()) names.emplace_back(field.key);
    }
    for (Element record : all) {
      std::vector<std::optional<Element>> cells;
      for (const std::string& name : names) cells.push_back(member(simdjson::dom::object(record), name));
      rows.push_back(std::move(cells));
    }
  } else {
    bad_request("expected \"dataframe_split\" or \"dataframe_records\"");
  }
  out.rows = rows.size();
  if (!shape.delimited) {
    // An image or LIBSVM model: its raw values, one column after another.
    if (names.size() != shape.raw_width)
      bad_request(std::to_string(names.size()) + " columns; the model takes " + std::to_string(shape.raw_width) +
                  " values per row");
    out.raw.reserve(rows.size() * names.size());
    for (const auto& row : rows)
      for (const std::optional<Element>& cell : row)
        out.raw.push_back(cell ? raw_value(*cell, "data") : std::numeric_limits<float>::quiet_NaN());
    return out;
  }
  append_header(out.csv, names);
  std::vector<std::string> where;
  for (const std::string& name : names) where.push_back("column '" + name + "'");
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < row.size(); ++c) {
      if (c) out.csv += ',';
      if (row[c]) append_cell(out.csv, *row[c], where[c]);
    }
    out.csv += '\n';
  }
  return out;
}

DecodedRows decode_csv_body(std::string_view body, const InputShape& shape, std::uint64_t max_rows) {
  if (!shape.delimited) throw RequestError(415, "the model reads tensors, not CSV (it was not trained on CSV)");
  // Records: line ends outside quoted fields, less the header; a last
  // line without its line end counts too.
  std::uint64_t records = 0;
  bool quoted = false, content = false;
  for (char c : body) {
    if (c == '"') quoted = !quoted;
    if (!quoted && c == '\n') {
      if (content) ++records;
      content = false;
    } else if (c != '\r') {
      content = true;
    }
  }
  if (content) ++records;
  DecodedRows out;
  out.rows = records ? records - 1 : 0;
  check_rows(out.rows, max_rows);
  out.csv.assign(body);
  return out;
}

}  // namespace anneal::serve
