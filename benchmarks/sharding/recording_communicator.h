// bench_sharding: a Communicator that records and times what a strategy does.
//
// The strategy's communicator is wrapped in a RecordingCommunicator that
// forwards every collective to the communicator it wraps (an MpiCommunicator)
// and, while the Recorder is recording (the timed steps), logs it: kind,
// sizes, which sub-communicator, the bytes it sent (ring accounting), when it
// was launched, and when this rank waited for it. Every Work::wait() (and
// barrier) is timed, recording or not: the time this rank was blocked on any
// collective, including the blocking collectives a strategy does not count in
// stats().seconds_waiting. Communicators split from it record into the same
// Recorder. hidden_communication.h turns the log into exposed and hidden time.
//
//   auto recorder = std::make_shared<Recorder>();
//   RecordingCommunicator comm(std::make_unique<MpiCommunicator>(world.comm()), recorder);
//   ... build the strategy on `comm`; recorder->recording = true; timed steps; recorder->recording = false;
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shardtrain/comm/communicator.h"

namespace shardtrain_bench::sharding {

using shardtrain::Communicator;
using shardtrain::ReduceOp;
using shardtrain::Work;

enum class Op { kAllReduce, kReduceScatter, kReduceScatterV, kAllGather, kAllGatherV, kBroadcast, kBarrier };

struct CollectiveRecord {
  int comm_id = 0;
  Op op = Op::kBarrier;
  at::ScalarType dtype = at::kFloat;
  int64_t in_numel = 0, out_numel = 0;
  ReduceOp reduce = ReduceOp::kSum;
  int root = 0;
  std::vector<int64_t> counts;
  int64_t bytes_sent = 0;  // ring accounting (communicator.h bytes_on_wire), this rank
  // steady_clock seconds (CLOCK_MONOTONIC: one clock for every process of a
  // node): when this rank launched it, and when it waited for it (-1: never
  // blocked on it, test() saw it complete).
  double launched = 0, wait_begin = -1, wait_end = -1;
};

// Shared by a root RecordingCommunicator and every communicator split from it.
struct Recorder {
  bool recording = false;
  std::vector<CollectiveRecord> log;  // while recording
  std::vector<Communicator*> inner;   // by comm_id; they live as long as their wrapper
  double seconds_blocked = 0;         // in Work::wait(), always counted (take deltas)
};

class RecordingCommunicator final : public Communicator {
 public:
  RecordingCommunicator(std::unique_ptr<Communicator> inner, std::shared_ptr<Recorder> recorder);
  ~RecordingCommunicator() override;

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend() const override { return inner_->backend(); }

  std::unique_ptr<Work> all_reduce_async(at::Tensor tensor, ReduceOp op) override;
  std::unique_ptr<Work> reduce_scatter_async(at::Tensor input, at::Tensor output, ReduceOp op) override;
  std::unique_ptr<Work> reduce_scatter_v_async(at::Tensor input, at::Tensor output, const std::vector<int64_t>& counts,
                                               ReduceOp op) override;
  std::unique_ptr<Work> all_gather_async(at::Tensor input, at::Tensor output) override;
  std::unique_ptr<Work> all_gather_v_async(at::Tensor input, at::Tensor output,
                                           const std::vector<int64_t>& counts) override;
  std::unique_ptr<Work> broadcast_async(at::Tensor tensor, int root) override;
  void barrier() override;
  std::unique_ptr<Communicator> split(int color, int key) override;

 private:
  CollectiveRecord record(Op op, const at::Tensor& input, const at::Tensor& output) const;
  std::unique_ptr<Work> finish(CollectiveRecord r, std::unique_ptr<Work> work);

  std::unique_ptr<Communicator> inner_;
  std::shared_ptr<Recorder> recorder_;
  int id_ = 0;
};

}  // namespace shardtrain_bench::sharding
