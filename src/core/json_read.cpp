// Torch-free and needing only core/text.cpp: tests/fuzz builds it with the
// safetensors parser.
#include "shardtrain/core/json_read.h"

#include <nlohmann/json.hpp>

#include <set>
#include <vector>

#include "shardtrain/core/check.h"
#include "shardtrain/core/text.h"

namespace shardtrain {
namespace {

using Json = nlohmann::json;

// One open object or array while parsing: its keys so far (objects; only
// counted, or kept when `keys` is asked for) or the index of its current
// element (arrays), to name where a problem is.
struct JsonReadFrame {
  bool is_object = false;
  std::set<std::string> keys;
  std::size_t num_keys = 0;
  std::string last_key;
  long long index = -1;
};

// "zero_optimization.offload_optimizer" or "layers[3].name": where the parser is.
std::string json_read_path(const std::vector<JsonReadFrame>& frames, size_t count) {
  std::string path;
  for (size_t i = 0; i < count; ++i) {
    const JsonReadFrame& f = frames[i];
    if (f.is_object) path += (path.empty() ? "" : ".") + clip_for_message(f.last_key, 60);
    else path += "[" + std::to_string(f.index) + "]";
  }
  return path.empty() ? "the top-level object" : path;
}

// parse_user_json, the keys of each object counted (`find_repeated_key`
// false: an object that ends with fewer entries than keys read had one twice,
// and false is returned) or kept to name the repeated one (true: it throws).
// Keeping every key (a set of strings) is costly for a 256k-token vocabulary.
bool parse_checked(const std::string& text, const std::string& source, int max_depth, bool find_repeated_key,
                   Json& out) {
  bool repeated = false;
  std::vector<JsonReadFrame> frames;
  auto element_starts = [&frames] {
    if (!frames.empty() && !frames.back().is_object) ++frames.back().index;
  };
  Json::parser_callback_t check = [&](int, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        element_starts();
        if (static_cast<int>(frames.size()) >= max_depth)
          throw Error(source + ": JSON nested deeper than " + std::to_string(max_depth) + " levels (at " +
                      clip_for_message(json_read_path(frames, frames.size()), 120) + ")");
        frames.push_back({});
        frames.back().is_object = event == Json::parse_event_t::object_start;
        break;
      case Json::parse_event_t::key: {
        JsonReadFrame& top = frames.back();
        const std::string& key = parsed.get_ref<const std::string&>();
        ++top.num_keys;
        if (find_repeated_key && !top.keys.insert(key).second)
          throw Error(source + ": key \"" + clip_for_message(key, 60) + "\" appears twice in " +
                      (frames.size() == 1 ? std::string("the top-level object")
                                          : "\"" + json_read_path(frames, frames.size() - 1) + "\"") +
                      "; keep one (JSON readers disagree on which one wins)");
        top.last_key = key;
        break;
      }
      case Json::parse_event_t::object_end:
        repeated = repeated || parsed.size() != frames.back().num_keys;
        frames.pop_back();
        break;
      case Json::parse_event_t::array_end:
        frames.pop_back();
        break;
      case Json::parse_event_t::value:
        element_starts();
        break;
    }
    return true;
  };
  try {
    out = Json::parse(text, check);
  } catch (const Json::exception& e) {
    throw Error(source + ": not valid JSON: " + clip_for_message(e.what(), 200));
  }
  return !repeated;
}

}  // namespace

Json parse_user_json(const std::string& text, const std::string& source, int max_depth) {
  Json value;
  if (!parse_checked(text, source, max_depth, false, value)) parse_checked(text, source, max_depth, true, value);
  return value;
}

std::string json_for_message(const Json& value, std::size_t max_bytes) {
  return clip_for_message(value.dump(), max_bytes);
}

}  // namespace shardtrain
