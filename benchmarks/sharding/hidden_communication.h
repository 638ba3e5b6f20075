// bench_sharding: how much of a strategy's communication its compute hid,
// from the collectives a Recorder logged during the timed steps
// (recording_communicator.h).
//
// Blocked time (Recorder::seconds_blocked: time in Work::wait()) also
// contains waiting for a slower rank that has not launched the collective yet
// (still computing: load imbalance, a descheduled rank), which is not
// communication. Each rank therefore stamps every collective's launch and the
// start and end of its wait (steady_clock, one clock for all processes of a
// node); split_blocked_time() takes, over the members of each communicator,
// the latest launch of each collective, and a wait splits into peer_wait
// (before the last member launched) and exposed (after: the communication
// this rank did not hide). On several nodes the clocks differ: callers then
// count the whole blocked time as exposed (a lower bound on the hidden share).
//
// replay() runs the logged collectives again, the same sizes through the same
// communicators (one communicator after another, each one's in their order),
// each one blocking, with no compute; the faster of two replays / steps is the
// step's communication time alone, and
//   hidden share = 1 - exposed / communication time, clamped to [0, 1].
#pragma once
#include <mpi.h>

#include <utility>

#include "sharding/recording_communicator.h"

namespace shardtrain_bench::sharding {

// Splits this rank's blocked time over the logged collectives into waiting
// for the last rank to launch a collective and the collective's own exposed
// time after that: {exposed, peer_wait} seconds. Collective: the launch times
// are reduced through each logged communicator still alive, so every rank
// calls it. Needs one clock for all ranks: call it only when every rank is on
// one node.
std::pair<double, double> split_blocked_time(Recorder& recorder);

// Runs the logged collectives again, blocking, with no compute in between;
// returns this rank's seconds (after a barrier on `world`).
double replay(const Recorder& recorder, MPI_Comm world);

}  // namespace shardtrain_bench::sharding
