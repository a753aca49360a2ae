// The weights hash rules of model formats 1 and 2, kept only so that
// models stored before format 3 still verify (docs/STORE.md, "Weights
// hash", the note on formats 1 and 2). New models are hashed by
// model_weights_hash() (anneal/model_file.h) over the one framing of
// anneal/weights_hash.h; nothing writes these rules any more. Internal to
// src/runs/.
#pragma once

#include <string>

#include "anneal/model_file.h"

namespace anneal::runs {

// The weights hash a format 1 or 2 model was stored with, recomputed from
// what it decodes to:
//   network, no "compression": per tensor its name, NUL, its dims as text
//     "{d0, d1}", NUL, its f32 LE values
//   network with "compression" (quantized, pruned): per tensor its name,
//     ":d" per dim, "\n", its f32 LE values (s8: dequantized)
//   linear: the weights as f64 LE
//   trees: the booster's bytes
// A pruned model fine-tuned after pruning was hashed with -0.0 where its
// bitmask stores +0.0: its hash cannot be recomputed from its file, and
// this gives another value.
std::string legacy_weights_hash(const ModelFile& model);

}  // namespace anneal::runs
