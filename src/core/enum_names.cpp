#include "shardtrain/core/enum_names.h"

#include "shardtrain/core/check.h"

namespace shardtrain {

std::string quoted_list(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "\"" : ", \"") + name + "\"";
  return out;
}

void throw_bad_enum_name(const std::string& key, const std::string& name, const std::vector<std::string>& allowed) {
  throw Error(key + " = '" + name + "': allowed values are " + quoted_list(allowed));
}

}  // namespace shardtrain
