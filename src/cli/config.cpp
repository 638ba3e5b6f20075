#include "shardtrain/cli/config.h"

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
#include <sys/stat.h>

#include "cli/config_list.h"
#include "shardtrain/cli/deepspeed_config.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/limits.h"
#include "shardtrain/core/log.h"
#include "shardtrain/optim/schedule.h"
#include "shardtrain/tasks/task_rules.h"

namespace shardtrain {
namespace {

// ---- value conversion: one function per field type ------------------------

// Values are quoted whole unless very long (a 1 MB line pasted by mistake).
std::string quote(const std::string& s) { return "'" + shorten(s) + "'"; }

void parse_value(const std::string& key, const std::string& text, std::string& out) { out = text; }

void parse_value(const std::string& key, const std::string& text, int64_t& out) {
  out = parse_integer_setting(key, text);
}

void parse_value(const std::string& key, const std::string& text, double& out) {
  out = parse_number_setting(key, text);
}

void parse_value(const std::string& key, const std::string& text, std::optional<double>& out) {
  double value = 0;
  parse_value(key, text, value);
  out = value;
}

template <class E, std::enable_if_t<is_named_enum_v<E>, int> = 0>
void parse_value(const std::string& key, const std::string& text, E& out) {
  const std::optional<E> value = find_enum<E>(text);
  if (!value) throw Error(key + " = " + quote(text) + ": allowed values are " + quoted_list(enum_names<E>()));
  out = *value;
}

// A list (data.labels, data.choices): cli/config_list.h.
void parse_value(const std::string& key, const std::string& text, std::vector<std::string>& out) {
  out = list_from_text(key, text);
}

void parse_value(const std::string& key, const std::string& text, bool& out) {
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

std::string format_double(double value) {
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

std::string toml_value(const std::string& v) {
  std::string out = "\"";
  for (char ch : v) {
    if (ch == '"' || ch == '\\') out.push_back('\\');
    out.push_back(ch);
  }
  return out + "\"";
}
std::string toml_value(int64_t v) { return std::to_string(v); }
std::string toml_value(double v) { return format_double(v); }
std::string toml_value(bool v) { return v ? "true" : "false"; }
std::string toml_value(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + toml_value(v[i]);
  return out + "]";
}
template <class E, std::enable_if_t<is_named_enum_v<E>, int> = 0>
std::string toml_value(E v) {
  return toml_value(std::string(enum_name(v)));
}

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

bool is_file(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
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

bool is_dir(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
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

namespace {

// The checks validate_run_config() makes, each throwing an Error that names
// the key and prints its value as the user wrote it (integers as integers).
void require(bool ok, const std::string& message) {
  if (!ok) throw Error(message);
}
void positive(const char* key, double value) {
  require(value > 0, std::string(key) + " = " + format_double(value) + ": must be > 0");
}
void positive(const char* key, int64_t value) {
  require(value > 0, std::string(key) + " = " + std::to_string(value) + ": must be > 0");
}
void non_negative(const char* key, double value) {
  require(value >= 0, std::string(key) + " = " + format_double(value) + ": must be >= 0");
}
void non_negative(const char* key, int64_t value) {
  require(value >= 0, std::string(key) + " = " + std::to_string(value) + ": must be >= 0");
}
void probability(const char* key, double value) {
  require(value >= 0 && value < 1, std::string(key) + " = " + format_double(value) + ": must be in [0, 1)");
}

void validate_model(const ModelConfig& m) {
  if (m.init == ModelInit::kPretrained) {
    require(!m.path.empty(),
            "model.init = \"pretrained\" needs model.path (a HF model folder); for a random model set "
            "model.init = \"random\" and model.config");
  } else {
    require(!m.config.empty() || !m.path.empty(),
            "model.init = \"random\" needs model.config (a HF config.json) or model.path");
  }
  if (!m.path.empty()) require(is_dir(m.path), "model.path = " + quote(m.path) + ": no such directory");
  if (!m.config.empty()) require(is_file(m.config), "model.config = " + quote(m.config) + ": no such file");
  require(!m.vocab.empty(),
          "model.vocab: needed when model.path is not set (a vocab.txt, a tokenizer.json, or a tokenizer folder)");
  require(is_file(m.vocab) || is_dir(m.vocab), "model.vocab = " + quote(m.vocab) + ": no such file or folder");
  // As `tokenize --lowercase`: the override applies to a vocab.txt only; a
  // tokenizer.json or a folder says itself whether it lowercases.
  if (m.lowercase && (is_dir(m.vocab) || extension_of(m.vocab) == "json"))
    throw Error("model.lowercase = true goes with a vocab.txt file, but the tokenizer is " +
                (is_dir(m.vocab) ? "the folder " + quote(m.vocab) +
                                       (m.vocab == m.path ? " (model.path's own: tokenizer.json, or vocab.txt with "
                                                            "tokenizer_config.json)"
                                                          : "")
                                 : "the tokenizer.json " + quote(m.vocab)) +
                ", which says itself whether it lowercases; set do_lower_case in its tokenizer_config.json (or its "
                "normalizer), or leave model.lowercase out");
  non_negative("model.num_labels", m.num_labels);
  require(m.num_labels <= kMaxNumLabels, "model.num_labels = " + std::to_string(m.num_labels) + ": more than the " +
                                             std::to_string(kMaxNumLabels) + " labels a classifier may have");
  if (m.hidden_dropout_prob) probability("model.hidden_dropout_prob", *m.hidden_dropout_prob);
  if (m.attention_probs_dropout_prob) probability("model.attention_probs_dropout_prob", *m.attention_probs_dropout_prob);
}

void validate_data(const DataConfig& d) {
  require(!d.train_file.empty(), "data.train_file: not set (the training data file)");
  require(is_file(d.train_file), "data.train_file = " + quote(d.train_file) + ": no such file");
  if (!d.eval_file.empty()) require(is_file(d.eval_file), "data.eval_file = " + quote(d.eval_file) + ": no such file");
  require(d.max_length >= kMinSequenceLength && d.max_length <= kMaxSequenceLength,
          "data.max_length = " + std::to_string(d.max_length) + ": must be in [" + std::to_string(kMinSequenceLength) +
              ", " + std::to_string(kMaxSequenceLength) + "] ([CLS] and two [SEP] need 3 tokens)");
}

// The data keys of one task, against model.task: the task's own rules, and
// no key another task owns changed from its default (a printed config lists
// every key, at its default).
void validate_task(const RunConfig& config) {
  const Task task = config.model.task;
  // Each key's value as printed, and its default's.
  std::map<std::string, std::string> printed, default_printed;
  auto print_into = [](std::map<std::string, std::string>& into) {
    return [&into](const char* name, const auto& field, const char*) {
      using Field = std::decay_t<decltype(field)>;
      if constexpr (std::is_same_v<Field, std::optional<double>>)
        into[name] = field ? toml_value(*field) : "";
      else
        into[name] = toml_value(field);
    };
  };
  visit_config_keys(config, print_into(printed));
  const RunConfig fresh;
  visit_config_keys(fresh, print_into(default_printed));
  for (const Task other : all_tasks()) {
    if (other == task) continue;
    for (const std::string& key : task_rules(other).own_keys())
      require(printed.at(key) == default_printed.at(key),
              key + " only applies when model.task = \"" + enum_name(other) + "\" (it is \"" + enum_name(task) +
                  "\")");
  }
  task_rules(task).validate(config.model, config.data);
}

void validate_train(const TrainConfig& t, const JobConfig& run) {
  require(t.num_epochs >= 1 || t.max_steps > 0,
          "train.num_epochs = " + std::to_string(t.num_epochs) + ": must be >= 1 (or set train.max_steps)");
  non_negative("train.max_steps", t.max_steps);
  positive("train.lr", t.lr);
  non_negative("train.weight_decay", t.weight_decay);
  probability("train.adam_beta1", t.adam_beta1);
  probability("train.adam_beta2", t.adam_beta2);
  positive("train.adam_epsilon", t.adam_epsilon);
  non_negative("train.warmup_steps", t.warmup_steps);
  require(t.warmup_ratio >= 0 && t.warmup_ratio <= 1,
          "train.warmup_ratio = " + format_double(t.warmup_ratio) + ": must be in [0, 1]");
  require(!(t.warmup_steps > 0 && t.warmup_ratio > 0),
          "train.warmup_steps and train.warmup_ratio are both set; set only one");
  positive("train.batch_size", t.batch_size);
  positive("train.eval_batch_size", t.eval_batch_size);
  positive("train.gradient_accumulation_steps", t.gradient_accumulation_steps);
  non_negative("train.max_grad_norm", t.max_grad_norm);
  non_negative("train.seed", t.seed);
  non_negative("train.eval_every_steps", t.eval_every_steps);
  positive("train.log_every_steps", t.log_every_steps);
  if (t.mixed_precision == Precision::kFp16)
    require(run.device == Device::kCuda,
            "train.mixed_precision = \"fp16\" needs run.device = \"cuda\" (fp16 with loss scaling is a GPU "
            "mode; LibTorch's CPU kernels have no fp16 matmul); on CPU use train.mixed_precision = \"bf16\"");
  const Fp16Config& f = t.fp16;
  non_negative("train.fp16.loss_scale", f.loss_scale);
  require(f.initial_scale_power >= 0 && f.initial_scale_power <= 63,
          "train.fp16.initial_scale_power = " + std::to_string(f.initial_scale_power) + ": must be in [0, 63]");
  positive("train.fp16.loss_scale_window", f.loss_scale_window);
  positive("train.fp16.hysteresis", f.hysteresis);
  non_negative("train.fp16.min_loss_scale", f.min_loss_scale);
}

// FSDP's MixedPrecision dtypes, against the strategy and the device.
void validate_fsdp_dtypes(const ParallelConfig& p, const TrainConfig& t, const JobConfig& run) {
  if (p.strategy != StrategyKind::kFsdp) return;  // validate_parallel refuses changed fsdp keys elsewhere
  const char* base = enum_name(t.mixed_precision);
  auto resolved = [&](DtypeSetting c) {
    return c != DtypeSetting::kAuto ? std::string(enum_name(c))
                                   : t.mixed_precision == Precision::kNo ? std::string("fp32") : std::string(base);
  };
  const std::string param = resolved(p.fsdp.param_dtype), reduce = resolved(p.fsdp.reduce_dtype);
  require(param != "fp16" || run.device == Device::kCuda,
          "parallel.fsdp.param_dtype = \"fp16\" needs run.device = \"cuda\"; on CPU use \"bf16\"");
  require(reduce == "fp32" || reduce == param,
          "parallel.fsdp.reduce_dtype = \"" + reduce + "\" with param_dtype \"" + param +
              "\": gradients are reduced in the parameters' dtype or in fp32; set reduce_dtype to \"" + param +
              "\" or \"fp32\"");
  require(reduce == param || p.fsdp.sharding_strategy != FsdpShardingStrategy::kNoShard,
          "parallel.fsdp.reduce_dtype = \"fp32\" with param_dtype \"" + param +
              "\" needs a sharded FSDP strategy (FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD): NO_SHARD reduces in "
              "the parameters' dtype");
}

// A printed config writes every key, so for the keys below only a changed
// value counts as set.
void validate_parallel(const ParallelConfig& p, const std::set<std::string>& keys_set) {
  non_negative("parallel.ranks_per_node", p.ranks_per_node);
  positive("parallel.bucket_cap_mb", p.bucket_cap_mb);
  // A DeepSpeed JSON's values were checked against the keys set here when it
  // was applied (cli/deepspeed_config.h): a contradiction names both.
  if (!p.deepspeed_config.empty())
    require(is_file(p.deepspeed_config), "parallel.deepspeed_config = " + quote(p.deepspeed_config) + ": no such file");
  const ZeroConfig& z = p.zero;
  non_negative("parallel.zero.reduce_bucket_size", z.reduce_bucket_size);
  non_negative("parallel.zero.allgather_bucket_size", z.allgather_bucket_size);
  non_negative("parallel.zero.stage3_prefetch_bucket_size", z.stage3_prefetch_bucket_size);
  non_negative("parallel.zero.stage3_param_persistence_threshold", z.stage3_param_persistence_threshold);
  const ZeroConfig zero_defaults;
  const StrategyKind strategy = p.strategy;
  const bool sharded = strategy == StrategyKind::kZero1 || strategy == StrategyKind::kZero2 ||
                       strategy == StrategyKind::kZero3 || strategy == StrategyKind::kHybrid;
  const bool params_sharded = strategy == StrategyKind::kZero3 || strategy == StrategyKind::kHybrid;
  auto only_for = [&](const char* key, bool same, bool applies, const char* strategies) {
    require(same || !keys_set.count(key) || applies,
            std::string(key) + " only applies when parallel.strategy is " + strategies + " (it is \"" +
                enum_name(strategy) + "\")" + (strategy == StrategyKind::kFsdp ? "; for fsdp use parallel.fsdp.*" : ""));
  };
  const char* kSharded = "\"zero1\", \"zero2\", \"zero3\" or \"hybrid\"";
  const char* kParamsSharded = "\"zero3\" or \"hybrid\" (parameters are sharded only there)";
  only_for("parallel.zero.overlap_comm", z.overlap_comm == zero_defaults.overlap_comm, sharded, kSharded);
  only_for("parallel.zero.reduce_bucket_size", z.reduce_bucket_size == zero_defaults.reduce_bucket_size, sharded,
           kSharded);
  only_for("parallel.zero.allgather_bucket_size", z.allgather_bucket_size == zero_defaults.allgather_bucket_size,
           sharded, kSharded);
  only_for("parallel.zero.contiguous_gradients", z.contiguous_gradients == zero_defaults.contiguous_gradients, sharded,
           kSharded);
  only_for("parallel.zero.round_robin_gradients", z.round_robin_gradients == zero_defaults.round_robin_gradients,
           sharded, kSharded);
  only_for("parallel.zero.stage3_prefetch_bucket_size",
           z.stage3_prefetch_bucket_size == zero_defaults.stage3_prefetch_bucket_size, params_sharded, kParamsSharded);
  only_for("parallel.zero.stage3_param_persistence_threshold",
           z.stage3_param_persistence_threshold == zero_defaults.stage3_param_persistence_threshold, params_sharded,
           kParamsSharded);
  only_for("parallel.zero.gather_16bit_weights_on_model_save",
           z.gather_16bit_weights_on_model_save == zero_defaults.gather_16bit_weights_on_model_save, params_sharded,
           kParamsSharded);
  // Two names for one bucket size: refuse a changed bucket_cap_mb next to reduce_bucket_size.
  require(z.reduce_bucket_size == 0 || !keys_set.count("parallel.bucket_cap_mb") ||
              p.bucket_cap_mb == ParallelConfig().bucket_cap_mb,
          "parallel.zero.reduce_bucket_size and parallel.bucket_cap_mb are both set (two sizes for the gradient "
          "buckets); keep one");
  if (strategy == StrategyKind::kFsdp) return;
  const FsdpConfig fsdp_defaults;
  auto unchanged = [&](const char* key, bool same) {
    require(same || !keys_set.count(key), std::string(key) + " only applies when parallel.strategy = \"fsdp\" (it is \"" +
                                              enum_name(strategy) + "\")");
  };
  unchanged("parallel.fsdp.sharding_strategy", p.fsdp.sharding_strategy == fsdp_defaults.sharding_strategy);
  unchanged("parallel.fsdp.state_dict_type", p.fsdp.state_dict_type == fsdp_defaults.state_dict_type);
  unchanged("parallel.fsdp.offload_to_cpu", p.fsdp.offload_to_cpu == fsdp_defaults.offload_to_cpu);
  unchanged("parallel.fsdp.rank0_only", p.fsdp.rank0_only == fsdp_defaults.rank0_only);
  unchanged("parallel.fsdp.backward_prefetch", p.fsdp.backward_prefetch == fsdp_defaults.backward_prefetch);
  unchanged("parallel.fsdp.forward_prefetch", p.fsdp.forward_prefetch == fsdp_defaults.forward_prefetch);
  unchanged("parallel.fsdp.param_dtype", p.fsdp.param_dtype == fsdp_defaults.param_dtype);
  unchanged("parallel.fsdp.reduce_dtype", p.fsdp.reduce_dtype == fsdp_defaults.reduce_dtype);
  unchanged("parallel.fsdp.buffer_dtype", p.fsdp.buffer_dtype == fsdp_defaults.buffer_dtype);
}

void validate_early_stopping(const TrainConfig& t, const CheckpointConfig& k) {
  non_negative("train.early_stopping_patience", t.early_stopping_patience);
  non_negative("train.early_stopping_threshold", t.early_stopping_threshold);
  require(t.early_stopping_patience == 0 || !k.score_attribute.empty(),
          "train.early_stopping_patience = " + std::to_string(t.early_stopping_patience) +
              " needs checkpoint.score_attribute (the metric that must improve, e.g. \"eval_mcc\") and "
              "checkpoint.score_order");
}

void validate_checkpoint(const CheckpointConfig& k, const DataConfig& d) {
  non_negative("checkpoint.every_steps", k.every_steps);
  non_negative("checkpoint.every_epochs", k.every_epochs);
  non_negative("checkpoint.num_to_keep", k.num_to_keep);
  require(k.preemption_grace_s >= 0 && k.preemption_grace_s <= 86400,
          str_format("checkpoint.preemption_grace_s = %g: must be 0 (off) to 86400 s; set it below the time the "
                     "scheduler leaves between SIGTERM and SIGKILL (Slurm: KillWait, GraceTime, --signal=TERM@N)",
                     k.preemption_grace_s));
  if (k.score_attribute.empty()) return;
  const auto& names = known_metric_names();
  require(std::find(names.begin(), names.end(), k.score_attribute) != names.end(),
          "checkpoint.score_attribute = " + quote(k.score_attribute) + ": allowed values are " + quoted_list(names));
  if (k.score_attribute.rfind("eval_", 0) == 0)
    require(!d.eval_file.empty(), "checkpoint.score_attribute = " + quote(k.score_attribute) +
                                      " needs data.eval_file (there is nothing to evaluate)");
}

void validate_run(const JobConfig& r) {
  require(!r.storage_path.empty(), "run.storage_path: must not be empty");
  require(r.name.find('/') == std::string::npos && r.name != "." && r.name != "..",
          "run.name = " + quote(r.name) + ": must be a plain folder name (no '/')");
  require(r.max_failures >= -1,
          str_format("run.max_failures must be -1 (no limit) or >= 0, got %lld", static_cast<long long>(r.max_failures)));
  positive("run.collective_timeout_s", r.collective_timeout_s);
  // Deadlines are steady_clock nanoseconds (int64): 1e7 s (115 days) is far
  // inside them and longer than any job.
  require(r.collective_timeout_s <= 1e7,
          str_format("run.collective_timeout_s = %g: at most 1e7 s (115 days)", r.collective_timeout_s));
#ifndef SHARDTRAIN_HAVE_NCCL
  require(r.device != Device::kCuda,
          "run.device = \"cuda\": this build of shardtrain has no CUDA/NCCL support; rebuild with the CUDA "
          "toolkit and NCCL installed, or use run.device = \"cpu\"");
#endif
}

}  // namespace

void validate_run_config(const RunConfig& c, const std::set<std::string>& keys_set) {
  validate_model(c.model);
  validate_data(c.data);
  validate_task(c);
  validate_train(c.train, c.run);
  validate_lr_schedule_config(c.train, keys_set);
  validate_parallel(c.parallel, keys_set);
  validate_fsdp_dtypes(c.parallel, c.train, c.run);
  validate_checkpoint(c.checkpoint, c.data);
  validate_early_stopping(c.train, c.checkpoint);
  validate_run(c.run);
}

std::string config_to_toml(const RunConfig& config) {
  // Keys by section, sections in the order they first appear: TOML allows a
  // table header once, so a section's keys are printed together wherever the
  // key list puts them.
  std::vector<std::pair<std::string, std::string>> sections;  // (section, its lines)
  visit_config_keys(config, [&](const char* name, const auto& field, const char*) {
    const std::string key = name;
    const size_t dot = key.rfind('.');
    const std::string key_section = key.substr(0, dot);
    auto it = std::find_if(sections.begin(), sections.end(), [&](const auto& s) { return s.first == key_section; });
    if (it == sections.end()) it = sections.insert(sections.end(), {key_section, ""});
    std::string& out = it->second;
    const std::string leaf = key.substr(dot + 1);
    using Field = std::decay_t<decltype(field)>;
    if constexpr (std::is_same_v<Field, std::optional<double>>) {
      if (field)
        out += leaf + " = " + toml_value(*field) + "\n";
      else
        out += "# " + leaf + " = " + (key_section == "model" ? "(the model config's value)" : "(unset)") + "\n";
    } else {
      out += leaf + " = " + toml_value(field) + "\n";
    }
  });
  std::string out;
  for (const auto& [section, lines] : sections) out += (out.empty() ? "" : "\n") + ("[" + section + "]\n") + lines;
  return out;
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
