// Private to the cli layer: the value of a list-valued config key
// (data.labels, data.choices), from a config file's TOML array or from the
// text of a command-line flag or a sweep's override (docs/config.md):
//
//   list_from_text("data.labels", "[\"O\", \"B-PER\"]")  // {"O", "B-PER"}, as in the file
//   list_from_text("data.labels", "O,B-PER")             // {"O", "B-PER"}: the comma form
//   list_from_text("data.labels", "[O,B-PER]")           // Error showing '["O", "B-PER"]'
#pragma once

#include <toml++/toml.h>

#include <string>
#include <vector>

namespace shardtrain {

// The items of `array`: non-empty strings, else Error naming `key` (`where`
// follows it: " in x.toml (line 7)").
std::vector<std::string> list_from_toml(const std::string& key, const toml::array& array, const std::string& where);

// A command-line list: a TOML array (what starts with '['), or the comma form
// where it cannot mean anything else (no item with quotes or brackets, or
// spaces at its ends); "" and "[]" are the empty list. Error naming `key`,
// with the list written as a TOML array, for anything else.
std::vector<std::string> list_from_text(const std::string& key, const std::string& text);

}  // namespace shardtrain
