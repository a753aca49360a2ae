// Request bodies turned into the rows a model predicts on: the Open
// Inference Protocol's infer request (named column tensors, or one [N,F]
// tensor), MLflow's dataframe_split and dataframe_records, and CSV. Rows
// for a model that reads delimited text become CSV text with a header line,
// which anneal/prediction.h then parses exactly as `anneal predict` parses a
// file; rows for an image or LIBSVM model become its raw feature values.
// Pure functions of their inputs: no I/O, thread-safe. Internal to
// src/serve/ (and its fuzz target).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>


namespace anneal::serve {

// A request the server refuses: the HTTP status (4xx), the message, and
// the limit it broke ("rows", ...) or "" when none.
class RequestError : public std::runtime_error {
 public:
  RequestError(int status, const std::string& message, std::string limit = "")
      : std::runtime_error(message), status_(status), limit_(std::move(limit)) {}
  int status() const { return status_; }
  const std::string& limit() const { return limit_; }

 private:
  int status_;
  std::string limit_;
};

// What the decoder needs to know of a model's input.
struct InputShape {
  // True: rows are CSV text whose header names `columns` (the model's
  // feature columns, in its order); false: rows are `raw_width` floats.
  bool delimited = true;
  std::vector<std::string> columns;
  std::size_t raw_width = 0;
};

struct DecodedRows {
  std::uint64_t rows = 0;
  std::string csv;              // delimited: a header line, then one line per row
  std::vector<float> raw;       // raw: rows x raw_width
  std::string request_id;       // the infer request's "id", echoed in its answer
};

// The body of POST /v2/models/{name}/infer (JSON). 400 for JSON that is not
// an infer request, tensors whose shapes disagree with their data or with
// each other, a datatype the model cannot take; 413 (limit "rows") for more
// than `max_rows` rows.
DecodedRows decode_infer_request(std::string_view body, const InputShape& shape, std::uint64_t max_rows);

// The JSON body of POST /invocations: {"dataframe_split": {"columns": [...],
// "data": [[...], ...]}} or {"dataframe_records": [{...}, ...]}. Errors as
// decode_infer_request's.
DecodedRows decode_mlflow_json(std::string_view body, const InputShape& shape, std::uint64_t max_rows);

// A text/csv body of POST /invocations, passed on as it is (a delimited
// model only: 415 otherwise); 413 (limit "rows") for more than `max_rows`
// records after the header (counted outside quoted fields).
DecodedRows decode_csv_body(std::string_view body, const InputShape& shape, std::uint64_t max_rows);

// A field of CSV text: quoted (RFC 4180) when it holds a delimiter, quote or
// line end, or begins or ends with a space.
std::string csv_field(std::string_view text);

}  // namespace anneal::serve
