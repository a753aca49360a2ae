#include "engine/gradient_reducer.h"

#include <algorithm>
#include <array>
#include <span>

#include "anneal/error.h"

namespace anneal::engine {

GradientReducer::GradientReducer(const std::vector<Parameter*>& params, Backend& backend, Communicator& comm,
                                 std::size_t bucket_bytes, Reporter& reporter)
    : params_(params), backend_(backend), comm_(comm), reporter_(reporter) {
  std::size_t end = params_.size(), offset = 0, elements = 0;
  auto close = [&](std::size_t first, bool alone) {
    buckets_.push_back(Bucket{first, end, offset, elements, alone, {}, 0});
    offset += elements;
    end = first;
    elements = 0;
  };
  for (std::size_t i = params_.size(); i-- > 0;) {
    const std::size_t own = std::size_t(params_[i]->grad.elements());
    if (own * sizeof(float) >= std::min(kInPlaceBytes, bucket_bytes)) {
      if (elements > 0) close(i + 1, false);  // the small ones after it
      elements = own;
      close(i, true);
      continue;
    }
    elements += own;
    if (elements * sizeof(float) >= bucket_bytes || (i == 0 && elements > 0)) close(i, false);
  }
  if (end > 0) close(0, false);  // parameters without elements before the first bucket
  grad_host_.resize(offset);
}

void GradientReducer::agree_on_layouts() {
  if (layouts_agreed_) return;
  std::string layouts;  // every alone gradient's storage layout, in bucket order
  for (Bucket& bucket : buckets_) {
    if (!bucket.alone) continue;
    bucket.layout = backend_.storage_view(params_[bucket.first]->grad).layout;
    layouts += bucket.layout + "\n";
  }
  if (!same_on_every_rank(layouts)) {
    for (Bucket& bucket : buckets_) bucket.layout.clear();
    reporter_.note("the ranks lay out gradients differently (other processors?): summing them as plain floats");
  }
  layouts_agreed_ = true;
}

bool GradientReducer::same_on_every_rank(const std::string& text) {
  std::uint64_t size = text.size();
  comm_.broadcast(std::as_writable_bytes(std::span<std::uint64_t>(&size, 1)), 0);
  std::string rank0 = comm_.rank() == 0 ? text : std::string(size, '\0');
  comm_.broadcast(std::as_writable_bytes(std::span<char>(rank0)), 0);
  std::array<double, 1> differing{rank0 == text ? 0.0 : 1.0};
  comm_.allreduce_sum(std::span<double>(differing));
  return differing[0] == 0.0;
}

void GradientReducer::start(Bucket& bucket) {
  if (!bucket.layout.empty()) {
    // Gradients keep the layout they were made with; were one to change
    // on one rank, the ranks would add up unrelated elements.
    const Backend::StorageView view = backend_.storage_view(params_[bucket.first]->grad);
    if (view.data == nullptr || view.layout != bucket.layout)
      throw failure("data parallel: the gradient of " + params_[bucket.first]->name +
                    " changed its layout during training");
    bucket.request = comm_.start_allreduce_sum(std::span<float>(view.data, view.elements));
    return;
  }
  std::size_t at = bucket.offset;
  for (std::size_t i = bucket.first; i < bucket.end; ++i) {
    backend_.copy_to_host(params_[i]->grad, grad_host_.data() + at);
    at += std::size_t(params_[i]->grad.elements());
  }
  bucket.request = comm_.start_allreduce_sum(std::span<float>(grad_host_).subspan(bucket.offset, bucket.elements));
}

void GradientReducer::gradients_ready(std::size_t pending) {
  while (started_ < buckets_.size() && buckets_[started_].first >= pending) start(buckets_[started_++]);
  comm_.progress();
}

void GradientReducer::reduce() {
  gradients_ready(0);
  for (const Bucket& bucket : buckets_) {
    comm_.wait(bucket.request);
    if (!bucket.layout.empty()) {  // summed in place
      params_[bucket.first]->grad.mark_modified();
      continue;
    }
    std::size_t at = bucket.offset;
    for (std::size_t i = bucket.first; i < bucket.end; ++i) {
      backend_.copy_from_host(grad_host_.data() + at, params_[i]->grad);
      at += std::size_t(params_[i]->grad.elements());
    }
  }
  started_ = 0;
}

}  // namespace anneal::engine
