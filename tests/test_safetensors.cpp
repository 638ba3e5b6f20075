// safetensors reader/writer: round trips of every dtype, byte-level layout, and a
// corpus of malformed files that must each be refused with a message naming
// the problem (never a crash or an out-of-bounds read).
#include <torch/torch.h>
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "shardtrain/core/check.h"
#include "shardtrain/model/safetensors.h"
#include "support/scratch_dir.h"

using namespace shardtrain;
namespace fs = std::filesystem;

namespace {

fs::path scratch_dir() {
  // One fresh folder for the process (mkdtemp: never a stale one of an earlier
  // process with the same pid), removed at exit.
  static const shardtrain_test::ScratchDir dir("test_safetensors");
  return dir.dir;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string length_prefix(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out;
}

// A file with the given header text and `data_bytes` bytes of data.
std::string file_with(const std::string& header, std::size_t data_bytes) {
  return length_prefix(header.size()) + header + std::string(data_bytes, '\x01');
}

void expect_refused(const std::string& name, const std::string& bytes, const std::string& problem) {
  const std::string path = (scratch_dir() / name).string();
  write_bytes(path, bytes);
  CAPTURE(name);
  CHECK_THROWS_WITH_AS(SafetensorsFile{path}, doctest::Contains(path.c_str()), Error);
  CHECK_THROWS_WITH_AS(SafetensorsFile{path}, doctest::Contains(problem.c_str()), Error);
  // The in-memory parser (what the fuzz target drives) agrees.
  CHECK_THROWS_AS(parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), name), Error);
}

}  // namespace

TEST_CASE("round trip of every dtype, empty and scalar tensors") {
  torch::manual_seed(3);
  NamedTensors tensors = {
      {"f64", torch::randn({3, 4}, torch::kDouble)},
      {"f32", torch::randn({5}, torch::kFloat)},
      {"f16", torch::randn({2, 3}).to(torch::kHalf)},
      {"bf16", torch::randn({7}).to(torch::kBFloat16)},
      {"i64", torch::randint(-1000000, 1000000, {4}, torch::kLong)},
      {"i32", torch::randint(-1000, 1000, {2, 2}, torch::kInt)},
      {"i16", torch::randint(-1000, 1000, {3}, torch::kShort)},
      {"i8", torch::randint(-128, 127, {6}, torch::kChar)},
      {"u8", torch::randint(0, 255, {6}, torch::kByte)},
      {"bool", torch::randint(0, 2, {5}).to(torch::kBool)},
      {"empty", torch::zeros({0, 3})},
      {"scalar", torch::tensor(2.5f).reshape({})},
      {"transposed", torch::arange(6, torch::kFloat).view({2, 3}).t()},  // non-contiguous input
      {"unicode \xc3\xa9 \"quoted\"", torch::ones({1})},
  };
  const std::string path = (scratch_dir() / "round_trip.safetensors").string();
  write_safetensors(path, tensors);

  SafetensorsFile file(path);
  CHECK(file.metadata().at("format") == "pt");
  CHECK(file.entries().size() == tensors.size());
  for (const auto& [name, want] : tensors) {
    CAPTURE(name);
    REQUIRE(file.contains(name));
    at::Tensor got = file.tensor(name);
    CHECK((got.scalar_type() == want.scalar_type()));
    CHECK(got.sizes() == want.sizes());
    CHECK(got.is_contiguous());
    CHECK(at::equal(got, want));
  }
  CHECK(file.entry("scalar").shape.empty());
  CHECK(file.tensor("scalar").item<float>() == 2.5f);
  CHECK_THROWS_WITH_AS(file.tensor("nope"), doctest::Contains("no tensor named 'nope'"), Error);

  // Layout: 8-byte length, header padded with spaces to a multiple of 8, data in order.
  const std::string bytes = read_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
  CHECK(n % 8 == 0);
  CHECK(bytes.substr(8, 27) == "{\"__metadata__\":{\"format\":\"");
  const std::string header = bytes.substr(8, n);
  const std::size_t close = header.find_last_of('}');
  CHECK(close + 8 > n - 1);  // at most 7 bytes of padding
  CHECK(header.substr(close + 1) == std::string(n - 1 - close, ' '));
  CHECK(bytes.substr(8 + n, 8 * 12) == std::string(reinterpret_cast<const char*>(
                                                        tensors[0].second.data_ptr()), 8 * 12));
  // Deterministic: the same tensors give the same bytes.
  const std::string again = (scratch_dir() / "round_trip_again.safetensors").string();
  write_safetensors(again, tensors);
  CHECK(read_bytes(again) == bytes);
  CHECK_FALSE(shardtrain_test::has_temporary_of(path));
}

TEST_CASE("writer refuses what it cannot store") {
  const std::string path = (scratch_dir() / "bad_write.safetensors").string();
  CHECK_THROWS_WITH_AS(write_safetensors(path, {{"a", torch::ones({1})}, {"a", torch::ones({1})}}),
                       doctest::Contains("appears twice"), Error);
  CHECK_THROWS_WITH_AS(write_safetensors(path, {{"c", torch::ones({2}, torch::kComplexFloat)}}),
                       doctest::Contains("cannot store"), Error);
  CHECK_THROWS_WITH_AS(write_safetensors(path, {{"__metadata__", torch::ones({1})}}),
                       doctest::Contains("__metadata__"), Error);
}

TEST_CASE("malformed files are refused with a message naming the problem") {
  const std::string f32x2 = R"("dtype":"F32","shape":[2])";
  expect_refused("short", std::string(5, '\0'), "fewer than the 8-byte header length");
  expect_refused("empty", "", "fewer than the 8-byte header length");
  expect_refused("huge_length", length_prefix(uint64_t{1} << 40) + "{}", "exceeds the limit");
  expect_refused("length_past_end", length_prefix(64) + "{}", "runs past the end of the file");
  expect_refused("not_json", file_with("{\"a\": [1, 2", 0), "not valid JSON");
  expect_refused("not_object", file_with("[1, 2]", 0), "does not start with '{'");
  expect_refused("zero_length", length_prefix(0), "does not start with '{'");
  expect_refused("bad_utf8", file_with("{\"\xff\xfe\":1}", 0), "not valid JSON");
  expect_refused("entry_not_object", file_with(R"({"a": 3})", 0), "entry is not a JSON object");
  expect_refused("missing_dtype", file_with(R"({"a": {"shape":[1],"data_offsets":[0,4]}})", 4), "no \"dtype\"");
  expect_refused("overlap",
                 file_with(R"({"a":{)" + f32x2 + R"(,"data_offsets":[0,8]},"b":{)" + f32x2 +
                               R"(,"data_offsets":[4,12]}})",
                           12),
                 "overlaps the previous tensor");
  expect_refused("out_of_range", file_with(R"({"a":{)" + f32x2 + R"(,"data_offsets":[0,8]}})", 4),
                 "past the data area");
  expect_refused("gap", file_with(R"({"a":{)" + f32x2 + R"(,"data_offsets":[4,12]}})", 12), "gap in the data area");
  expect_refused("trailing_bytes", file_with(R"({"a":{)" + f32x2 + R"(,"data_offsets":[0,8]}})", 16),
                 "trailing bytes");
  expect_refused("unknown_dtype", file_with(R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", 4),
                 "unknown dtype 'F33'");
  expect_refused("f8_dtype", file_with(R"({"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", 1),
                 "8-bit float");
  expect_refused("dtype_not_string", file_with(R"({"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", 4),
                 "dtype is not a string");
  expect_refused("byte_count_mismatch", file_with(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
                 "data_offsets span 8 bytes but dtype F32 and shape need 12 bytes");
  expect_refused("negative_shape", file_with(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
                 "shape[0] is negative");
  expect_refused("shape_not_array", file_with(R"({"a":{"dtype":"F32","shape":4,"data_offsets":[0,16]}})", 16),
                 "shape is not an array");
  expect_refused("shape_overflow",
                 file_with(R"({"a":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,4]}})", 4),
                 "shape product overflows");
  expect_refused("float_offsets", file_with(R"({"a":{)" + f32x2 + R"(,"data_offsets":[0.0,8.0]}})", 8),
                 "data_offsets[0] is not a non-negative integer");
  expect_refused("string_offsets", file_with(R"({"a":{)" + f32x2 + R"(,"data_offsets":["0","8"]}})", 8),
                 "not a non-negative integer");
  expect_refused("three_offsets", file_with(R"({"a":{)" + f32x2 + R"(,"data_offsets":[0,8,9]}})", 8),
                 "data_offsets is not an array [begin, end]");
  expect_refused("reversed_offsets", file_with(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8),
                 "< begin");
  expect_refused("metadata_not_string", file_with(R"({"__metadata__":{"format":1}})", 0),
                 "__metadata__ value for 'format' is not a string");
  expect_refused("deep_nesting", file_with("{\"a\":" + std::string(5000, '[') + std::string(5000, ']') + "}", 0),
                 "nested deeper");
  expect_refused("duplicate_tensor", file_with(R"({"a":{)" + f32x2 + R"(,"data_offsets":[0,8]},"a":{)" + f32x2 +
                                                  R"(,"data_offsets":[0,8]}})", 8),
                 "key \"a\" appears twice in the top-level object");
  expect_refused("directory_like_name_is_fine_but_gap",
                 file_with(R"({"../../etc/passwd":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})", 2), "gap");

  const std::string missing = (scratch_dir() / "does_not_exist.safetensors").string();
  CHECK_THROWS_WITH_AS(SafetensorsFile{missing}, doctest::Contains("cannot open"), Error);
  CHECK_THROWS_WITH_AS(SafetensorsFile{scratch_dir().string()}, doctest::Contains("not a regular file"), Error);
}

TEST_CASE("valid edge cases are accepted") {
  // Empty header object, no data.
  const std::string empty = file_with("{}      ", 0);
  CHECK(parse_safetensors(reinterpret_cast<const uint8_t*>(empty.data()), empty.size(), "e").entries.empty());
  // Zero-sized tensors may share an offset; unknown entry keys are ignored (as upstream).
  const std::string zeros =
      file_with(R"({"b":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"a":{"dtype":"I64","shape":[0,5],)"
                R"("data_offsets":[0,0],"extra":true},"c":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})",
                2);
  SafetensorsHeader header = parse_safetensors(reinterpret_cast<const uint8_t*>(zeros.data()), zeros.size(), "z");
  REQUIRE(header.entries.size() == 3);
  CHECK(header.entries[0].name == "a");
  CHECK(header.entries[2].name == "c");
  CHECK(header.data_bytes == 2);
}

TEST_CASE("BOOL bytes other than 0/1 are refused on access") {
  const std::string path = (scratch_dir() / "bad_bool.safetensors").string();
  const std::string header = R"({"m":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})";
  write_bytes(path, length_prefix(header.size()) + header + std::string("\x01\x02", 2));
  SafetensorsFile file(path);
  CHECK_THROWS_WITH_AS(file.tensor("m"), doctest::Contains("must be 0 or 1"), Error);
}

TEST_CASE("sharded checkpoint index") {
  const std::string good = (scratch_dir() / "good.index.json").string();
  write_bytes(good, R"({"metadata": {"total_size": 8}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                       "b": "model-00002-of-00002.safetensors"}})");
  auto map = read_safetensors_index(good);
  CHECK(map.size() == 2);
  CHECK(map.at("b") == "model-00002-of-00002.safetensors");

  const std::string evil = (scratch_dir() / "evil.index.json").string();
  write_bytes(evil, R"({"weight_map": {"a": "../../secret.safetensors"}})");
  CHECK_THROWS_WITH_AS(read_safetensors_index(evil), doctest::Contains("must be a file name in the same folder"), Error);
  const std::string no_map = (scratch_dir() / "no_map.index.json").string();
  write_bytes(no_map, R"({"metadata": {}})");
  CHECK_THROWS_WITH_AS(read_safetensors_index(no_map), doctest::Contains("weight_map"), Error);
}

TEST_CASE("corpus of malformed files under tests/fuzz/corpus/safetensors is refused without crashing") {
  // The seed corpus of the fuzz target: every file named bad_* must be refused
  // (when opened, or for bad BOOL bytes when read), every file named good_* accepted.
  const fs::path corpus = fs::path(SHARDTRAIN_SOURCE_DIR) / "tests/fuzz/corpus/safetensors";
  REQUIRE(fs::is_directory(corpus));
  int num_bad = 0, num_good = 0;
  for (const auto& item : fs::directory_iterator(corpus)) {
    const std::string name = item.path().filename().string();
    CAPTURE(name);
    if (name.rfind("bad_", 0) == 0) {
      CHECK_THROWS_AS(SafetensorsFile{item.path().string()}.all_tensors(), Error);
      ++num_bad;
    } else if (name.rfind("good_", 0) == 0) {
      SafetensorsFile file(item.path().string());
      for (const auto& entry : file.entries()) CHECK(file.tensor(entry.name).numel() == int64_t(entry.numel()));
      ++num_good;
    }
  }
  CHECK(num_bad >= 10);
  CHECK(num_good >= 1);
}
