// Logging. log_info/log_warn print on rank 0 only (the usual case: one line per
// event for the whole job); log_all prints on every rank, prefixed with the rank.
// Lines go to stderr, and to the run's log file once set_log_file() is called.
#pragma once

#include <string>

namespace shardtrain {

// Called once by World: the rank used for filtering and prefixes.
void set_log_rank(int rank);
// Every line logged on this rank also goes to `path` (appended). Empty = off.
void set_log_file(const std::string& path);

void log_info(const char* format, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char* format, ...) __attribute__((format(printf, 1, 2)));
void log_all(const char* format, ...) __attribute__((format(printf, 1, 2)));

// printf into a std::string.
std::string str_format(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace shardtrain
