// libFuzzer target: a run folder's progress.csv and result.jsonl as `shardtrain
// plot` reads them (read_run_curves, render_curves_svg; src/report/curves_read.cpp,
// curves.cpp).
// Input: progress.csv, "\n=====\n", result.jsonl (an empty section: no such
// file). The SVG must be a complete document with no NaN or infinite
// coordinate (a non-finite loss breaks its line, by design; it is never drawn).
// Seeds: corpus/curves.
#include <cstdint>
#include <string>

#include "fuzz_support.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/report/curves.h"

namespace {

// Whether printf put "nan" or "inf" where a number goes (an attribute value or
// a coordinate list), not inside a series name in a <text> element.
bool curves_fuzz_has_non_finite(const std::string& svg) {
  auto number_edge = [](char c) { return c == '"' || c == ' ' || c == ','; };
  for (const char* word : {"nan", "inf"})
    for (size_t at = svg.find(word); at != std::string::npos; at = svg.find(word, at + 1)) {
      const char before = at > 0 ? svg[at - 1] : '"';
      const char after = at + 3 < svg.size() ? svg[at + 3] : '"';
      if ((number_edge(before) || before == '-') && number_edge(after)) return true;
    }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  shardtrain::set_log_rank(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> parts = fuzz_support::sections(data, size, 2);
  fuzz_support::clear_scratch();
  if (!parts[0].empty()) fuzz_support::write_scratch("progress.csv", parts[0]);
  if (!parts[1].empty()) fuzz_support::write_scratch("result.jsonl", parts[1]);
  try {
    const shardtrain::RunCurves run = shardtrain::read_run_curves(fuzz_support::scratch().string(), "fuzz");
    const std::string svg = shardtrain::render_curves_svg({run, run}, "fuzz");
    FUZZ_REQUIRE(svg.rfind("<svg", 0) == 0 || svg.rfind("<?xml", 0) == 0);
    FUZZ_REQUIRE(svg.find("</svg>") != std::string::npos);
    FUZZ_REQUIRE(!curves_fuzz_has_non_finite(svg));
  } catch (const shardtrain::Error&) {
  }
  return 0;
}
