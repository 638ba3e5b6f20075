// read_user_json_file (core/json_read.h): the file checks, then the parse.
#include <nlohmann/json.hpp>

#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/json_read.h"

namespace shardtrain {

nlohmann::json read_user_json_file(const std::string& path, const std::string& what, int max_depth) {
  require_regular_file(path, what);
  return parse_user_json(read_file(path, what), what + " = '" + path + "'", max_depth);
}

}  // namespace shardtrain
