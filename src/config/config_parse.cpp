// Reading a run config: TOML text and command-line overrides into a
// RunConfig, derived values, numbers as text (config/config.h).
#include "shardtrain/config/config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <system_error>

#include "config/config_values.h"
#include "shardtrain/config/deepspeed_config.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/limits.h"
#include "shardtrain/core/log.h"
#include "shardtrain/optim/schedule.h"
#include "shardtrain/tasks/task_rules.h"

namespace shardtrain {
using namespace config_detail;
namespace {

// ---- helpers ----------------------------------------------------------------

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string suggestion_for(const std::string& key) {
  if (key.size() > 100) return "";  // no key is that long; the distances would cost seconds
  std::string best;
  // Suggest only close matches: a third of the key's length, at least 2 edits.
  size_t best_distance = std::max<size_t>(3, key.size() / 3 + 1);
  for (const auto& name : config_key_names()) {
    size_t d = edit_distance(key, name);
    // Also match the right key in the wrong section: "lr" vs "train.lr".
    const std::string leaf = name.substr(name.rfind('.') + 1);
    const std::string key_leaf = key.substr(key.rfind('.') + 1);
    if (leaf == key_leaf) d = std::min<size_t>(d, 1);
    if (d < best_distance) {
      best_distance = d;
      best = name;
    }
  }
  return best.empty() ? "" : "; did you mean " + quote(best) + "?";
}

// model.vocab naming model.path's own tokenizer, by any spelling: the folder
// itself, or its vocab.txt or tokenizer.json ("hf/vocab.txt", "./hf/vocab.txt",
// a link to it). Compared as files, never as strings.
bool names_folder_tokenizer(const std::string& vocab, const std::string& folder) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (fs::equivalent(vocab, folder, error)) return true;
  const fs::path file = fs::canonical(vocab, error);  // links and "..", resolved
  if (error) return false;
  const std::string name = file.filename().string();
  if (name != "vocab.txt" && name != "tokenizer.json") return false;
  return fs::equivalent(file.parent_path(), folder, error) && !error;
}

// A TOML value as the text parse_value() reads, after checking that its TOML
// type fits the field: a string where a string belongs, a number where a
// number belongs (an integer is a fine float), a boolean for a flag.
template <class Field>
std::string text_of(const std::string& key, const toml::node& node, const std::string& where) {
  auto wrong = [&](const char* expected) {
    std::ostringstream shown;
    if (node.is_string()) shown << quote(node.as_string()->get());
    else if (node.is_array()) shown << "an array";
    else if (node.is_table()) shown << "a table";
    else if (node.is_integer()) shown << node.as_integer()->get();
    else if (node.is_floating_point()) shown << format_double(node.as_floating_point()->get());
    else if (node.is_boolean()) shown << (node.as_boolean()->get() ? "true" : "false");
    else shown << "a date or time";
    return Error(key + ": expected " + expected + ", got " + shown.str() + where);
  };
  if constexpr (std::is_same_v<Field, std::string> || is_named_enum_v<Field>) {
    if (!node.is_string()) throw wrong("a string (in quotes)");
    return node.as_string()->get();
  } else if constexpr (std::is_same_v<Field, bool>) {
    if (!node.is_boolean()) throw wrong("true or false");
    return node.as_boolean()->get() ? "true" : "false";
  } else if constexpr (std::is_same_v<Field, int64_t>) {
    if (!node.is_integer()) throw wrong("an integer");
    return std::to_string(node.as_integer()->get());
  } else {
    if (node.is_integer()) return std::to_string(node.as_integer()->get());
    if (!node.is_floating_point()) throw wrong("a number");
    return format_double(node.as_floating_point()->get());
  }
}

// Applies one "key = value" to the config, or throws naming the key. The value
// is text (command line) or a TOML node (config file).
void assign(RunConfig& config, const std::string& key, const std::string* text, const toml::node* node,
            const std::string& where) {
  bool found = false;
  visit_config_keys(config, [&](const char* name, auto& field, const char*) {
    if (found || key != name) return;
    found = true;
    using Field = std::decay_t<decltype(field)>;
    if constexpr (std::is_same_v<Field, std::vector<std::string>>) {
      if (!node) {
        parse_value(key, *text, field);
        return;
      }
      if (const toml::value<std::string>* text_node = node->as_string()) {
        parse_value(key, text_node->get(), field);  // one name, or names separated by commas
        return;
      }
      const toml::array* array = node->as_array();
      if (!array) throw Error(key + ": expected an array of strings ([\"a\", \"b\"])" + where);
      field = list_from_toml(key, *array, where);
      return;
    } else {
    using Scalar = std::conditional_t<std::is_same_v<Field, std::optional<double>>, double, Field>;
    const std::string value = node ? text_of<Scalar>(key, *node, where) : *text;
    if constexpr (is_named_enum_v<Field>) {
      if (!find_enum<Field>(value))
        throw Error(key + " = " + quote(value) + where + ": allowed values are " + quoted_list(enum_names<Field>()));
    }
    try {
      parse_value(key, value, field);
    } catch (const Error& e) {
      throw Error(std::string(e.what()) + where);
    }
    }
  });
  if (found) return;
  // A section (train.lr_scheduler_kwargs) given one value: say it is a table.
  std::string children;
  visit_config_keys(config, [&](const char* name, auto&, const char*) {
    const std::string child(name);
    if (child.size() > key.size() + 1 && child.compare(0, key.size() + 1, key + ".") == 0)
      children += (children.empty() ? "" : ", ") + child.substr(key.size() + 1);
  });
  if (!children.empty())
    throw Error(key + where + ": is a table of keys (" + children + "), not one value; write [" + key +
                "] with name = value lines in a config file, or --" + key + ".<name> VALUE on the command line");
  throw Error("unknown key " + quote(key) + where + suggestion_for(key));
}

void assign_table(RunConfig& config, const toml::table& table, const std::string& prefix, const std::string& file,
                  std::set<std::string>& keys_set) {
  for (const auto& [name, node] : table) {
    const std::string key = prefix.empty() ? std::string(name.str()) : prefix + "." + std::string(name.str());
    const auto line = node.source().begin.line;
    const std::string where = " in " + file + (line > 0 ? " (line " + std::to_string(line) + ")" : "");
    if (const toml::table* section = node.as_table()) {
      assign_table(config, *section, key, file, keys_set);
      continue;
    }
    if (prefix.empty())
      throw Error("key " + quote(key) + where +
                  " is outside any section; put it under [model], [data], [train], [parallel], "
                  "[checkpoint] or [run]" + suggestion_for(key));
    assign(config, key, nullptr, &node, where);
    keys_set.insert(key);
  }
}

std::string stem_of(const std::string& path) {
  std::string base = path.substr(path.find_last_of('/') + 1);
  size_t dot = base.find_last_of('.');
  return dot == std::string::npos || dot == 0 ? base : base.substr(0, dot);
}

std::string extension_of(const std::string& path) {
  std::string base = path.substr(path.find_last_of('/') + 1);
  size_t dot = base.find_last_of('.');
  if (dot == std::string::npos) return "";
  std::string ext = base.substr(dot + 1);
  std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
  return ext;
}

// The keys a task fills when the user did not set them (tasks/task_spec.h's
// apply_defaults: run_ner's column names, a preset's columns, run_qa's 384).
void apply_task_defaults(RunConfig& config, const std::set<std::string>& keys_set) {
  task_rules(config.model.task).apply_defaults(config.data, keys_set);
}

}  // namespace

std::vector<std::string> config_key_names() {
  std::vector<std::string> names;
  RunConfig config;
  visit_config_keys(config, [&](const char* name, auto&, const char*) { names.push_back(name); });
  return names;
}

RunConfig parse_saved_run_config(const std::string& toml_text, const std::string& source) {
  RunConfig config;
  std::set<std::string> keys_set;
  toml::table table;
  try {
    table = toml::parse(toml_text, source);
  } catch (const toml::parse_error& e) {
    throw Error("cannot parse the run config of " + source + " (line " + std::to_string(e.source().begin.line) +
                "): " + std::string(e.description()));
  }
  assign_table(config, table, "", source, keys_set);
  return config;
}

RunConfig load_run_config(const std::string& file, const ConfigOverrides& overrides, const LoadOptions& options) {
  RunConfig config;
  std::set<std::string> keys_set;
  if (!file.empty()) {
    if (!is_file(file)) throw Error("config file " + quote(file) + " not found");
    toml::table table;
    try {
      table = toml::parse_file(file);
    } catch (const toml::parse_error& e) {
      throw Error("cannot parse config file " + quote(file) + " (line " +
                  std::to_string(e.source().begin.line) + ", column " + std::to_string(e.source().begin.column) +
                  "): " + std::string(e.description()));
    }
    assign_table(config, table, "", file, keys_set);
  }
  for (const auto& [key, value] : overrides) {
    assign(config, key, &value, nullptr, " (on the command line)");
    keys_set.insert(key);
  }

  // Derived values: filled once here so nothing downstream guesses them.
  if (config.run.name.empty() && keys_set.count("run.name"))
    throw Error("run.name = '': must not be empty (it names the run folder under run.storage_path); leave the key "
                "out to use the config file's name");
  if (config.run.name.empty()) config.run.name = file.empty() ? "shardtrain" : stem_of(file);
  // One resolution of the tokenizer, recorded as it runs (docs/DESIGN.md,
  // "Tokenizers"): no model.vocab, or one naming model.path's folder or its
  // vocab.txt / tokenizer.json by any spelling, is the folder's own tokenizer,
  // read in AutoTokenizer's order (tokenizer.json first), and model.vocab
  // becomes the folder, so the saved config.toml says what ran.
  if (!config.model.path.empty() &&
      (config.model.vocab.empty() || names_folder_tokenizer(config.model.vocab, config.model.path)))
    config.model.vocab = config.model.path;
  if (config.data.format == FileFormat::kAuto && !config.data.train_file.empty()) {
    const std::string ext = extension_of(config.data.train_file);
    if (ext == "tsv") config.data.format = FileFormat::kTsv;
    else if (ext == "csv") config.data.format = FileFormat::kCsv;
    else if (ext == "jsonl" || ext == "json") config.data.format = FileFormat::kJsonl;
    else if (ext == "conll") config.data.format = FileFormat::kConll;
    else
      throw Error("data.format: cannot tell the format of " + quote(config.data.train_file) +
                  " from its extension; set data.format to \"tsv\", \"csv\", \"jsonl\" or \"conll\"");
  }
  apply_task_defaults(config, keys_set);
  if (!config.parallel.deepspeed_config.empty()) {
    DeepSpeedContext context;
    context.world_size = options.world_size;
#if defined(SHARDTRAIN_HAVE_NCCL) && defined(SHARDTRAIN_TORCH_CUDA)
    context.cuda_build = true;
#endif
    context.keys_set = keys_set;
    DeepSpeedResolution resolved = apply_deepspeed_config(config, context);
    if (options.deepspeed_lines) *options.deepspeed_lines = resolved.lines;
    // What the JSON decided counts as set for the combination checks below,
    // except the strategy, which the JSON may choose without a conflict.
    resolved.keys_set.erase("parallel.strategy");
    keys_set.insert(resolved.keys_set.begin(), resolved.keys_set.end());
    try {
      validate_run_config(config, keys_set);
    } catch (const Error& e) {
      throw Error(std::string(e.what()) + " (parallel.strategy, parallel.offload_optimizer, parallel.zero.* and the "
                  "batch, clipping and precision keys come from parallel.deepspeed_config = " +
                  quote(config.parallel.deepspeed_config) + " here)");
    }
    return config;
  }
  validate_run_config(config, keys_set);
  return config;
}

int64_t parse_integer_setting(const std::string& name, const std::string& text, int64_t min, int64_t max) {
  // Digits after an optional sign, nothing else: strtoll alone would take
  // " 12", and CLI11 "0x10" (16).
  const size_t first = !text.empty() && (text[0] == '-' || text[0] == '+') ? 1 : 0;
  const bool digits = text.size() > first && text.find_first_not_of("0123456789", first) == std::string::npos;
  errno = 0;
  const long long value = digits ? std::strtoll(text.c_str(), nullptr, 10) : 0;
  if (!digits || errno == ERANGE) throw Error(name + ": expected an integer, got " + quote(text));
  if (value < min || value > max)
    throw Error(name + " = " + text + ": must be " +
                (max == INT64_MAX ? ">= " + std::to_string(min)
                                  : "in [" + std::to_string(min) + ", " + std::to_string(max) + "]"));
  return value;
}

double parse_number_setting(const std::string& name, const std::string& text, std::string* rest) {
  // A decimal number: sign, digits, one point, an exponent; no hex, inf or nan
  // (strtod reads "0x10" as 16 and "1e400" as inf).
  size_t i = !text.empty() && (text[0] == '-' || text[0] == '+') ? 1 : 0;
  size_t num_digits = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i, ++num_digits;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i, ++num_digits;
  }
  if (num_digits > 0 && i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    size_t j = i + 1;
    if (j < text.size() && (text[j] == '-' || text[j] == '+')) ++j;
    const size_t exponent_start = j;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
    if (j > exponent_start) i = j;
  }
  std::string tail = num_digits > 0 ? text.substr(i) : text;
  errno = 0;
  const double value = num_digits > 0 ? std::strtod(text.substr(0, i).c_str(), nullptr) : 0;
  if (num_digits == 0 || errno == ERANGE || !std::isfinite(value) || (!rest && !tail.empty()))
    throw Error(name + ": expected a number, got " + quote(text));
  if (rest) {
    tail.erase(0, tail.find_first_not_of(' '));
    *rest = tail;
  }
  return value;
}

}  // namespace shardtrain
