// What may still happen once a FATAL error has begun ending the job.
#pragma once

#include <string>

namespace shardtrain {

// After fatal() has begun in this process (a watchdog thread's phase timeout,
// say), the job is being aborted while its other threads still run: nothing
// may then be committed to or deleted from a run folder. Writers of lasting
// files (a checkpoint's rename into place, pruning old checkpoints) call
// refuse_if_fatal_in_progress(), which throws Error "<what>: not done, a FATAL
// error is ending this job". docs/DESIGN.md, "Errors and hangs".
bool fatal_in_progress();
void refuse_if_fatal_in_progress(const std::string& what);
namespace detail {
// Tests only: what fatal() sets first.
void set_fatal_in_progress_for_test(bool value);
}  // namespace detail

}  // namespace shardtrain
