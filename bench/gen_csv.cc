// Writes a reproducible numeric CSV for the import benchmark:
//   anneal-gen-csv ROWS FIRST_ROW SEED > file.csv
// 16 feature columns with 6 decimals and an integer label; with FIRST_ROW 0
// a header line comes first. Rows depend only on (SEED, row index), so
// "FIRST_ROW=N" continues a file of N rows exactly.
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: anneal-gen-csv ROWS FIRST_ROW SEED\n");
    return 2;
  }
  const std::uint64_t rows = std::strtoull(argv[1], nullptr, 10);
  const std::uint64_t first = std::strtoull(argv[2], nullptr, 10);
  const std::uint64_t seed = std::strtoull(argv[3], nullptr, 10);
  constexpr int kFeatures = 16;
  std::string out;
  out.reserve(1 << 22);
  if (first == 0) {
    for (int c = 0; c < kFeatures; ++c) out.append("x").append(std::to_string(c)).append(",");
    out += "label\n";
  }
  char buf[64];
  for (std::uint64_t r = first; r < first + rows; ++r) {
    std::uint64_t state = mix(seed * 0x9e3779b97f4a7c15ULL + r);
    for (int c = 0; c < kFeatures; ++c) {
      state = mix(state + 0x9e3779b97f4a7c15ULL);
      double value = static_cast<double>(state >> 11) * 0x1.0p-53 * 200.0 - 100.0;
      int n = std::snprintf(buf, sizeof buf, "%.6f,", value);
      out.append(buf, static_cast<std::size_t>(n));
    }
    out += std::to_string(state % 10);
    out += '\n';
    if (out.size() > (1 << 22) - 512) {
      std::fwrite(out.data(), 1, out.size(), stdout);
      out.clear();
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}
