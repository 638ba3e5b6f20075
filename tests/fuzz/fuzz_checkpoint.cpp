// libFuzzer target: a hostile checkpoint's metadata, parsed as the reader and
// resume parse it, without MPI or HDF5 (train/train_state.h,
// src/checkpoint/checkpoint_format.h). The first byte picks what the rest is:
//   even: root attributes, one per line "name<TAB>type<TAB>value" with type
//         i (int64), d (double) or s (string; "\n" and "\\" escaped), parsed by
//         parse_train_state(); the model config, vocabulary and parameter plan
//         a state names are then parsed as load_checkpoint_model() does;
//   odd:  the slice records a rank sends (decode_slice_records), planned as a
//         write (exact cover) and a read (plan_group), with the checksum ranges.
// Seeds: corpus/checkpoint (make_corpus.py).
#include <cstdint>
#include <sstream>
#include <string>

#include "checkpoint/checkpoint_format.h"
#include "fuzz_support.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/model/encoder_config.h"
#include "shardtrain/model/parameter_plan.h"
#include "shardtrain/train/train_state.h"

namespace {

using namespace shardtrain;

std::string checkpoint_fuzz_unescape(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size()) {
      ++i;
      out.push_back(text[i] == 'n' ? '\n' : text[i]);
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

void checkpoint_fuzz_attributes(const std::string& text) {
  TrainAttributes attributes;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const size_t tab1 = line.find('\t');
    if (tab1 == std::string::npos || tab1 + 2 >= line.size() || line[tab1 + 2] != '\t') continue;
    const std::string name = line.substr(0, tab1);
    const std::string value = line.substr(tab1 + 3);
    try {
      switch (line[tab1 + 1]) {
        case 'i': attributes[name] = static_cast<int64_t>(std::stoll(value)); break;
        case 'd': attributes[name] = std::stod(value); break;
        case 's': attributes[name] = checkpoint_fuzz_unescape(value); break;
        default: break;
      }
    } catch (const std::logic_error&) {
      // not a number: HDF5 would not hand it over either
    }
  }
  TrainState state;
  try {
    state = parse_train_state(attributes, "fuzz.h5");
  } catch (const Error&) {
    return;
  }
  FUZZ_REQUIRE(state.step >= 0 && state.world_size >= 1 && state.skipped_steps <= state.step);
  try {
    const EncoderConfig config = EncoderConfig::from_json(state.model_config_json, "fuzz.h5 (model_config_json)");
    int64_t total = 0;
    for (const ParameterSpec& p : parameter_plan(config)) {
      FUZZ_REQUIRE(p.numel() >= 0);
      FUZZ_REQUIRE(!__builtin_add_overflow(total, p.numel(), &total));
    }
  } catch (const Error&) {
  }
  try {
    TokenizerOptions options;
    options.lowercase = state.lowercase != 0;
    const Tokenizer tokenizer = Tokenizer::from_vocab_text(state.vocab_text, options, "fuzz.h5 (vocab_text)");
    std::vector<int32_t> ids;
    tokenizer.tokenize(state.stop_reason, ids);
    for (int32_t id : ids) FUZZ_REQUIRE(id >= 0 && id < tokenizer.vocab_size());
  } catch (const Error&) {
  }
}

void checkpoint_fuzz_records(const std::string& bytes, int rank, bool exact_cover) {
  std::vector<detail::SliceRecord> records;
  try {
    records = detail::decode_slice_records(bytes, rank);
    // The same records from another rank too: plan_group compares the ranks.
    for (detail::SliceRecord r : detail::decode_slice_records(bytes, rank + 1)) records.push_back(std::move(r));
  } catch (const Error&) {
    return;
  }
  FUZZ_REQUIRE(detail::decode_slice_records(detail::encode_slice_records(records), rank).size() == records.size());
  try {
    for (const auto& [name, plan] : detail::plan_group(records, "/model", exact_cover)) {
      const int64_t numel = detail::numel_of(plan.shape);
      (void)detail::dtype_name(plan.dtype);
      int64_t gap_total = 0;
      for (const auto& [begin, count] : detail::uncovered(plan.records, numel)) {
        FUZZ_REQUIRE(begin >= 0 && count > 0 && begin + count <= numel);
        gap_total += count;
      }
      FUZZ_REQUIRE(gap_total <= numel);
      for (const auto& r : plan.records)
        for (const auto& [begin, count] : detail::first_claims(plan.records, r.rank, r.begin, r.count))
          FUZZ_REQUIRE(begin >= r.begin && count > 0 && begin + count <= r.begin + r.count);
    }
  } catch (const Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  shardtrain::set_log_rank(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  if ((data[0] & 1) == 0)
    checkpoint_fuzz_attributes(rest);
  else
    checkpoint_fuzz_records(rest, (data[0] >> 1) & 3, (data[0] & 8) != 0);
  return 0;
}
