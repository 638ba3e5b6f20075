// JSON from users (core/json_read.h): nesting bounded while parsing, duplicate
// keys refused with their path, echoed values clipped; and the readers that
// use it (a DeepSpeed JSON, a config.json, a tokenizer_config.json, a
// safetensors index) refusing a hostile file with a short message.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/json_read.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/model/encoder_config.h"
#include "shardtrain/model/safetensors.h"
#include "support/deepspeed_fixtures.h"

namespace test_json_read_test {

using namespace shardtrain_test::deepspeed_tests;

std::string json_read_nested(size_t depth) {
  return "{\"a\":" + std::string(depth, '[') + std::string(depth, ']') + "}";
}

TEST_CASE("nesting deeper than the limit is refused while parsing, in a short message") {
  CHECK(parse_user_json(json_read_nested(10), "x.json").is_object());
  const std::string message = error_of([&] { parse_user_json(json_read_nested(200000), "x.json"); });
  CHECK(contains(message, "x.json: JSON nested deeper than 64 levels"));
  CHECK(message.size() < 600);
  CHECK(contains(error_of([&] { parse_user_json("[[[[1]]]]", "h", 3); }), "h: JSON nested deeper than 3 levels"));
  CHECK(parse_user_json("[[[1]]]", "h", 3).is_array());
}

TEST_CASE("a key given twice in one object is an error naming it and where it is") {
  CHECK(contains(error_of([&] { parse_user_json(R"({"a": 1, "b": 2, "a": 3})", "ds.json"); }),
                 "ds.json: key \"a\" appears twice in the top-level object"));
  CHECK(contains(error_of([&] { parse_user_json(R"({"zero": {"stage": 1, "stage": 2}})", "ds.json"); }),
                 "key \"stage\" appears twice in \"zero\""));
  CHECK(contains(error_of([&] { parse_user_json(R"({"l": [{"x": 1}, {"y": 1, "y": 2}]})", "f"); }),
                 "key \"y\" appears twice in \"l[1]\""));
  // The same key in two objects is fine.
  CHECK(parse_user_json(R"({"a": {"k": 1}, "b": {"k": 2}, "c": [{"k": 1}, {"k": 2}]})", "f").size() == 3);
}

TEST_CASE("parser messages and echoed values are clipped") {
  const std::string long_token = "{\"a\": " + std::string(100000, '1') + "x}";
  CHECK(error_of([&] { parse_user_json(long_token, "f"); }).size() < 400);
  CHECK(json_for_message(json(std::string(100000, 'z'))).size() < 200);
  CHECK(json_for_message(json{{"a", 1}}) == "{\"a\":1}");
}

TEST_CASE("a DeepSpeed JSON: deep, duplicate keys, a huge value, a folder, a FIFO") {
  DsScratch s;
  const std::string run = s.config(json::object());
  std::ofstream(s.dir + "/ds.json") << "{\"zero_optimization\": " << std::string(200000, '[')
                                    << std::string(200000, ']') << "}";
  std::string message = error_of([&] { load(run, 1); });
  CHECK(contains(message, "parallel.deepspeed_config = '" + s.dir + "/ds.json': JSON nested deeper than 64 levels"));
  CHECK(message.size() < 600);

  std::ofstream(s.dir + "/ds.json") << R"({"zero_optimization": {"stage": 2, "stage": 3}})";
  CHECK(contains(error_of([&] { load(run, 1); }), "ds.json': key \"stage\" appears twice in \"zero_optimization\""));

  // Not nested but large: the problem echoes a bounded part of it.
  std::ofstream(s.dir + "/ds.json") << json{{"zero_optimization", json(std::vector<int>(50000, 7))}}.dump();
  message = error_of([&] { load(run, 1); });
  CHECK(contains(message, "zero_optimization = [7,7,"));
  CHECK(message.size() < 1000);

  std::filesystem::remove(s.dir + "/ds.json");
  std::filesystem::create_directory(s.dir + "/ds.json");
  CHECK(contains(error_of([&] { load(run, 1); }),
                 "parallel.deepspeed_config = '" + s.dir + "/ds.json': is a folder, not a file"));
  std::filesystem::remove(s.dir + "/ds.json");
  REQUIRE(mkfifo((s.dir + "/ds.json").c_str(), 0600) == 0);  // opening it would block: refused before
  CHECK(contains(error_of([&] { load(run, 1); }), "ds.json': is a FIFO (named pipe), not a file"));
  std::filesystem::remove(s.dir + "/ds.json");
  std::filesystem::create_symlink(s.dir + "/ds.json", s.dir + "/ds.json");
  CHECK(contains(error_of([&] { load(run, 1); }), "ds.json': a loop of symbolic links"));
}

TEST_CASE("config.json, tokenizer_config.json and a safetensors index use the same limits") {
  DsScratch s;
  std::ofstream(s.dir + "/config.json") << R"({"model_type": "bert", "hidden_size": 8, "hidden_size": 16})";
  CHECK(contains(error_of([&] { EncoderConfig::from_file(s.dir + "/config.json"); }),
                 "config.json: key \"hidden_size\" appears twice"));
  std::ofstream(s.dir + "/config.json") << json_read_nested(100000);
  CHECK(contains(error_of([&] { EncoderConfig::from_file(s.dir + "/config.json"); }), "nested deeper than 64"));

  std::ofstream(s.dir + "/vocab.txt") << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\n";
  std::ofstream(s.dir + "/tokenizer_config.json") << R"({"do_lower_case": true, "do_lower_case": false})";
  CHECK(contains(error_of([&] { Tokenizer::from_model_dir(s.dir); }),
                 "tokenizer_config.json' as JSON: key \"do_lower_case\" appears twice"));

  std::ofstream(s.dir + "/index.json") << R"({"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}})";
  CHECK(contains(error_of([&] { read_safetensors_index(s.dir + "/index.json"); }),
                 "key \"a\" appears twice in \"weight_map\""));
  CHECK(contains(error_of([&] { read_safetensors_index(s.dir); }), "is a folder, not a file"));
}

}  // namespace test_json_read_test
