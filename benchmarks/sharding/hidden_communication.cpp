#include "sharding/hidden_communication.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <vector>

#include "shardtrain/core/check.h"

namespace shardtrain_bench::sharding {

// A collective cannot finish before every member has launched it (max over
// the members of `launched`, reduced through the collective's own
// communicator); blocked time before that is another rank still computing,
// not communication.
std::pair<double, double> split_blocked_time(Recorder& recorder) {
  double exposed = 0, peer_wait = 0;
  for (size_t id = 0; id < recorder.inner.size(); ++id) {
    if (recorder.inner[id] == nullptr) continue;
    std::vector<size_t> mine;
    for (size_t i = 0; i < recorder.log.size(); ++i)
      if (recorder.log[i].comm_id == static_cast<int>(id)) mine.push_back(i);
    // Every member of the communicator logged the same collectives in the same order.
    std::vector<double> last;
    for (size_t i : mine) last.push_back(recorder.log[i].launched);
    recorder.inner[id]->all_reduce(
        at::from_blob(last.data(), {static_cast<int64_t>(last.size())}, at::TensorOptions().dtype(at::kDouble)),
        ReduceOp::kMax);
    for (size_t k = 0; k < mine.size(); ++k) {
      const CollectiveRecord& r = recorder.log[mine[k]];
      if (r.wait_begin < 0) continue;
      const double all_launched = last[k];
      exposed += std::max(0.0, r.wait_end - std::max(r.wait_begin, all_launched));
      peer_wait += std::max(0.0, std::min(r.wait_end, all_launched) - r.wait_begin);
    }
  }
  return {exposed, peer_wait};
}

double replay(const Recorder& recorder, MPI_Comm world) {
  // One input and one output buffer per dtype, big enough for every record.
  std::map<at::ScalarType, std::pair<int64_t, int64_t>> sizes;
  for (const CollectiveRecord& r : recorder.log) {
    auto& s = sizes[r.dtype];
    s.first = std::max(s.first, r.in_numel);
    s.second = std::max(s.second, r.out_numel);
  }
  std::map<at::ScalarType, std::pair<at::Tensor, at::Tensor>> buffers;
  for (const auto& [dtype, s] : sizes)
    buffers[dtype] = {at::zeros({std::max<int64_t>(s.first, 1)}, at::TensorOptions().dtype(dtype)),
                      at::zeros({std::max<int64_t>(s.second, 1)}, at::TensorOptions().dtype(dtype))};
  // Communicator by communicator, each one's collectives in their order: a
  // rank's log interleaves communicators in the order its collectives were
  // launched, which may differ between ranks (hybrid's cross-node averages
  // start when a reduce-scatter completes); replayed blocking in that order,
  // two ranks could each wait in a collective the other has not reached.
  std::vector<const CollectiveRecord*> order;
  for (size_t id = 0; id < recorder.inner.size(); ++id)
    for (const CollectiveRecord& r : recorder.log)
      if (r.comm_id == static_cast<int>(id)) order.push_back(&r);
  ST_CHECK_MPI(MPI_Barrier(world));
  const double start = MPI_Wtime();
  for (const CollectiveRecord* record : order) {
    const CollectiveRecord& r = *record;
    Communicator* comm = recorder.inner[static_cast<size_t>(r.comm_id)];
    ST_ASSERT(comm != nullptr, "bench_sharding: replay after the strategy's communicator was destroyed");
    if (r.op == Op::kBarrier) {
      comm->barrier();
      continue;
    }
    const auto& [in_buffer, out_buffer] = buffers.at(r.dtype);
    at::Tensor in = in_buffer.narrow(0, 0, r.in_numel);
    at::Tensor out = out_buffer.narrow(0, 0, r.out_numel);
    switch (r.op) {
      case Op::kAllReduce: comm->all_reduce(in, r.reduce); break;
      case Op::kReduceScatter: comm->reduce_scatter(in, out, r.reduce); break;
      case Op::kReduceScatterV: comm->reduce_scatter_v(in, out, r.counts, r.reduce); break;
      case Op::kAllGather: comm->all_gather(in, out); break;
      case Op::kAllGatherV: comm->all_gather_v(in, out, r.counts); break;
      case Op::kBroadcast: comm->broadcast(in, r.root); break;
      case Op::kBarrier: break;
    }
  }
  return MPI_Wtime() - start;
}

}  // namespace shardtrain_bench::sharding
