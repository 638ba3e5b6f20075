#include "parallel/offload.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <string>

#include "shardtrain/core/check.h"
#include "shardtrain/optim/clip.h"

#if SHARDTRAIN_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace shardtrain {

struct HostOptimizer::Impl {
  struct Span {
    int64_t begin = 0, count = 0;
  };
  int64_t numel = 0;
  at::Tensor master;  // host fp32 [numel]
  at::Tensor grads;   // host fp32 [numel]
  std::unique_ptr<AdamW> adamw;
  std::vector<Span> spans;  // offloaded since the last step, in the order queued
  bool cuda = false;
#if SHARDTRAIN_TORCH_CUDA
  c10::DeviceIndex device = 0;
  c10::optional<c10::cuda::CUDAStream> stream;  // the copy stream
  at::cuda::CUDAEvent ready;                    // reused: "the compute stream got this far"
  std::vector<at::cuda::CUDAEvent> done;        // done[i]: span i's gradients are on the host
#endif

  at::Tensor host_empty(int64_t n) const {
    at::TensorOptions options = at::TensorOptions().dtype(at::kFloat);
    // Asynchronous copies need page-locked host memory.
    if (cuda) options = options.pinned_memory(true);
    return at::empty({n}, options);
  }

  // dst.copy_(src) queued on the copy stream behind the compute stream's
  // work; `device_side` is the device tensor of the two, which the caching
  // allocator must not reuse before the copy stream is done with it.
  // record_done: add an event the host can wait for (done.back()).
  void queue_copy(const at::Tensor& dst, const at::Tensor& src, const at::Tensor& device_side, bool record_done) {
#if SHARDTRAIN_TORCH_CUDA
    if (cuda) {
      ready.record(c10::cuda::getCurrentCUDAStream(device));
      ready.block(*stream);
      {
        c10::cuda::CUDAStreamGuard guard(*stream);
        dst.copy_(src, /*non_blocking=*/true);
      }
      c10::cuda::CUDACachingAllocator::recordStream(device_side.storage().data_ptr(), *stream);
      if (record_done) {
        done.emplace_back();
        done.back().record(*stream);
      }
      return;
    }
#endif
    (void)device_side, (void)record_done;
    dst.copy_(src);
  }

  void wait_span(size_t index) {
#if SHARDTRAIN_TORCH_CUDA
    if (cuda) done[index].synchronize();
#endif
    (void)index;
  }

  // The compute stream waits for everything queued on the copy stream.
  void join() {
#if SHARDTRAIN_TORCH_CUDA
    if (cuda) {
      at::cuda::CUDAEvent copied;
      copied.record(*stream);
      copied.block(c10::cuda::getCurrentCUDAStream(device));
    }
#endif
  }

  void queue_grads(const at::Tensor& device_grads, int64_t begin, int64_t count) {
    queue_copy(grads.narrow(0, begin, count), device_grads.narrow(0, begin, count), device_grads, true);
    spans.push_back({begin, count});
  }

  std::vector<Span> sorted_spans() const {
    std::vector<Span> sorted = spans;
    std::sort(sorted.begin(), sorted.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
    return sorted;
  }
};

bool HostOptimizer::needed(const at::Tensor& device_params, bool force) {
  return force || !device_params.device().is_cpu();
}

HostOptimizer::HostOptimizer(const at::Tensor& device_params, const AdamWOptions& options, bool force)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  ST_ASSERT(needed(device_params, force), "HostOptimizer on a CPU shard without force");
  ST_ASSERT(device_params.dim() == 1 && at::isFloatingType(device_params.scalar_type()),
            "HostOptimizer: the parameter shard must be 1-D floating");
  s.numel = device_params.numel();
  if (device_params.is_cuda()) {
#if SHARDTRAIN_TORCH_CUDA
    s.cuda = true;
    s.device = device_params.device().index();
    s.stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, s.device);
#else
    throw Error("optimizer offload from a CUDA device needs a CUDA LibTorch (this build's LibTorch is CPU-only)");
#endif
  }
  s.master = s.host_empty(s.numel);
  s.master.copy_(device_params);
  s.grads = s.host_empty(s.numel);  // step() reads only spans offloaded into it
  s.adamw = std::make_unique<AdamW>(s.numel, options, at::TensorOptions().dtype(at::kFloat));
}

HostOptimizer::~HostOptimizer() {
  // Copies still queued write into (or read from) our host buffers.
  try {
    synchronize();
  } catch (...) {
  }
}

void HostOptimizer::offload_grads(const at::Tensor& device_grads, int64_t begin, int64_t count) {
  Impl& s = *impl_;
  ST_ASSERT(device_grads.numel() == s.numel && begin >= 0 && count >= 0 && begin + count <= s.numel,
            "HostOptimizer::offload_grads: span outside the shard");
  if (count == 0) return;
  s.queue_grads(device_grads, begin, count);
}

bool HostOptimizer::offloaded(int64_t begin) const {
  for (const Impl::Span& span : impl_->spans)
    if (span.begin == begin) return true;
  return false;
}

void HostOptimizer::offload_rest(const at::Tensor& device_grads, int pieces) {
  Impl& s = *impl_;
  const int64_t piece = std::max<int64_t>(1, (s.numel + std::max(pieces, 1) - 1) / std::max(pieces, 1));
  auto queue_gap = [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; b += piece) s.queue_grads(device_grads, b, std::min(piece, end - b));
  };
  int64_t cursor = 0;
  for (const Impl::Span& span : s.sorted_spans()) {
    if (span.begin > cursor) queue_gap(cursor, span.begin);
    cursor = std::max(cursor, span.begin + span.count);
  }
  queue_gap(cursor, s.numel);
}

void HostOptimizer::step(const at::Tensor& device_params, double grad_scale,
                         const std::vector<ElementRange>& decay_ranges, double lr) {
  Impl& s = *impl_;
  ST_ASSERT(device_params.numel() == s.numel, "HostOptimizer::step: parameter shard of another size");
  {
    int64_t cursor = 0;
    for (const Impl::Span& span : s.sorted_spans()) {
      ST_ASSERT(span.begin == cursor, "HostOptimizer::step: the offloaded gradient spans do not tile the shard (at " +
                                          std::to_string(cursor) + ")");
      cursor += span.count;
    }
    ST_ASSERT(cursor == s.numel, "HostOptimizer::step: gradients offloaded up to element " + std::to_string(cursor) +
                                     " of " + std::to_string(s.numel));
  }
  s.adamw->begin_step();
  for (size_t index = 0; index < s.spans.size(); ++index) {
    const Impl::Span span = s.spans[index];
    s.wait_span(index);
    at::Tensor grads = s.grads.narrow(0, span.begin, span.count);
    at::Tensor master = s.master.narrow(0, span.begin, span.count);
    scale_grads(grads, grad_scale);
    s.adamw->step_span(master, grads, span.begin, decay_ranges, lr);
    s.queue_copy(device_params.narrow(0, span.begin, span.count), master, device_params, false);
  }
  s.join();
  s.spans.clear();
#if SHARDTRAIN_TORCH_CUDA
  s.done.clear();
#endif
}

void HostOptimizer::synchronize() {
#if SHARDTRAIN_TORCH_CUDA
  if (impl_->cuda) impl_->stream->synchronize();
#endif
}

void HostOptimizer::load_master(const at::Tensor& device_params) {
  synchronize();
  impl_->master.copy_(device_params);
}

void HostOptimizer::store_master(const at::Tensor& device_params) {
  synchronize();
  device_params.copy_(impl_->master);
}

void HostOptimizer::discard() {
  synchronize();
  impl_->spans.clear();
#if SHARDTRAIN_TORCH_CUDA
  impl_->done.clear();
#endif
}

AdamW& HostOptimizer::adamw() { return *impl_->adamw; }
const AdamW& HostOptimizer::adamw() const { return *impl_->adamw; }
at::Tensor& HostOptimizer::master() { return impl_->master; }
const at::Tensor& HostOptimizer::master() const { return impl_->master; }
int64_t HostOptimizer::host_bytes() const { return impl_->numel * 4 * 4; }

void HostOptimizer::count(StrategyMemory& memory) const {
  memory.optimizer_bytes += impl_->numel * 4;  // the master copy (AdamW's state is counted by the strategy)
  memory.grad_bytes += impl_->numel * 4;       // the host copy of the gradients
  memory.host_bytes = host_bytes();
}
bool HostOptimizer::asynchronous() const { return impl_->cuda; }

}  // namespace shardtrain
