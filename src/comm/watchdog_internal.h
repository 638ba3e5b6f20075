// Private to comm: the boards whose heartbeat the watchdog thread advances.
#pragma once

namespace shardtrain {

class ArrivalBoard;

namespace detail {
// Starts the watchdog thread on first use. The board must unregister before
// it is destroyed.
void register_heartbeat(ArrivalBoard* board);
void unregister_heartbeat(ArrivalBoard* board);
}  // namespace detail

}  // namespace shardtrain
