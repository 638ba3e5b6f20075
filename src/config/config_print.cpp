// A resolved run config as TOML that load_run_config reads back unchanged
// (config/config.h's config_to_toml).
#include "shardtrain/config/config.h"

#include <algorithm>
#include <type_traits>
#include <utility>
#include <vector>

#include "config/config_values.h"

namespace shardtrain {
using namespace config_detail;

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

}  // namespace shardtrain
