// Data parallelism's gradient sum: every rank's gradients summed into every
// rank's, so all ranks apply the same optimizer step. Each rank's loss
// gradient was already scaled by 1/(the global step's samples), so the sum
// is the global mean's. Internal to src/engine; the Trainer owns one when it
// trains with a communicator of more than one rank.
//
// The parameters are summed in buckets of about `bucket_bytes`, taken from
// the last parameter back, the order in which backward finishes their
// gradients. During the step's last backward, a bucket is started (handed
// to start_allreduce_sum) as soon as its gradients are final, and the
// communicator is given a chance to move the started ones after every
// layer, so the transfers overlap the layers still to run; after the
// backward pass the rest are started and all are waited for, in order.
// Each element is still the rank-order sum of its ranks' values, so the
// bits do not depend on the buckets.
//
// Small gradients are copied into one host buffer per bucket, which is
// summed and copied back. A gradient of kInPlaceBytes or more (or that fills
// a bucket by itself) is a bucket of its own and, where the backend computes
// in host memory (storage_view), is summed where it lies, in the backend's
// own layout, without either copy: on the CPU the large dense weights are
// most of the bytes a step sends, and copying them to plain floats and back
// is a reorder each way. An element-wise sum needs no particular order of
// the elements, only the same one on every rank, which agree_on_layouts
// checks once: ranks on different processors may choose different blocked
// layouts, and then every gradient is summed as plain floats.
//
// Every call is collective: every rank makes it at the same point. One
// thread at a time. Errors: what the communicator throws; kFailure when a
// gradient summed in place changed its layout during training.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "anneal/backend.h"
#include "anneal/communicator.h"
#include "anneal/layers.h"
#include "anneal/report.h"

namespace anneal::engine {

class GradientReducer {
 public:
  // Plans the buckets of `params` (a network's, in its order), which with
  // `backend`, `comm` and `reporter` must outlive the reducer.
  GradientReducer(const std::vector<Parameter*>& params, Backend& backend, Communicator& comm,
                  std::size_t bucket_bytes, Reporter& reporter);

  // Before the first step (not in the constructor: rank 0 makes its trainer
  // before it sends the others the run): the large gradients are summed in
  // place only if every rank lays them out as rank 0 does. Does nothing
  // after its first call.
  void agree_on_layouts();

  // The gradients of parameters [pending, ...) are final: starts the
  // buckets they complete, and lets the started ones move.
  void gradients_ready(std::size_t pending);

  // After the step's backward passes: starts the buckets not started yet
  // (all of them on a rank without rows in the last micro-batch), waits for
  // every sum and puts the summed gradients back.
  void reduce();

  static constexpr std::size_t kInPlaceBytes = std::size_t(256) << 10;

 private:
  struct Bucket {
    std::size_t first = 0, end = 0;        // parameters [first, end) of params_
    std::size_t offset = 0, elements = 0;  // where their gradients sit in grad_host_
    bool alone = false;                    // one large parameter
    std::string layout;  // alone: its storage layout, the same on every rank, summed in place; empty: copied
    Communicator::SumRequest request = 0;
  };

  void start(Bucket& bucket);
  // True on every rank when `text` is the same on every rank, else false
  // on every rank.
  bool same_on_every_rank(const std::string& text);

  const std::vector<Parameter*>& params_;
  Backend& backend_;
  Communicator& comm_;
  Reporter& reporter_;
  std::vector<float> grad_host_;  // every copied gradient, bucket after bucket
  std::vector<Bucket> buckets_;   // in the order backward finishes them
  std::size_t started_ = 0;       // buckets started in this step
  bool layouts_agreed_ = false;   // agree_on_layouts has run (a bucket's layout set: in place)
};

}  // namespace anneal::engine
