#include "anneal/optimizer.h"

#include <cmath>
#include <numbers>
#include <string>

#include "anneal/error.h"
#include "anneal/spelling.h"

namespace anneal {

OptimizerKind parse_optimizer_kind(std::string_view name) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "adam") return OptimizerKind::kAdam;
  if (name == "adamw") return OptimizerKind::kAdamW;
  throw unknown_name_error("optimizer", name, {"sgd", "adam", "adamw"});
}

ScheduleKind parse_schedule_kind(std::string_view name) {
  if (name == "constant") return ScheduleKind::kConstant;
  if (name == "step") return ScheduleKind::kStep;
  if (name == "cosine") return ScheduleKind::kCosine;
  throw unknown_name_error("lr schedule", name, {"constant", "step", "cosine"});
}

const char* optimizer_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd: return "sgd";
    case OptimizerKind::kAdam: return "adam";
    case OptimizerKind::kAdamW: return "adamw";
  }
  return "?";
}

const char* schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kConstant: return "constant";
    case ScheduleKind::kStep: return "step";
    case ScheduleKind::kCosine: return "cosine";
  }
  return "?";
}

void validate(const OptimizerConfig& c) {
  auto bad = [](const std::string& what) { throw usage_error("optimizer: " + what); };
  if (!(c.lr > 0) || !std::isfinite(c.lr)) bad("lr must be a positive number, not " + std::to_string(c.lr));
  if (!(c.momentum >= 0 && c.momentum < 1)) bad("momentum must be in [0, 1)");
  if (c.nesterov && c.momentum == 0) bad("nesterov needs momentum > 0");
  if (!(c.beta1 >= 0 && c.beta1 < 1) || !(c.beta2 >= 0 && c.beta2 < 1)) bad("betas must be in [0, 1)");
  if (!(c.epsilon > 0)) bad("epsilon must be positive");
  if (!(c.weight_decay >= 0)) bad("weight_decay must be >= 0");
  if (c.warmup_steps < 0) bad("warmup_steps must be >= 0");
  if (c.schedule == ScheduleKind::kStep && c.step_size < 1) bad("step_size must be >= 1");
  if (!(c.gamma > 0 && c.gamma <= 1)) bad("gamma must be in (0, 1]");
  if (!(c.min_lr >= 0 && c.min_lr <= c.lr)) bad("min_lr must be in [0, lr]");
  if (!(c.grad_clip >= 0)) bad("grad_clip must be >= 0 (0 disables clipping)");
}

float scheduled_lr(const OptimizerConfig& c, std::int64_t step, std::int64_t total_steps) {
  if (c.warmup_steps > 0 && step < c.warmup_steps)
    return c.lr * float(step + 1) / float(c.warmup_steps);
  switch (c.schedule) {
    case ScheduleKind::kConstant: return c.lr;
    case ScheduleKind::kStep:
      return c.lr * std::pow(c.gamma, float((step - c.warmup_steps) / c.step_size));
    case ScheduleKind::kCosine: {
      const std::int64_t span = std::max<std::int64_t>(total_steps - c.warmup_steps - 1, 1);
      const double t = std::min(1.0, double(step - c.warmup_steps) / double(span));
      return float(c.min_lr + (c.lr - c.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * t)));
    }
  }
  return c.lr;
}

Optimizer::Optimizer(const OptimizerConfig& config, const std::vector<Parameter*>& parameters,
                     Backend& backend)
    : config_(config), parameters_(parameters), backend_(backend) {
  validate(config_);
  const bool needs_first = config_.kind != OptimizerKind::kSgd || config_.momentum > 0;
  const bool needs_second = config_.kind != OptimizerKind::kSgd;
  first_.resize(parameters_.size());
  second_.resize(parameters_.size());
  masks_.resize(parameters_.size());
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    const Tensor& value = parameters_[i]->value;
    if (needs_first) {
      backend_.shape_like(first_[i], value, DType::kF32);
      backend_.fill_zero(first_[i]);
      state_.push_back({parameters_[i]->name + (needs_second ? ".m" : ".velocity"), &first_[i]});
    }
    if (needs_second) {
      backend_.shape_like(second_[i], value, DType::kF32);
      backend_.fill_zero(second_[i]);
      state_.push_back({parameters_[i]->name + ".v", &second_[i]});
    }
  }
}

void Optimizer::step(std::int64_t step, std::int64_t total_steps, const Tensor* grad_scale) {
  // Clipping scales every gradient by one factor from their global norm;
  // the backend reduces and keeps the factor on its device.
  if (config_.grad_clip > 0) {
    std::vector<const Tensor*> grads;
    grads.reserve(parameters_.size());
    for (const Parameter* p : parameters_) grads.push_back(&p->grad);
    backend_.clip_scale(grads, config_.grad_clip, grad_scale, clip_scale_);
    grad_scale = &clip_scale_;
  }
  const float lr = scheduled_lr(config_, step, total_steps);
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    Parameter& p = *parameters_[i];
    if (config_.kind == OptimizerKind::kSgd) {
      SgdUpdate u;
      u.lr = lr;
      u.momentum = config_.momentum;
      u.weight_decay = config_.weight_decay;
      u.nesterov = config_.nesterov;
      u.grad_scale = grad_scale;
      backend_.sgd_update(p.value, p.grad, first_[i], u);
    } else {
      AdamUpdate u;
      u.lr = lr;
      u.beta1 = config_.beta1;
      u.beta2 = config_.beta2;
      u.epsilon = config_.epsilon;
      u.weight_decay = config_.weight_decay;
      u.decoupled_weight_decay = config_.kind == OptimizerKind::kAdamW;
      u.step = step + 1;
      u.grad_scale = grad_scale;
      backend_.adam_update(p.value, p.grad, first_[i], second_[i], u);
    }
    if (!masks_[i].empty()) backend_.multiply(p.value, masks_[i]);
  }
}

void Optimizer::set_mask(std::size_t index, const std::vector<float>& mask) {
  if (index >= parameters_.size()) throw usage_error("optimizer: no parameter " + std::to_string(index));
  Parameter& p = *parameters_[index];
  if (mask.empty()) {
    masks_[index] = Tensor();
    return;
  }
  if (std::int64_t(mask.size()) != p.value.elements())
    throw usage_error("optimizer: mask of " + std::to_string(mask.size()) + " values for " + p.name +
                      " of " + std::to_string(p.value.elements()));
  // The mask takes the parameter's layout, so the product is elementwise
  // whatever layout the backend chose for the weights.
  backend_.shape_like(masks_[index], p.value, DType::kF32);
  backend_.copy_from_host(mask.data(), masks_[index]);
  backend_.multiply(p.value, masks_[index]);
}

}  // namespace anneal
