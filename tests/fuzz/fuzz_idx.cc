// IDX reader: byte 0 picks non-finite handling, byte 1 where the images end
// and the labels begin (as a fraction of the rest), the rest is both files.
// When the images are u8 (or their header is bad), the piecewise scan the
// import uses must agree with parse_idx: the same error message, or the
// same labels and schema.
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

#include "anneal/datasets.h"
#include "anneal/formats.h"
#include "formats/idx_scan.h"
#include "fuzz_target.h"

namespace {

std::string outcome(const std::function<anneal::Table()>& parse) {
  try {
    anneal::Table table = parse();
    // Appended in steps: GCC 12 warns falsely (-Wrestrict) on "..." + to_string().
    std::string out = "rows ";
    out += std::to_string(table.rows);
    out += " labels";
    for (float label : table.labels) (out += ' ') += std::to_string(label);
    return out + " " + anneal::columns_to_json(table.columns).dump();
  } catch (const anneal::Error& e) {
    return std::string("error ") + e.what();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  anneal::ParseOptions options;
  options.display_name = "images.idx";
  options.nonfinite = (data[0] & 1) ? anneal::NonFinite::kMissing : anneal::NonFinite::kError;
  std::string_view rest = anneal::fuzz::as_text(data + 2, size - 2);
  std::size_t cut = rest.size() * data[1] / 255;
  const std::string_view images = rest.substr(0, cut), labels = rest.substr(cut);
  const std::string parsed = outcome([&] { return anneal::parse_idx(images, labels, options, "labels.idx"); });
  const std::optional<unsigned char> type = anneal::idx_element_type(images.substr(0, 4));
  if (type && *type != anneal::kIdxU8Type) return 0;
  const std::string scanned = outcome([&] {
    anneal::IdxInput image_input(images), label_input(labels);
    return anneal::scan_idx_u8(image_input, label_input, options, "labels.idx", {});
  });
  if (scanned != parsed) throw std::logic_error("scan_idx_u8 disagrees with parse_idx: " + scanned + " / " + parsed);
  return 0;
}
