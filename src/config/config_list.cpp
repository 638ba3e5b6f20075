#include "config/config_list.h"

#include <cctype>
#include <sstream>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {
namespace {

std::string list_quoted(const std::string& text) { return "'" + shorten(text) + "'"; }

// How to write `text`, a list given in a mangled form, for a message: the
// comma-separated items without the spaces, quotes and brackets at their ends
// ("[O,B-PER]", the shell having eaten the quotes, is meant as ["O", "B-PER"]),
// as a TOML array and in the comma form.
std::string list_forms(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream parts(text);
  for (std::string item; std::getline(parts, item, ',');) {
    const size_t begin = item.find_first_not_of(" \t\"'[]");
    if (begin == std::string::npos) continue;
    items.push_back(item.substr(begin, item.find_last_not_of(" \t\"'[]") - begin + 1));
  }
  if (items.empty()) items = {"O", "B-PER"};
  std::string array, comma_form;
  for (const std::string& item : items) {
    std::string quoted;
    for (char ch : item) quoted += ch == '"' || ch == '\\' ? std::string("\\") + ch : std::string(1, ch);
    array += (array.empty() ? "[\"" : ", \"") + quoted + "\"";
    comma_form += (comma_form.empty() ? "" : ",") + item;
  }
  return " (on the command line a list is a TOML array, in single quotes for the shell: '" + shorten(array + "]") +
         "', or the comma form " + shorten(comma_form) + ")";
}

}  // namespace

std::vector<std::string> list_from_toml(const std::string& key, const toml::array& array, const std::string& where) {
  std::vector<std::string> out;
  for (const toml::node& item : array) {
    if (!item.is_string() || item.as_string()->get().empty())
      throw Error(key + ": expected an array of non-empty strings" + where);
    out.push_back(item.as_string()->get());
  }
  return out;
}

std::vector<std::string> list_from_text(const std::string& key, const std::string& text) {
  const size_t first = text.find_first_not_of(" \t");
  if (first != std::string::npos && text[first] == '[') {
    toml::table parsed;
    try {
      parsed = toml::parse("value = " + text);
    } catch (const toml::parse_error&) {
      parsed = toml::table();  // refused below
    }
    const toml::array* array = parsed.size() == 1 ? parsed["value"].as_array() : nullptr;
    if (!array) throw Error(key + " = " + list_quoted(text) + ": not a TOML array of strings" + list_forms(text));
    return list_from_toml(key, *array, list_forms(text));
  }
  std::vector<std::string> out;
  if (text.empty()) return out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) throw Error(key + ": empty item in the list " + list_quoted(text));
    if (item.find_first_of("\"'[]") != std::string::npos || std::isspace(static_cast<unsigned char>(item.front())) ||
        std::isspace(static_cast<unsigned char>(item.back())))
      throw Error(key + " = " + list_quoted(text) + ": the item " + list_quoted(item) +
                  " has quotes or brackets, or spaces at its ends, so the comma form is ambiguous" + list_forms(text));
    out.push_back(item);
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

}  // namespace shardtrain
