// JSON that users hand us (a DeepSpeed config, a model's config.json, a
// tokenizer_config.json, a safetensors header or index), parsed with the limits
// a hostile file needs: docs/DESIGN.md, "Errors and hangs".
//
//   nlohmann::json j = read_user_json_file("ds.json", "parallel.deepspeed_config");
//   nlohmann::json h = parse_user_json(header_text, "model.safetensors header", 3);
//   throw Error("zero_optimization = " + json_for_message(value) + ": expected an object");
//
// - Nesting deeper than `max_depth` (objects and arrays) is an error, found
//   while parsing, so neither the parser nor a walk over the value recurses
//   without bound. No config shardtrain reads is deeper than 6.
// - A key given twice in one object is an error naming the key and where it
//   is (nlohmann, like Python's json module, would silently keep the last one;
//   DeepSpeed's loader refuses it).
// - Every message is bounded: echoed values and parser text are clipped
//   (clip_for_message in core/text.h).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <string>

namespace shardtrain {

// Deeper than any config (DeepSpeed's deepest section is 3 levels) but far below what overflows a stack.
constexpr int kMaxUserJsonDepth = 64;

// Parses `text`. Error "<source>: not valid JSON: ..." / "<source>: JSON nested
// deeper than N levels (at ...)" / "<source>: key \"k\" appears twice in
// <path>; keep one".
nlohmann::json parse_user_json(const std::string& text, const std::string& source,
                               int max_depth = kMaxUserJsonDepth);

// Reads the regular file `path` (require_regular_file in core/fs_util.h: a
// folder or a FIFO is refused before opening) and parses it as above. Messages
// begin with `source`, e.g. "parallel.deepspeed_config = 'ds.json'"; the file
// checks begin with "<what> = '<path>'".
nlohmann::json read_user_json_file(const std::string& path, const std::string& what,
                                   int max_depth = kMaxUserJsonDepth);

// value.dump(), clipped to about `max_bytes` for an error message.
std::string json_for_message(const nlohmann::json& value, std::size_t max_bytes = 160);

}  // namespace shardtrain
