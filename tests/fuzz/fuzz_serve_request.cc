// The request decoder of `anneal serve` (src/serve/request_decoder.h): the
// bytes a client sends as an infer request, an MLflow JSON body and a CSV
// body, for a model that reads CSV columns and for one that reads raw
// feature values. A refusal (RequestError) is the expected outcome of bad
// input; anything else escaping is a bug.
#include "fuzz_target.h"
#include "serve/request_decoder.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace anneal::serve;
  const std::string_view body = anneal::fuzz::as_text(data, size);
  static const InputShape kColumns{true, {"sepal_length", "sepal_width", "species_text", "when"}, 4};
  static const InputShape kRaw{false, {"image"}, 4};
  for (const InputShape* shape : {&kColumns, &kRaw}) {
    try {
      (void)decode_infer_request(body, *shape, 1000);
    } catch (const RequestError&) {
    }
    try {
      (void)decode_mlflow_json(body, *shape, 1000);
    } catch (const RequestError&) {
    }
    try {
      (void)decode_csv_body(body, *shape, 1000);
    } catch (const RequestError&) {
    }
  }
  return 0;
}
