// quantize, prune, bench, devices: parse arguments, call quantize/ (or the
// device registry), print the result as text or JSON.
#include <algorithm>
#include <iostream>
#include <thread>

#include "anneal/device.h"
#include "anneal/error.h"
#include "anneal/quantize.h"
#include "anneal/store.h"
#include "command.h"
#include "output.h"
#include "train_support.h"

namespace anneal::cli {
namespace {

using nlohmann::json;


std::string points(double v) {
  // Appended piece by piece: GCC 12 misreads `const char* + string&&` here
  // as an overlapping memcpy (-Wrestrict).
  std::string text = v >= 0 ? "+" : "";
  text += format_double(v, 3);
  text += " points";
  return text;
}

void print_compressed(const Invocation& inv, const CompressResult& r) {
  const json& l = r.lineage;
  if (inv.global.json) {
    json out = {{"run", r.run.label()},
                {"model", r.model.ref()},
                {"parent", r.parent},
                {"precision", l.value("precision", "")},
                {"sparsity", l.value("sparsity", 0.0)},
                {"size_bytes", l.value("size_bytes", 0)},
                {"size_on_disk", l.value("size_on_disk", 0)},
                {"parent_size_bytes", l.value("parent_size_bytes", 0)},
                {"parent_size_on_disk", l.value("parent_size_on_disk", 0)},
                {"metrics", r.metrics}};
    if (l.contains("weight_levels")) out["weight_levels"] = l["weight_levels"];
    print_json(out);
    return;
  }
  std::cout << r.run.label() << " succeeded: registered " << terminal_text(r.model.ref()) << " from " << terminal_text(r.parent) << "\n";
  std::vector<std::vector<std::string>> rows = {{"  precision", l.value("precision", "")}};
  // The s8 weight range quantize chose: 127 where the CPU has VNNI, else 64.
  if (l.contains("weight_levels"))
    rows.push_back({"  weight levels", "±" + l["weight_levels"].dump() +
                                           (l["weight_levels"] == 127 ? " (8-bit)" : " (7-bit: this CPU has no VNNI)")});
  rows.push_back({"  sparsity", format_double(100.0 * l.value("sparsity", 0.0), 4) + "%"});
  rows.push_back({"  size on disk", human_bytes(l.value("size_on_disk", 0)) + " (parent " +
                                        human_bytes(l.value("parent_size_on_disk", 0)) + ")"});
  rows.push_back(
      {"  size", human_bytes(l.value("size_bytes", 0)) + " (parent " + human_bytes(l.value("parent_size_bytes", 0)) + ")"});
  for (const auto& [key, value] : r.metrics.items())
    rows.push_back({"  " + key, value.is_number_float() ? format_double(value.get<double>(), 4)
                                : value.is_string() ? value.get<std::string>() : value.dump()});
  if (r.metrics.contains("accuracy_change_points"))
    rows.push_back({"  accuracy vs parent", points(r.metrics["accuracy_change_points"].get<double>())});
  print_table(std::cout, rows);
}

int run_quantize(const Invocation& inv) {
  const auto& a = inv.args;
  if (!a["int8"].as<bool>()) throw usage_error("quantize: give --int8 (the one precision quantize produces)");
  if (!a.count("calib")) throw usage_error("--calib: quantize needs calibration data (--calib DATA)");
  QuantizeRequest request;
  request.model = a["MODEL"].as<std::string>();
  request.calib = a["calib"].as<std::string>();
  request.calib_samples = a["calib-samples"].as<std::int64_t>();
  if (a.count("method")) request.method = parse_calibration_method(a["method"].as<std::string>());
  const BackendOptions compute = compute_options_of(inv);
  request.device = compute.device;
  request.threads = compute.threads;
  request.qat_epochs = a["qat-epochs"].as<std::int64_t>();
  Store store = Store::open(inv.global.store, inv.global.access);
  TerminalReporter reporter(inv.global.log_format);
  const auto result = quantize_model(store, request, reporter);
  note_auto_device(compute);
  print_compressed(inv, result);
  return kExitOk;
}

int run_prune(const Invocation& inv) {
  const auto& a = inv.args;
  if (!a.count("sparsity")) throw usage_error("--sparsity: prune needs the fraction to remove (--sparsity 0.9)");
  PruneRequest request;
  request.model = a["MODEL"].as<std::string>();
  request.sparsity = a["sparsity"].as<double>();
  if (a.count("schedule")) request.schedule = parse_prune_schedule(a["schedule"].as<std::string>());
  request.finetune_epochs = a["finetune-epochs"].as<std::int64_t>();
  request.structured = a["structured"].as<bool>();
  request.global = a["global"].as<bool>();
  if (a.count("data")) request.data = a["data"].as<std::string>();
  request.lr = a["lr"].as<float>();
  request.batch = a["batch"].as<std::int64_t>();
  request.seed = a["seed"].as<std::uint64_t>();
  const BackendOptions compute = compute_options_of(inv);
  request.device = compute.device;
  request.threads = compute.threads;
  Store store = Store::open(inv.global.store, inv.global.access);
  TerminalReporter reporter(inv.global.log_format);
  const auto result = prune_model(store, request, reporter);
  note_auto_device(compute);
  print_compressed(inv, result);
  return kExitOk;
}

int run_bench(const Invocation& inv) {
  const auto& a = inv.args;
  BenchRequest request;
  request.model = a["MODEL"].as<std::string>();
  request.batch = a["batch"].as<std::int64_t>();
  request.repeats = a["repeats"].as<int>();
  request.seconds = a["seconds"].as<double>();
  const BackendOptions compute = compute_options_of(inv);
  request.device = compute.device;
  request.threads = compute.threads;
  Store store = Store::open(inv.global.store, inv.global.access);
  BenchResult r = bench_model(store, request);
  note_auto_device(compute);
  if (inv.global.json) {
    json layers = json::array();
    for (const auto& l : r.layers) layers.push_back({{"layer", l.layer}, {"kernel", l.kernel}, {"sparsity", l.sparsity}});
    print_json({{"model", r.model.ref()},
                {"precision", r.precision},
                {"sparsity", r.sparsity},
                {"batch", r.batch},
                {"threads", request.threads},
                {"engine", r.engine},
                {"samples_per_s", r.samples_per_s},
                {"repeats", r.repeat_samples_per_s},
                {"rows_per_repeat", r.rows_per_repeat},
                {"layers", layers}});
    return kExitOk;
  }
  std::cout << terminal_text(r.model.ref()) << ": " << r.precision << ", " << format_double(100 * r.sparsity, 3)
            << "% zero weights, batch " << r.batch << ", " << request.threads << " thread(s)\n";
  std::cout << "  " << std::llround(r.samples_per_s) << " samples/s (median of " << r.repeat_samples_per_s.size()
            << " repeats of " << r.rows_per_repeat << " rows)\n";
  if (!r.layers.empty()) {
    std::vector<std::vector<std::string>> rows;
    for (const auto& l : r.layers) rows.push_back({"  " + l.layer, l.kernel});
    print_table(std::cout, rows);
  }
  return kExitOk;
}

// Whether oneDNN's instruction set `isa` (BackendCapabilities::isa, as the
// CPU backend names it) has the 8-bit dot product instructions (VNNI) its
// int8 kernels run on at full speed with 8-bit weights.
bool isa_has_vnni(const std::string& isa) {
  return isa == "avx512_core_vnni" || isa == "avx512_core_bf16" || isa == "avx512_core_amx" ||
         isa == "avx2_vnni";
}

int run_devices(const Invocation& inv) {
  const std::vector<BackendAvailability> backends = available_backends();
  // What `auto` picks: the first usable one.
  const auto chosen = std::find_if(backends.begin(), backends.end(), [](const auto& b) { return b.usable; });
  // The CPU as oneDNN sees it (after ONEDNN_MAX_CPU_ISA): the instruction
  // set its kernels use and what that gives. The CPU backend is always usable.
  BackendOptions cpu_options;
  cpu_options.device = Device::kCpu;
  const BackendCapabilities cpu = make_backend(cpu_options)->capabilities();
  const bool vnni = isa_has_vnni(cpu.isa);
  if (inv.global.json) {
    json out = json::array();
    for (const auto& b : backends) {
      json device = {{"device", device_name(b.device)}, {"usable", b.usable}, {"reason", b.reason},
                     {"auto", chosen != backends.end() && &b == &*chosen}};
      if (b.device == Device::kCpu) {
        device["isa"] = cpu.isa;
        device["bf16"] = cpu.bf16;
        device["int8"] = cpu.int8;
        device["int8_vnni"] = cpu.int8 && vnni;
      }
      out.push_back(std::move(device));
    }
    print_json({{"devices", out}});
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {{"DEVICE", "USABLE", "NOTE"}};
  for (const auto& b : backends)
    rows.push_back({device_name(b.device), b.usable ? "yes" : "no",
                    chosen != backends.end() && &b == &*chosen ? "auto picks this" : b.reason});
  print_table(std::cout, rows);
  std::cout << "cpu: isa " << cpu.isa << "; bf16 " << (cpu.bf16 ? "yes" : "no") << "; int8 "
            << (!cpu.int8 ? "no" : vnni ? "vnni yes" : "vnni no") << "\n";
  return kExitOk;
}

}  // namespace

void add_quantize_commands(std::vector<Command>& out) {
  out.push_back(
      {"quantize", "MODEL --int8 --calib DATA [--calib-samples N] [--method minmax|percentile|entropy] [--qat-epochs N]",
       "quantize a model to INT8 (a new model version)",
       "Static post-training quantization: the weights of every dense and conv layer become s8 with one scale "
       "per output channel; activations get scales from --calib-samples rows of DATA's train split run through "
       "the fp32 model (minmax: the largest magnitude; percentile: the 99.99th percentile; entropy: the "
       "threshold with the least KL divergence). Registers NAME@vN+1 with its parent, the calibration data and "
       "the method in its lineage, scored beside the parent on DATA's test split. eval, predict and bench then "
       "run oneDNN int8 primitives with the relu fused. With --qat-epochs N the model first trains N more "
       "epochs (Adam) on DATA's train split with fake quantization in the forward pass: weights per channel and "
       "activations at the calibrated scales, the gradient passed straight through to the fp32 weights.",
       [](po::options_description& o) {
         o.add_options()("int8", po::bool_switch(), "quantize to INT8 (required)")
             ("calib", po::value<std::string>()->value_name("DATA"), "calibration dataset version")
             ("calib-samples", po::value<std::int64_t>()->default_value(1000)->value_name("N"), "calibration rows")
             ("method", po::value<std::string>()->value_name("METHOD"), "minmax (default), percentile or entropy")
             ("qat-epochs", po::value<std::int64_t>()->default_value(0)->value_name("N"),
              "epochs of quantization aware training before converting (default 0: none)");
         add_compute_options(o, true);
       },
       {"MODEL"}, run_quantize});
  out.push_back(
      {"prune", "MODEL --sparsity S [--schedule oneshot|gradual] [--finetune-epochs N] [--structured]",
       "prune a model by weight magnitude (a new model version)",
       "Unstructured (default): zeroes the fraction S of each dense/conv layer's weights with the smallest "
       "magnitude (--global: one threshold over all layers), at once (oneshot) or on the gradual cubic schedule "
       "of Zhu & Gupta over the first 3/4 of fine-tuning; the optimizer holds the masks, so pruned weights stay "
       "zero. Stored as a bitmask plus the nonzero values. --structured removes the fraction S of every hidden "
       "layer's neurons or channels (smallest L1 norm) and rebuilds smaller dense layers. Fine-tunes on --data "
       "(default: the parent's dataset) with Adam.",
       [](po::options_description& o) {
         o.add_options()("sparsity", po::value<double>()->value_name("S"), "fraction removed, 0 < S < 1")
             ("schedule", po::value<std::string>()->value_name("SCHEDULE"), "oneshot (default) or gradual")
             ("finetune-epochs", po::value<std::int64_t>()->default_value(1)->value_name("N"), "epochs of training after pruning")
             ("structured", po::bool_switch(), "remove whole neurons/channels")
             ("global", po::bool_switch(), "one magnitude threshold over all layers")
             ("data", po::value<std::string>()->value_name("DATA"), "dataset version to train on")
             ("lr", po::value<float>()->default_value(5e-4f, "0.0005")->value_name("LR"), "learning rate after pruning")
             ("batch", po::value<std::int64_t>()->default_value(128)->value_name("N"), "batch size after pruning")
             ("seed", po::value<std::uint64_t>()->default_value(1)->value_name("N"), "seed of training after pruning");
         add_compute_options(o, true);
       },
       {"MODEL"}, run_prune});
  out.push_back(
      {"bench", "MODEL [--batch N] [--threads N]", "measure a model's batch inference throughput",
       "Runs the model on fixed pseudo-random standardized rows through the path eval uses (fp32, bf16, int8 "
       "or pruned), after a warm-up, in --repeats timed repeats of about --seconds in all, and reports the "
       "median samples/s and, for int8 and pruned models, the kernel each layer ran on.",
       [](po::options_description& o) {
         o.add_options()("batch", po::value<std::int64_t>()->default_value(256)->value_name("N"), "rows per forward pass")
             ("repeats", po::value<int>()->default_value(7)->value_name("N"), "timed repeats")
             ("seconds", po::value<double>()->default_value(3.0)->value_name("S"), "total timed seconds (about)");
         add_compute_options(o, true);
       },
       {"MODEL"}, run_bench});
  out.push_back({"devices", "", "list the compute devices and which one device auto picks",
                 "Every device this anneal knows, in the order device auto prefers them, whether it is usable on "
                 "this machine and, when not, why (the CUDA backend not installed, no GPU, a driver too old). "
                 "Then the CPU as oneDNN sees it (ONEDNN_MAX_CPU_ISA lowers it): the instruction set its kernels "
                 "use (isa), whether precision = bf16 trains on it (AVX512_BF16 or AMX), and whether int8 runs "
                 "on 8-bit dot product instructions (VNNI). Needs no store.",
                 nullptr, {}, run_devices});
}

}  // namespace anneal::cli
