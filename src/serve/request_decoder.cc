#include "serve/request_decoder.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

namespace anneal::serve {
namespace {

using nlohmann::json;

[[noreturn]] void bad_request(const std::string& message) { throw RequestError(400, message); }

void check_rows(std::uint64_t rows, std::uint64_t max_rows) {
  if (rows > max_rows)
    throw RequestError(413, std::to_string(rows) + " rows in one request; the limit is " + std::to_string(max_rows),
                       "rows");
}

json parse_json(std::string_view body) {
  // Depth is bounded by the body limit; nlohmann's parser is iterative
  // for arrays and objects alike, so deep nesting cannot overflow the stack.
  json document = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) bad_request("the body is not valid JSON");
  if (!document.is_object()) bad_request("the body must be a JSON object");
  return document;
}

// A JSON scalar as the text of a CSV cell: numbers as the shortest text
// that reads back as the same double, strings as they are, null as an
// empty (missing) cell.
std::string cell_text(const json& value, const std::string& where) {
  switch (value.type()) {
    case json::value_t::null: return "";
    case json::value_t::string: return value.get_ref<const std::string&>();
    case json::value_t::number_integer: return std::to_string(value.get<std::int64_t>());
    case json::value_t::number_unsigned: return std::to_string(value.get<std::uint64_t>());
    case json::value_t::number_float: {
      char text[64];
      const auto [end, ec] = std::to_chars(text, text + sizeof text, value.get<double>());
      if (ec != std::errc()) bad_request(where + ": a number that cannot be written");
      return std::string(text, end);
    }
    case json::value_t::boolean: bad_request(where + ": true/false is not a value a model reads");
    default: bad_request(where + ": expected a number, a string or null, not " + std::string(value.type_name()));
  }
}

// A JSON scalar as a raw feature value: numbers, null (missing: NaN).
float raw_value(const json& value, const std::string& where) {
  if (value.is_null()) return std::numeric_limits<float>::quiet_NaN();
  if (!value.is_number()) bad_request(where + ": expected a number or null, not " + std::string(value.type_name()));
  const double v = value.get<double>();
  if (std::isfinite(v) && std::fabs(v) > std::numeric_limits<float>::max())
    bad_request(where + ": " + cell_text(value, where) + " is out of the FP32 range");
  return static_cast<float>(v);
}

// Appends the scalars of `data` (nested arrays, row-major) to `out`.
void flatten(const json& data, std::vector<const json*>& out, const std::string& where, int depth = 0) {
  if (!data.is_array()) {
    out.push_back(&data);
    return;
  }
  if (depth > 8) bad_request(where + ": data nested deeper than a tensor's shape");
  for (const json& item : data) flatten(item, out, where, depth + 1);
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
  std::vector<const json*> values;
};

constexpr const char* kNumericTypes[] = {"BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8",
                                         "INT16", "INT32", "INT64", "FP16", "FP32", "FP64"};

Tensor read_tensor(const json& input, std::size_t index) {
  Tensor t;
  const std::string where = "inputs[" + std::to_string(index) + "]";
  if (!input.is_object()) bad_request(where + " must be an object");
  auto name = input.find("name");
  if (name == input.end() || !name->is_string()) bad_request(where + ": \"name\" must be a string");
  t.name = name->get<std::string>();
  const std::string tensor = "input '" + t.name + "'";
  auto shape = input.find("shape");
  if (shape == input.end() || !shape->is_array() || shape->empty())
    bad_request(tensor + ": \"shape\" must be a non-empty array");
  std::uint64_t elements = 1;
  for (const json& d : *shape) {
    if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<std::int64_t>() >= 0))
      bad_request(tensor + ": \"shape\" must hold non-negative integers");
    const auto n = d.get<std::uint64_t>();
    if (n != 0 && elements > std::numeric_limits<std::uint64_t>::max() / n) bad_request(tensor + ": shape too large");
    elements *= n;
    t.shape.push_back(n);
  }
  auto datatype = input.find("datatype");
  if (datatype == input.end() || !datatype->is_string()) bad_request(tensor + ": \"datatype\" must be a string");
  t.datatype = datatype->get<std::string>();
  bool known = t.datatype == "BYTES";
  for (const char* type : kNumericTypes) known = known || t.datatype == type;
  if (!known) bad_request(tensor + ": unknown datatype '" + t.datatype + "'");
  if (t.datatype == "BOOL") bad_request(tensor + ": BOOL is not a type a model reads");
  auto data = input.find("data");
  if (data == input.end()) bad_request(tensor + ": no \"data\"");
  flatten(*data, t.values, tensor);
  if (t.values.size() != elements)
    bad_request(tensor + ": its shape holds " + std::to_string(elements) + " values, its data " +
                std::to_string(t.values.size()));
  for (const json* v : t.values) {
    if (t.datatype == "BYTES") {
      if (!v->is_string() && !v->is_null()) bad_request(tensor + ": BYTES data must be strings");
    } else if (!v->is_number() && !v->is_null()) {
      bad_request(tensor + ": " + t.datatype + " data must be numbers (null for a missing value), not " +
                  std::string(v->type_name()));
    }
  }
  return t;
}

DecodedRows raw_rows(const std::vector<const json*>& values, std::uint64_t rows, const std::string& where) {
  DecodedRows out;
  out.rows = rows;
  out.raw.reserve(values.size());
  for (const json* v : values) out.raw.push_back(raw_value(*v, where));
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
  const json request = parse_json(body);
  std::string id;
  if (auto found = request.find("id"); found != request.end()) {
    if (!found->is_string()) bad_request("\"id\" must be a string");
    id = found->get<std::string>();
  }
  auto inputs = request.find("inputs");
  if (inputs == request.end() || !inputs->is_array() || inputs->empty())
    bad_request("\"inputs\" must be a non-empty array of tensors");
  std::vector<Tensor> tensors;
  for (std::size_t i = 0; i < inputs->size(); ++i) tensors.push_back(read_tensor((*inputs)[i], i));

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
      for (std::uint64_t r = 0; r < rows; ++r) {
        for (std::size_t c = 0; c < want; ++c) {
          if (c) out.csv += ',';
          out.csv += csv_field(cell_text(*t.values[r * want + c], "input '" + t.name + "'"));
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
  for (std::uint64_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < tensors.size(); ++c) {
      if (c) out.csv += ',';
      out.csv += csv_field(cell_text(*tensors[c].values[r], "input '" + tensors[c].name + "'"));
    }
    out.csv += '\n';
  }
  out.request_id = id;
  return out;
}

DecodedRows decode_mlflow_json(std::string_view body, const InputShape& shape, std::uint64_t max_rows) {
  const json request = parse_json(body);
  DecodedRows out;
  std::vector<std::string> names;
  std::vector<std::vector<const json*>> rows;
  static const json kNull;
  if (auto split = request.find("dataframe_split"); split != request.end()) {
    if (!split->is_object()) bad_request("\"dataframe_split\" must be an object");
    auto columns = split->find("columns");
    auto data = split->find("data");
    if (columns == split->end() || !columns->is_array()) bad_request("dataframe_split: \"columns\" must be an array");
    if (data == split->end() || !data->is_array()) bad_request("dataframe_split: \"data\" must be an array of rows");
    for (const json& c : *columns) {
      if (!c.is_string()) bad_request("dataframe_split: column names must be strings");
      names.push_back(c.get<std::string>());
    }
    check_rows(data->size(), max_rows);
    for (std::size_t r = 0; r < data->size(); ++r) {
      const json& row = (*data)[r];
      if (!row.is_array() || row.size() != names.size())
        bad_request("dataframe_split: row " + std::to_string(r) + " must be an array of " +
                    std::to_string(names.size()) + " values");
      std::vector<const json*> cells;
      for (const json& cell : row) cells.push_back(&cell);
      rows.push_back(std::move(cells));
    }
  } else if (auto records = request.find("dataframe_records"); records != request.end()) {
    if (!records->is_array()) bad_request("\"dataframe_records\" must be an array of objects");
    check_rows(records->size(), max_rows);
    // The columns: every key of every record, in order of first appearance.
    for (const json& record : *records) {
      if (!record.is_object()) bad_request("dataframe_records: each record must be an object");
      for (auto it = record.begin(); it != record.end(); ++it)
        if (std::find(names.begin(), names.end(), it.key()) == names.end()) names.push_back(it.key());
    }
    for (const json& record : *records) {
      std::vector<const json*> cells;
      for (const std::string& name : names) {
        auto found = record.find(name);
        cells.push_back(found == record.end() ? &kNull : &*found);
      }
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
    std::vector<const json*> values;
    for (const auto& row : rows) values.insert(values.end(), row.begin(), row.end());
    return raw_rows(values, out.rows, "data");
  }
  append_header(out.csv, names);
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < row.size(); ++c) {
      if (c) out.csv += ',';
      out.csv += csv_field(cell_text(*row[c], "column '" + names[c] + "'"));
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
