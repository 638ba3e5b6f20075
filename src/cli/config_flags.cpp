#include "cli/config_flags.h"

#include <type_traits>

#include "shardtrain/core/check.h"

namespace shardtrain {

ConfigOverrides ConfigFlags::overrides() const {
  ConfigOverrides out;
  for (const auto& [key, option] : options)
    if (option->count() > 0) out.emplace_back(key, option->as<std::string>());
  // Flags CLI11 did not know are passed on as keys, so that a typo gets the
  // same "unknown key ...; did you mean ...?" answer as in a config file.
  const std::vector<std::string> extras = command->remaining();
  for (size_t i = 0; i < extras.size(); ++i) {
    const std::string& arg = extras[i];
    if (arg.rfind("--", 0) != 0) throw Error("unexpected argument '" + arg + "' (run with --help for usage)");
    std::string key = arg.substr(2), value;
    const size_t equals = key.find('=');
    if (equals != std::string::npos) {
      value = key.substr(equals + 1);
      key.resize(equals);
    } else if (i + 1 < extras.size() && extras[i + 1].rfind("--", 0) != 0) {
      value = extras[++i];
    }
    out.emplace_back(key, value);
  }
  return out;
}

RunConfig ConfigFlags::load(const LoadOptions& options) const { return load_run_config(file, overrides(), options); }

std::shared_ptr<ConfigFlags> add_config_flags(CLI::App& command) {
  auto flags = std::make_shared<ConfigFlags>();
  flags->command = &command;
  command.allow_extras();
  command.add_option("-c,--config", flags->file, "run config (TOML: [model] [data] [train] [parallel] [checkpoint] [run])")
      ->check(CLI::ExistingFile);
  RunConfig defaults;
  visit_config_keys(defaults, [&](const char* name, const auto& field, const char* help) {
    using Field = std::decay_t<decltype(field)>;
    std::string type = std::is_same_v<Field, std::string> || is_named_enum_v<Field> ? "TEXT"
                       : std::is_same_v<Field, bool>                            ? "BOOL"
                       : std::is_same_v<Field, int64_t>                         ? "INT"
                       : std::is_same_v<Field, std::vector<std::string>>       ? "LIST"
                                                                                : "FLOAT";
    std::string description = help;
    if constexpr (std::is_same_v<Field, std::vector<std::string>>)
      description += " (a TOML array in single quotes, '[\"a\", \"b\"]', or a,b)";
    if constexpr (is_named_enum_v<Field>) {
      const std::vector<std::string> choices = enum_names<Field>();
      description += " {";
      for (size_t i = 0; i < choices.size(); ++i) description += (i ? "," : "") + choices[i];
      description += "}";
    }
    // Values stay text here: load_run_config() converts and validates them
    // exactly as it does for the config file, so both give the same errors.
    CLI::Option* option = command.add_option(std::string("--") + name)
                              ->description(description)
                              ->type_name(type)
                              ->group("Config keys (override the file)")
                              ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    flags->options.emplace_back(name, option);
  });
  return flags;
}

}  // namespace shardtrain
