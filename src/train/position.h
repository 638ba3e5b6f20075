// Private to the train layer: where the training loop stands, what
// trainer.cpp's loop and its Reporter (train/reporter.h) share.
#pragma once

#include <cstdint>
#include <string>

#include "shardtrain/report/progress.h"
#include "shardtrain/train/early_stopping.h"

namespace shardtrain::train_detail {

// Where training stands: what a checkpoint records besides the tensors.
struct Position {
  int64_t step = 0;            // optimizer steps taken (applied or skipped)
  int64_t skipped = 0;         // of those, skipped for non-finite gradients (fp16)
  int64_t epoch = 0;           // epochs done (the sampler's epoch)
  int64_t resume_batches = -1; // >= 0: the first epoch continues after this many global batches
  double loss_sum = 0;         // training loss since the last report
  int64_t loss_count = 0;
  double trained_before = 0;   // seconds trained by earlier invocations
  ProgressWindow log_window;   // the progress log's sums since its last row (report/progress.h)
  EarlyStoppingState early;    // train/early_stopping.h
  std::string stop_reason;     // early.stopped: why
};

}  // namespace shardtrain::train_detail
