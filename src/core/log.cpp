#include "shardtrain/core/log.h"

#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <vector>

namespace shardtrain {
namespace {

int g_rank = 0;
std::string g_stderr_prefix;
std::mutex g_mutex;
std::FILE* g_file = nullptr;
// set_log_file(path, deferred = true): the path, and the lines held until commit_log_file().
std::string g_deferred_path;
std::vector<std::string> g_held;

std::string time_stamp() {
  std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S ", std::localtime(&now));
  return stamp;
}

std::string vformat(const char* format, va_list args) {
  va_list copy;
  va_copy(copy, args);
  int size = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  if (size <= 0) return {};
  std::string out(static_cast<size_t>(size), '\0');
  std::vsnprintf(out.data(), out.size() + 1, format, args);
  return out;
}

void emit(const std::string& prefix, const std::string& body) {
  std::string line = prefix + body;
  if (line.empty() || line.back() != '\n') line.push_back('\n');
  std::lock_guard<std::mutex> lock(g_mutex);
  const std::string shown = g_stderr_prefix + line;
  std::fwrite(shown.data(), 1, shown.size(), stderr);
  std::fflush(stderr);
  if (g_file) {
    std::fputs(time_stamp().c_str(), g_file);
    std::fwrite(line.data(), 1, line.size(), g_file);
    std::fflush(g_file);
  } else if (!g_deferred_path.empty()) {
    g_held.push_back(time_stamp() + line);
  }
}

}  // namespace

void set_log_rank(int rank) { g_rank = rank; }

void set_log_stderr_prefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_stderr_prefix = prefix;
}

void set_log_file(const std::string& path, bool deferred) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_file) std::fclose(g_file);
  g_file = nullptr;
  g_held.clear();
  g_deferred_path = deferred ? path : "";
  if (!deferred && !path.empty()) g_file = std::fopen(path.c_str(), "a");
}

void commit_log_file() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_deferred_path.empty()) return;
  g_file = std::fopen(g_deferred_path.c_str(), "a");
  if (g_file) {
    for (const std::string& line : g_held) std::fwrite(line.data(), 1, line.size(), g_file);
    std::fflush(g_file);
  }
  g_held.clear();
  g_deferred_path.clear();
}

void append_to_log_file(const std::string& path, const std::string& line) {
  std::string text = time_stamp() + line;
  if (text.back() != '\n') text.push_back('\n');
  std::lock_guard<std::mutex> lock(g_mutex);
  if (std::FILE* file = std::fopen(path.c_str(), "a")) {
    std::fwrite(text.data(), 1, text.size(), file);
    std::fclose(file);
  }
}

std::string str_format(const char* format, ...) {
  va_list args;
  va_start(args, format);
  std::string out = vformat(format, args);
  va_end(args);
  return out;
}

std::string shorten(const std::string& text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t end = max_bytes;
  // Back up to the start of a UTF-8 character (continuation bytes are 10xxxxxx).
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end) + "... (" + std::to_string(text.size() - end) + " more bytes)";
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (!(bytes >= 0)) return "?";
  int unit = 0;
  while (bytes >= 1024 && unit < 6) {
    bytes /= 1024;
    ++unit;
  }
  return unit == 0 ? str_format("%.0f B", bytes) : str_format("%.1f %s", bytes, units[unit]);
}

void log_info(const char* format, ...) {
  if (g_rank != 0) return;
  va_list args;
  va_start(args, format);
  emit("", vformat(format, args));
  va_end(args);
}

void log_warn(const char* format, ...) {
  if (g_rank != 0) return;
  va_list args;
  va_start(args, format);
  emit("warning: ", vformat(format, args));
  va_end(args);
}

void log_all(const char* format, ...) {
  va_list args;
  va_start(args, format);
  emit("[rank " + std::to_string(g_rank) + "] ", vformat(format, args));
  va_end(args);
}

}  // namespace shardtrain
