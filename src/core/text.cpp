#include "shardtrain/core/text.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace shardtrain {

std::string shortest_text(double value) {
  char buffer[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  return buffer;
}

std::string seconds_text(double seconds) {
  // Whole seconds as plain digits (shortest_text(600) is "6e+02"), the rest as read back exactly.
  if (seconds == std::floor(seconds) && std::fabs(seconds) < 1e15) {
    char buffer[32];
    std::snprintf(buffer, sizeof(buffer), "%.0f s", seconds);
    return buffer;
  }
  return shortest_text(seconds) + " s";
}

std::string join_names(const std::vector<std::string>& names, const std::string& separator) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : separator) + name;
  return out;
}

std::string clip_for_message(const std::string& text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  std::size_t end = max_bytes;
  // Back up over UTF-8 continuation bytes (10xxxxxx) so no character is split.
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end) + "... (" + std::to_string(text.size()) + " bytes)";
}

std::string shape_text(const int64_t* dims, std::size_t rank) {
  std::string out = "[";
  for (std::size_t i = 0; i < rank; ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + "]";
}

}  // namespace shardtrain
