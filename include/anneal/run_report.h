// The run report: one self-contained HTML page about a training run, to
// judge it by eye rather than by numbers in a terminal (`anneal runs report`,
// `anneal model show --report`, `anneal retrain --report-dir`).
//
// The page holds the loss and accuracy curves (train and validation per
// epoch, inline SVG, the best checkpoint marked), the confusion matrix as a
// heat map, per-class precision and recall, the metrics, the config, the
// lineage (dataset version, parent model, anneal version and commit), the
// dataset's schema with its statistics, the timings and, for a quantized or
// pruned model, its scores and size beside its parent's; for a run that
// `anneal retrain` trained, the night's story: the data checks of the
// version against what production trained on, the gate's two scores on the
// same rows and the decision. It loads nothing:
// no script, font, image or style sheet from anywhere (its
// Content-Security-Policy forbids them), so it opens the same from a file,
// a mail attachment or a web server. Every text that comes from the store
// (config values, column and class names, errors) is escaped, and bytes that
// are not valid UTF-8 or not allowed in HTML are shown as U+FFFD.
//
// Fixed positions, for a test that renders the page: the header is 56 px
// high, and the loss chart (<svg id="loss-curve">, 640x320) starts at
// (16, 72) with the accuracy chart (id "accuracy-curve") 16 px to its right;
// in each, the plot area spans x 64..624 and y 40..272.
//
// Reads the store only; throws anneal::Error (kNotFound for a run that does
// not exist).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "anneal/store.h"

namespace anneal {

// The report of run `run` as one HTML document.
std::string run_report_html(Store& store, std::int64_t run);

// Writes run_report_html() to `out` atomically (a temporary file in out's
// directory renamed over it) with permission bits `mode` exactly (the
// caller applies the user's umask, and keeps it owner-only for an encrypted
// store). An existing `out` is replaced only with `replace`; without
// it, and when out's directory does not exist, kUsage naming the file
// (Subject::kOutputFile). On any error `out` is untouched.
void write_run_report(Store& store, std::int64_t run, const std::filesystem::path& out, bool replace,
                      unsigned mode);

}  // namespace anneal
