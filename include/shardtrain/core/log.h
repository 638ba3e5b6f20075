// Logging. log_info/log_warn print on rank 0 only (the usual case: one line per
// event for the whole job); log_all prints on every rank, prefixed with the rank.
// Lines go to stderr, and to the run's log file once set_log_file() is called.
#pragma once

#include <string>

namespace shardtrain {

// Called once by World: the rank used for filtering and prefixes.
void set_log_rank(int rank);
// Put before every line on stderr (not in the log file): a sweep's trial,
// "[trial_003] ", where several trials log at once. Empty = none.
void set_log_stderr_prefix(const std::string& prefix);
// Every line logged on this rank also goes to `path` (appended). Empty = off.
// `deferred`: the lines are held in memory and reach the file only at
// commit_log_file(); closing it first (another set_log_file) drops them, so a
// job that turns out to do nothing leaves the file as it was.
void set_log_file(const std::string& path, bool deferred = false);
// The held lines go to the file, and every later line straight after them.
void commit_log_file();
// Appends one time-stamped line to `path` alone (not stderr): the error that
// ended a job, into its train.log. Failures are ignored (the error itself is
// on stderr already).
void append_to_log_file(const std::string& path, const std::string& line);

void log_info(const char* format, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char* format, ...) __attribute__((format(printf, 1, 2)));
void log_all(const char* format, ...) __attribute__((format(printf, 1, 2)));

// printf into a std::string.
std::string str_format(const char* format, ...) __attribute__((format(printf, 1, 2)));

// `text` for a message: unchanged when it has at most `max_bytes` bytes, else
// its first max_bytes bytes (never a split UTF-8 character) followed by
// "... (N more bytes)", so that a 1 MB line or value never floods a terminal.
std::string shorten(const std::string& text, size_t max_bytes = 200);

// 1536 -> "1.5 KiB", 3.2e9 -> "3.0 GiB" (binary units, one decimal; "512 B" below 1 KiB).
std::string format_bytes(double bytes);

}  // namespace shardtrain
