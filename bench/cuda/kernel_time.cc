// libanneal-kernel-time.so: how long the GPU was busy during one process,
// for bench/cuda/train.sh's "fraction of a step outside kernels". It is
// loaded into an unmodified `anneal train` by the CUDA driver:
//
//   CUDA_INJECTION64_PATH=.../libanneal-kernel-time.so ANNEAL_KERNEL_TIME_OUT=FILE anneal train ...
//
// The driver calls InitializeInjection() during cuInit; it turns on CUPTI's
// activity records for kernels, memcpys and memsets. At exit the process
// writes one line to FILE:
//
//   kernels=N kernel_busy_ns=K gpu_busy_ns=G first_ns=F last_ns=L
//
// K: the length of the union of the kernels' [start, end) intervals (kernels
// overlapping on several streams count once); G: the same over kernels,
// memcpys and memsets together; F and L: the earliest start and latest end
// of all of them, in ns on CUPTI's clock. When any record is lost (dropped,
// unreadable, without timestamps) or a CUPTI call fails, the process says
// why on stderr and FILE is not written: a partial total would understate the
// busy time.
#include <cupti.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "intervals.h"

namespace {

using anneal::bench::Interval;
using anneal::bench::union_length;

constexpr std::size_t kBufferBytes = 8u << 20;
constexpr std::size_t kRecordAlignment = 8;  // CUPTI's requirement for activity buffers

struct State {
  std::mutex mutex;
  std::string out_path;
  std::vector<Interval> kernels;
  std::vector<Interval> transfers;  // memcpys and memsets
  // Per kernel name: summed durations (ns) and launches, for the hot list.
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> by_name;
  std::string failure;              // the first reason the totals are incomplete
};

// Never destroyed: CUPTI's worker thread may deliver a buffer while static
// destructors run, and the atexit handler reads it.
State& state() {
  static State* s = new State;
  return *s;
}

void fail(const std::string& why) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.failure.empty()) s.failure = why;
}

std::string cupti_error(CUptiResult r, const char* call) {
  const char* text = nullptr;
  if (cuptiGetResultString(r, &text) != CUPTI_SUCCESS || text == nullptr) text = "unknown CUPTI error";
  return std::string(call) + " failed: " + text;
}

bool check(CUptiResult r, const char* call) {
  if (r == CUPTI_SUCCESS) return true;
  fail(cupti_error(r, call));
  return false;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kRecordAlignment, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
  if (*buffer == nullptr) fail("no host memory for a CUPTI activity buffer (records dropped)");
}

template <class Record>
bool add(const CUpti_Activity* activity, std::vector<Interval>& to, const char* what) {
  const auto* r = reinterpret_cast<const Record*>(activity);
  if (r->start == 0 && r->end == 0) {
    fail(std::string("a ") + what + " record without timestamps (CUPTI had no device memory for them)");
    return false;
  }
  to.push_back({r->start, r->end});
  return true;
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t, size_t valid_size) {
  std::vector<Interval> kernels;
  std::vector<Interval> transfers;
  std::vector<std::pair<std::string, std::uint64_t>> named;  // kernel name, duration
  CUpti_Activity* record = nullptr;
  bool complete = true;
  for (;;) {
    const CUptiResult r = cuptiActivityGetNextRecord(buffer, valid_size, &record);
    if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) break;  // the end of the buffer
    if (!check(r, "cuptiActivityGetNextRecord")) {
      complete = false;
      break;
    }
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        complete &= add<CUpti_ActivityKernel10>(record, kernels, "kernel");
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        named.emplace_back(k->name ? k->name : "?", k->end > k->start ? k->end - k->start : 0);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY:
        complete &= add<CUpti_ActivityMemcpy6>(record, transfers, "memcpy");
        break;
      case CUPTI_ACTIVITY_KIND_MEMSET:
        complete &= add<CUpti_ActivityMemset4>(record, transfers, "memset");
        break;
      default:
        break;  // no other kind is enabled
    }
  }
  std::free(buffer);
  size_t dropped = 0;
  if (check(cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped), "cuptiActivityGetNumDroppedRecords") &&
      dropped > 0)
    fail("CUPTI dropped " + std::to_string(dropped) + " activity records");
  if (!complete) return;
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.kernels.insert(s.kernels.end(), kernels.begin(), kernels.end());
  s.transfers.insert(s.transfers.end(), transfers.begin(), transfers.end());
  for (const auto& [name, ns] : named) {
    auto& [total, launches] = s.by_name[name];
    total += ns;
    ++launches;
  }
}

// OUT.kernels: "NS LAUNCHES NAME" per kernel name, the most time first.
void write_hot_list(const State& s) {
  std::vector<std::pair<std::uint64_t, const std::string*>> order;
  for (const auto& [name, totals] : s.by_name) order.emplace_back(totals.first, &name);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  const std::string path = s.out_path + ".kernels";
  std::FILE* out = std::fopen(path.c_str(), "w");
  if (out == nullptr) {
    std::fprintf(stderr, "libanneal-kernel-time: cannot create %s: %s\n", path.c_str(), std::strerror(errno));
    return;
  }
  bool written = true;
  for (const auto& [ns, name] : order)
    written &= std::fprintf(out, "%llu %llu %s\n", static_cast<unsigned long long>(ns),
                            static_cast<unsigned long long>(s.by_name.at(*name).second), name->c_str()) > 0;
  if (std::fclose(out) != 0 || !written) {
    std::fprintf(stderr, "libanneal-kernel-time: cannot write %s\n", path.c_str());
    std::remove(path.c_str());
  }
}

void write_totals() {
  check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.failure.empty() && s.kernels.empty()) s.failure = "no kernel ran";
  if (!s.failure.empty()) {
    std::fprintf(stderr, "libanneal-kernel-time: %s; %s not written\n", s.failure.c_str(), s.out_path.c_str());
    return;
  }
  const std::size_t kernel_count = s.kernels.size();
  const std::uint64_t kernel_busy = union_length(s.kernels);
  std::vector<Interval> all = s.kernels;
  all.insert(all.end(), s.transfers.begin(), s.transfers.end());
  const std::uint64_t gpu_busy = union_length(all);  // sorted by start now
  std::uint64_t last = 0;
  for (const Interval& i : all) last = std::max(last, i.end);

  std::FILE* out = std::fopen(s.out_path.c_str(), "w");
  if (out == nullptr) {
    std::fprintf(stderr, "libanneal-kernel-time: cannot create %s: %s\n", s.out_path.c_str(), std::strerror(errno));
    return;
  }
  const bool written = std::fprintf(out, "kernels=%zu kernel_busy_ns=%llu gpu_busy_ns=%llu first_ns=%llu last_ns=%llu\n",
                                    kernel_count, static_cast<unsigned long long>(kernel_busy),
                                    static_cast<unsigned long long>(gpu_busy),
                                    static_cast<unsigned long long>(all.front().start),
                                    static_cast<unsigned long long>(last)) > 0;
  if (std::fclose(out) != 0 || !written) {
    std::fprintf(stderr, "libanneal-kernel-time: cannot write %s: %s\n", s.out_path.c_str(), std::strerror(errno));
    std::remove(s.out_path.c_str());
    return;
  }
  write_hot_list(s);
}

// Turns tracing on; false (having said why on stderr) when it cannot.
bool start_tracing() {
  const char* out = std::getenv("ANNEAL_KERNEL_TIME_OUT");
  if (out == nullptr || *out == '\0') {
    std::fprintf(stderr, "libanneal-kernel-time: ANNEAL_KERNEL_TIME_OUT is not set: expected the file to write\n");
    return false;
  }
  state().out_path = out;
  std::remove(out);  // so a file left by an earlier run is never taken for this one's
  const bool started =
      check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks") &&
      check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable(CONCURRENT_KERNEL)") &&
      check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "cuptiActivityEnable(MEMCPY)") &&
      check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "cuptiActivityEnable(MEMSET)");
  if (!started) {
    std::fprintf(stderr, "libanneal-kernel-time: %s; %s not written\n", state().failure.c_str(), out);
    return false;
  }
  if (std::atexit(write_totals) != 0) {
    std::fprintf(stderr, "libanneal-kernel-time: atexit failed; %s not written\n", out);
    return false;
  }
  return true;
}

}  // namespace

// The CUDA driver looks this name up in the library CUDA_INJECTION64_PATH
// names and calls it once, during cuInit; 1 means the injection succeeded.
extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  static const bool started = start_tracing();
  return started ? 1 : 0;
}
