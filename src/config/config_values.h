// Private to the config layer: how each field type is read from text and
// written back as TOML, and the file checks that parsing and validation share
// (config_parse.cpp, config_validate.cpp, config_print.cpp).
#pragma once

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "config/config_list.h"
#include "shardtrain/config/config.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/enum_names.h"
#include "shardtrain/core/log.h"

namespace shardtrain::config_detail {

// ---- value conversion: one function per field type ------------------------

// Values are quoted whole unless very long (a 1 MB line pasted by mistake).
inline std::string quote(const std::string& s) { return "'" + shorten(s) + "'"; }

inline void parse_value(const std::string& key, const std::string& text, std::string& out) { out = text; }

inline void parse_value(const std::string& key, const std::string& text, int64_t& out) {
  out = parse_integer_setting(key, text);
}

inline void parse_value(const std::string& key, const std::string& text, double& out) {
  out = parse_number_setting(key, text);
}

inline void parse_value(const std::string& key, const std::string& text, std::optional<double>& out) {
  double value = 0;
  parse_value(key, text, value);
  out = value;
}

template <class E, std::enable_if_t<is_named_enum_v<E>, int> = 0>
inline void parse_value(const std::string& key, const std::string& text, E& out) {
  const std::optional<E> value = find_enum<E>(text);
  if (!value) throw Error(key + " = " + quote(text) + ": allowed values are " + quoted_list(enum_names<E>()));
  out = *value;
}

// A list (data.labels, data.choices): cli/config_list.h.
inline void parse_value(const std::string& key, const std::string& text, std::vector<std::string>& out) {
  out = list_from_text(key, text);
}

inline void parse_value(const std::string& key, const std::string& text, bool& out) {
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  if (lower == "true" || lower == "1" || lower == "yes" || lower == "on") {
    out = true;
  } else if (lower == "false" || lower == "0" || lower == "no" || lower == "off") {
    out = false;
  } else {
    throw Error(key + ": expected true or false, got " + quote(text));
  }
}

inline std::string format_double(double value) {
  char buffer[64];
  // Whole numbers as digits: the shortest %g of 10 is "1e+01".
  if (std::isfinite(value) && value == std::floor(value) && std::fabs(value) < 1e15)
    return std::to_string(static_cast<long long>(value)) + ".0";
  std::snprintf(buffer, sizeof(buffer), "%.17g", value);
  // Shortest representation that reads back to the same double.
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  std::string out = buffer;
  if (out.find_first_of(".eEn") == std::string::npos) out += ".0";  // stays a TOML float
  return out;
}

inline std::string toml_value(const std::string& v) {
  std::string out = "\"";
  for (char ch : v) {
    if (ch == '"' || ch == '\\') out.push_back('\\');
    out.push_back(ch);
  }
  return out + "\"";
}
inline std::string toml_value(int64_t v) { return std::to_string(v); }
inline std::string toml_value(double v) { return format_double(v); }
inline std::string toml_value(bool v) { return v ? "true" : "false"; }
inline std::string toml_value(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + toml_value(v[i]);
  return out + "]";
}
template <class E, std::enable_if_t<is_named_enum_v<E>, int> = 0>
inline std::string toml_value(E v) {
  return toml_value(std::string(enum_name(v)));
}

inline bool is_file(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}
inline bool is_dir(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

}  // namespace shardtrain::config_detail
