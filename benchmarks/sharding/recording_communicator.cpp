#include "sharding/recording_communicator.h"

#include <chrono>
#include <utility>

#include "bench_util.h"

namespace shardtrain_bench::sharding {
namespace {

double now_s() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

class TimedWork final : public Work {
 public:
  // index: the collective's record in recorder.log, -1 when not recording.
  TimedWork(std::unique_ptr<Work> inner, Recorder& recorder, int64_t index)
      : inner_(std::move(inner)), recorder_(recorder), index_(index) {}
  bool test() override { return inner_->test(); }
  void wait() override {
    const double start = now_s();
    inner_->wait();
    const double end = now_s();
    recorder_.seconds_blocked += end - start;
    if (index_ < 0) return;
    CollectiveRecord& r = recorder_.log[static_cast<size_t>(index_)];
    if (r.wait_begin < 0) r.wait_begin = start;
    r.wait_end = end;
  }

 private:
  std::unique_ptr<Work> inner_;
  Recorder& recorder_;
  int64_t index_;
};

}  // namespace

RecordingCommunicator::RecordingCommunicator(std::unique_ptr<Communicator> inner, std::shared_ptr<Recorder> recorder)
    : inner_(std::move(inner)), recorder_(std::move(recorder)) {
  id_ = static_cast<int>(recorder_->inner.size());
  recorder_->inner.push_back(inner_.get());
}

RecordingCommunicator::~RecordingCommunicator() { recorder_->inner[static_cast<size_t>(id_)] = nullptr; }

std::unique_ptr<Work> RecordingCommunicator::all_reduce_async(at::Tensor tensor, ReduceOp op) {
  CollectiveRecord r = record(Op::kAllReduce, tensor, tensor);
  r.reduce = op;
  return finish(r, inner_->all_reduce_async(tensor, op));
}

std::unique_ptr<Work> RecordingCommunicator::reduce_scatter_async(at::Tensor input, at::Tensor output, ReduceOp op) {
  CollectiveRecord r = record(Op::kReduceScatter, input, output);
  r.reduce = op;
  return finish(r, inner_->reduce_scatter_async(input, output, op));
}

std::unique_ptr<Work> RecordingCommunicator::reduce_scatter_v_async(at::Tensor input, at::Tensor output,
                                                                    const std::vector<int64_t>& counts, ReduceOp op) {
  CollectiveRecord r = record(Op::kReduceScatterV, input, output);
  r.reduce = op;
  r.counts = counts;
  return finish(r, inner_->reduce_scatter_v_async(input, output, counts, op));
}

std::unique_ptr<Work> RecordingCommunicator::all_gather_async(at::Tensor input, at::Tensor output) {
  return finish(record(Op::kAllGather, input, output), inner_->all_gather_async(input, output));
}

std::unique_ptr<Work> RecordingCommunicator::all_gather_v_async(at::Tensor input, at::Tensor output,
                                                                const std::vector<int64_t>& counts) {
  CollectiveRecord r = record(Op::kAllGatherV, input, output);
  r.counts = counts;
  return finish(r, inner_->all_gather_v_async(input, output, counts));
}

std::unique_ptr<Work> RecordingCommunicator::broadcast_async(at::Tensor tensor, int root) {
  CollectiveRecord r = record(Op::kBroadcast, tensor, tensor);
  r.root = root;
  return finish(r, inner_->broadcast_async(tensor, root));
}

void RecordingCommunicator::barrier() {
  CollectiveRecord r;
  r.comm_id = id_;
  r.op = Op::kBarrier;
  const double start = now_s();
  inner_->barrier();
  const double end = now_s();
  recorder_->seconds_blocked += end - start;
  r.launched = r.wait_begin = start;
  r.wait_end = end;
  if (recorder_->recording) recorder_->log.push_back(r);
  stats_ = inner_->stats();
}

std::unique_ptr<Communicator> RecordingCommunicator::split(int color, int key) {
  auto sub = std::make_unique<RecordingCommunicator>(inner_->split(color, key), recorder_);
  stats_ = inner_->stats();
  return sub;
}

CollectiveRecord RecordingCommunicator::record(Op op, const at::Tensor& input, const at::Tensor& output) const {
  CollectiveRecord r;
  r.comm_id = id_;
  r.op = op;
  r.dtype = input.scalar_type();
  r.in_numel = input.numel();
  r.out_numel = output.numel();
  return r;
}

std::unique_ptr<Work> RecordingCommunicator::finish(CollectiveRecord r, std::unique_ptr<Work> work) {
  r.launched = now_s();  // just after the launch (microseconds)
  r.bytes_sent = inner_->stats().bytes_sent - stats_.bytes_sent;
  stats_ = inner_->stats();
  int64_t index = -1;
  if (recorder_->recording) {
    index = static_cast<int64_t>(recorder_->log.size());
    recorder_->log.push_back(r);
  }
  return std::make_unique<TimedWork>(std::move(work), *recorder_, index);
}

}  // namespace shardtrain_bench::sharding
