// TensorBoard event files: scalars by step in the format TensorBoard reads
// (what torch.utils.tensorboard.SummaryWriter writes for add_scalar).
//
//   TensorBoardWriter tensorboard(run_dir + "/tensorboard");   // on rank 0 only
//   tensorboard.add_scalar("train/loss", 0.6931, step);
//   tensorboard.add_scalar(tensorboard_tag("eval_accuracy"), 0.71, step);   // "eval/accuracy"
//   tensorboard.flush();                                                     // at each report
//
// The writer creates <dir>/events.out.tfevents.<unix time, 10 digits>.<host>
// (".<n>" appended if that name exists). The file is a sequence of TFRecords,
// one per Event (little-endian):
//   uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)
// with masked_crc32c(x) = ((c >> 15) | (c << 17)) + 0xa282ead8, c = CRC-32C
// (Castagnoli) of x; data is a serialised TensorBoard Event protobuf
// (src/report/proto/tensorboard_event.proto has TensorBoard's field numbers). The
// first Event holds file_version "brain.Event:2"; each add_scalar writes
// Event{wall_time, step, Summary{Value{tag, simple_value}}}, simple_value a
// float32 as in TensorBoard.
//
// Resume: TensorBoard reads every event file in the folder, in name order, so a
// resumed run that logged steps again would show them twice. Before a resumed
// run creates its writer, trim_tensorboard_events(dir, S) rewrites each event
// file that has events after step S, atomically (a temporary file and a
// rename), keeping only those with step <= S (and a damaged tail, from a job
// killed mid-write, is cut off; a temporary file left by a cut-short rewrite is
// deleted, as TensorBoard would read it too); the
// new writer's file then continues at S + 1. A run that starts afresh calls
// remove_tensorboard_events(dir) instead, as it removes an old result.jsonl.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace shardtrain {

class Error;  // core/check.h

// Seconds since the Unix epoch, as Python's time.time().
double unix_time_now();

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) and TFRecord's mask of it.
uint32_t crc32c(std::string_view data);
uint32_t masked_crc32c(std::string_view data);

// The tag Hugging Face's TensorBoardCallback gives a metric: "eval_loss" ->
// "eval/loss", "test_x" -> "test/x", anything else "train/<name>"
// ("loss" -> "train/loss", "learning_rate" -> "train/learning_rate").
std::string tensorboard_tag(const std::string& metric);

class TensorBoardWriter {
 public:
  // Creates `dir` (and its parents) and a new event file named for
  // `file_time`, and writes the file_version event. Throws shardtrain::Error
  // naming the folder or file when it cannot.
  explicit TensorBoardWriter(const std::string& dir, double file_time = unix_time_now());
  ~TensorBoardWriter();  // flushes
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One Event with one scalar. The value is stored as float32 (TensorBoard's
  // simple_value). Buffered: call flush() for it to reach the file.
  void add_scalar(const std::string& tag, double value, int64_t step, double wall_time = unix_time_now());
  // Writes what is buffered to the file. Throws shardtrain::Error on a write error.
  void flush();

  const std::string& path() const { return path_; }

 private:
  void write_event(const std::string& data);
  Error write_error(int errno_value) const;

  struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::string path_;
  std::unique_ptr<std::FILE, FileCloser> file_;
};

// What trim_tensorboard_events() did.
struct TensorBoardTrim {
  int64_t num_files = 0;           // event files looked at
  int64_t num_files_rewritten = 0;
  int64_t num_events_kept = 0;
  int64_t num_events_dropped = 0;  // step > max_step
  int64_t num_damaged_bytes = 0;   // cut off after the last intact record (a torn write)
};

// Keeps, in every event file of `dir` ("events.out.tfevents.*"), only the
// events with step <= max_step, as described above. A missing `dir` is
// nothing to do. Throws shardtrain::Error when a file cannot be read or rewritten.
TensorBoardTrim trim_tensorboard_events(const std::string& dir, int64_t max_step);

// Deletes the event files ("events.out.tfevents.*") of `dir`, for a run that
// starts afresh in a folder that had one; returns how many. A missing `dir` is
// nothing to do. Throws shardtrain::Error when a file cannot be deleted.
int64_t remove_tensorboard_events(const std::string& dir);

// One scalar read back from an event file (for tests and tools).
struct TensorBoardScalar {
  std::string tag;
  float value = 0;
  int64_t step = 0;
  double wall_time = 0;
};

// The scalars of one event file, in file order, checking every CRC. Throws
// shardtrain::Error naming the file and the byte offset of a damaged record.
std::vector<TensorBoardScalar> read_tensorboard_scalars(const std::string& file);

}  // namespace shardtrain
