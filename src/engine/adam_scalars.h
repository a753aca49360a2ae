// The scalars of one Adam/AdamW step, computed once on the host from an
// AdamUpdate by every backend, so the bias corrections and the two kinds of
// weight decay are written in one place. A plain struct: a GPU kernel can
// take it by value.
#pragma once

#include <cmath>

#include "anneal/backend.h"

namespace anneal::engine {

struct AdamScalars {
  float step_size;     // lr / (1 − β1^t)
  float inv_sqrt_bc2;  // 1 / √(1 − β2^t)
  float beta1, beta2, epsilon;
  float l2;            // coupled weight decay (adam), 0 for adamw
  float decay;         // 1 − lr·wd for adamw, 1 otherwise
};

// With g the (clipped) gradient: g' = g + l2·w; m = β1·m + (1−β1)·g';
// v = β2·v + (1−β2)·g'²; w = w·decay − step_size·m / (√v·inv_sqrt_bc2 + ε).
inline AdamScalars adam_scalars(const AdamUpdate& u) {
  AdamScalars a{};
  a.step_size = u.lr / (1.0f - std::pow(u.beta1, float(u.step)));
  a.inv_sqrt_bc2 = 1.0f / std::sqrt(1.0f - std::pow(u.beta2, float(u.step)));
  a.beta1 = u.beta1;
  a.beta2 = u.beta2;
  a.epsilon = u.epsilon;
  a.l2 = u.decoupled_weight_decay ? 0.0f : u.weight_decay;
  a.decay = u.decoupled_weight_decay ? 1.0f - u.lr * u.weight_decay : 1.0f;
  return a;
}

}  // namespace anneal::engine
