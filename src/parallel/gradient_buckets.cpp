#include "parallel/gradient_buckets.h"

#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>

#include "shardtrain/core/check.h"

namespace shardtrain {
namespace {

// A collective followed by a step that needs its result (copy a received
// chunk into place), run once when the collective is seen complete.
class WorkThen final : public Work {
 public:
  WorkThen(std::unique_ptr<Work> inner, std::function<void()> then)
      : inner_(std::move(inner)), then_(std::move(then)) {}
  ~WorkThen() override {
    if (then_) inner_->wait();  // the buffers must outlive the collective; the result is not needed any more
  }
  bool test() override {
    if (!then_) return true;
    if (!inner_->test()) return false;
    finish();
    return true;
  }
  void wait() override {
    if (!then_) return;
    inner_->wait();
    finish();
  }

 private:
  void finish() {
    auto then = std::move(then_);
    then_ = nullptr;
    then();
  }
  std::unique_ptr<Work> inner_;
  std::function<void()> then_;
};

}  // namespace

GradientBuckets::GradientBuckets(const FlatModel& model, double bucket_cap_mb, LaunchFn launch, StrategyStats& stats)
    : launch_(std::move(launch)), stats_(stats) {
  ST_ASSERT(bucket_cap_mb > 0, "GradientBuckets: bucket_cap_mb must be > 0");
  // Buckets from the end of the layout backwards, cut at parameter boundaries.
  const auto& slots = model.layout->slots();
  const int64_t cap_elements = std::max<int64_t>(1, static_cast<int64_t>(bucket_cap_mb * 1024 * 1024) / 4);
  bucket_of_slot_.assign(slots.size(), 0);
  int64_t end = model.layout->numel();
  size_t k = slots.size();
  while (k > 0) {
    int count = 0;
    do {
      --k;
      bucket_of_slot_[k] = static_cast<int>(buckets_.size());
      ++count;
    } while (k > 0 && end - slots[k - 1].offset <= cap_elements);
    buckets_.push_back({slots[k].offset, end});
    slots_in_bucket_.push_back(count);
    end = slots[k].offset;
  }
  slot_done_.assign(slots.size(), 0);
  reset_round();

  hooks_ = std::make_unique<GradientReadyHooks>(model.parameters, [this](size_t i) { on_gradient(i); },
                                                "GradientBuckets");
}

std::unique_ptr<GradientBuckets> all_reduce_buckets(const FlatModel& model, double bucket_cap_mb, Communicator& comm,
                                                    StrategyStats& stats) {
  at::Tensor grads = model.grads;
  return std::make_unique<GradientBuckets>(
      model, bucket_cap_mb,
      [&comm, grads](ElementRange r) {
        return comm.all_reduce_async(grads.narrow(0, r.begin, r.size()), ReduceOp::kAvg);
      },
      stats);
}

std::unique_ptr<GradientBuckets> reduce_scatter_buckets(const FlatModel& model, double bucket_cap_mb,
                                                        Communicator& comm, StrategyStats& stats) {
  at::Tensor grads = model.grads;
  const ParamLayout& layout = *model.layout;
  return std::make_unique<GradientBuckets>(
      model, bucket_cap_mb,
      [&comm, &layout, grads](ElementRange bucket) -> std::unique_ptr<Work> {
        // Shards are contiguous and in rank order, so the bucket's elements
        // fall into the ranks' shards in rank order: one segment per rank.
        const int world = comm.size();
        std::vector<int64_t> counts(static_cast<size_t>(world));
        for (int r = 0; r < world; ++r) {
          const ElementRange shard = layout.shard_range(r, world);
          counts[static_cast<size_t>(r)] =
              std::max<int64_t>(0, std::min(bucket.end, shard.end) - std::max(bucket.begin, shard.begin));
        }
        const ElementRange mine = layout.shard_range(comm.rank(), world);
        const int64_t begin = std::max(bucket.begin, mine.begin);
        const int64_t count = counts[static_cast<size_t>(comm.rank())];
        at::Tensor received = at::empty({count}, grads.options());
        auto work = comm.reduce_scatter_v_async(grads.narrow(0, bucket.begin, bucket.size()), received, counts,
                                                ReduceOp::kAvg);
        return std::make_unique<WorkThen>(std::move(work), [grads, received, begin, count]() mutable {
          if (count > 0) grads.narrow(0, begin, count).copy_(received);
        });
      },
      stats);
}

void GradientBuckets::reset_round() {
  pending_ = slots_in_bucket_;
  std::fill(slot_done_.begin(), slot_done_.end(), 0);
  works_.clear();
  works_.resize(buckets_.size());
  next_launch_ = 0;
}

void GradientBuckets::launch(size_t bucket, bool from_hook) {
  works_[bucket] = launch_(buckets_[bucket]);
  ++stats_.buckets_total;
  if (from_hook) ++stats_.buckets_during_backward;
}

void GradientBuckets::on_gradient(size_t slot) {
  if (!sync_ || slot_done_[slot]) return;
  slot_done_[slot] = 1;
  --pending_[bucket_of_slot_[slot]];
  while (next_launch_ < buckets_.size() && pending_[next_launch_] == 0) launch(next_launch_++, true);
  // MPI moves non-blocking collectives forward only inside MPI calls.
  for (size_t b = 0; b < next_launch_; ++b)
    if (works_[b]) works_[b]->test();
}

void GradientBuckets::prepare(bool sync) {
  ST_ASSERT(next_launch_ == 0, "prepare_backward() while gradient reductions are pending");
  sync_ = sync;
  if (sync) reset_round();
}

void GradientBuckets::finish() {
  while (next_launch_ < buckets_.size()) launch(next_launch_++, false);
  const double start = MPI_Wtime();
  for (auto& work : works_) work->wait();
  stats_.seconds_waiting += MPI_Wtime() - start;
  sync_ = false;
  reset_round();
}

}  // namespace shardtrain
