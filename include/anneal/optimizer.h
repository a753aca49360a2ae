// Optimizers and learning-rate schedules over a network's fp32 master
// parameters. The elementwise updates run in the Backend.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "anneal/backend.h"
#include "anneal/layers.h"

namespace anneal {

enum class OptimizerKind : std::uint8_t { kSgd, kAdam, kAdamW };
enum class ScheduleKind : std::uint8_t { kConstant, kStep, kCosine };

// "sgd" | "adam" | "adamw"; "constant" | "step" | "cosine". Throw anneal::Error
// kUsage naming the closest known name otherwise.
OptimizerKind parse_optimizer_kind(std::string_view name);
ScheduleKind parse_schedule_kind(std::string_view name);
const char* optimizer_name(OptimizerKind kind);
const char* schedule_name(ScheduleKind kind);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kAdam;
  float lr = 1e-3f;
  float momentum = 0.0f;  // sgd
  bool nesterov = false;  // sgd, needs momentum > 0
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;  // adam, adamw
  // sgd and adam: L2, added to the gradient; adamw: decoupled, w −= lr·wd·w.
  float weight_decay = 0.0f;

  ScheduleKind schedule = ScheduleKind::kConstant;
  // Linear warmup from lr/warmup_steps to lr over the first steps (any schedule).
  std::int64_t warmup_steps = 0;
  std::int64_t step_size = 1000;  // step: multiply lr by gamma every step_size steps
  float gamma = 0.1f;
  float min_lr = 0.0f;            // cosine: the floor it decays to at the last step

  // Clip gradients to this global L2 norm before the update; 0 disables.
  float grad_clip = 0.0f;
};

// Throws anneal::Error kUsage, one line, for values that make no sense (lr <= 0,
// beta outside [0, 1), nesterov without momentum, ...).
void validate(const OptimizerConfig& config);

// The learning rate of optimizer step `step` (0-based) out of `total_steps`.
float scheduled_lr(const OptimizerConfig& config, std::int64_t step, std::int64_t total_steps);

class Optimizer {
 public:
  // Creates zeroed state (momentum / first and second moments) shaped like
  // each parameter. `parameters` and `backend` must outlive the optimizer.
  Optimizer(const OptimizerConfig& config, const std::vector<Parameter*>& parameters,
            Backend& backend);

  // Updates every parameter from its grad as optimizer step `step` (0-based)
  // of `total_steps`, clipping the gradients to config.grad_clip's global
  // norm first when it is set. `grad_scale`, when given, is a one-value
  // tensor from Backend::unscale_gradients: the gradients are taken times
  // it (before clipping), and a 0 skips the step (weights and state
  // unchanged; the schedule still counts it). Nothing is read back to the
  // host.
  void step(std::int64_t step, std::int64_t total_steps, const Tensor* grad_scale = nullptr);

  // The optimizer's state tensors in a fixed order, for checkpoints.
  const std::vector<StateBuffer>& state() const { return state_; }

  // Holds a pruning mask for parameter `index`: `mask` is its element count
  // of 0/1 values, row-major. The parameter is multiplied by it now and after
  // every step, so pruned weights stay exactly zero however the update moves
  // them. An empty mask removes the parameter's mask. Masks are not part of
  // state(): a checkpoint does not carry them.
  void set_mask(std::size_t index, const std::vector<float>& mask);

 private:
  OptimizerConfig config_;
  std::vector<Parameter*> parameters_;
  Backend& backend_;
  std::vector<Tensor> first_, second_;  // sgd: velocity in first_
  std::vector<Tensor> masks_;            // empty tensor: no mask
  Tensor clip_scale_;                    // Backend::clip_scale's factor
  std::vector<StateBuffer> state_;
};

}  // namespace anneal
