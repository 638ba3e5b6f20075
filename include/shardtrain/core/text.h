// Numbers and user-supplied text as text for messages and logs.
//
//   shortest_text(2e-5) == "2e-05";  shortest_text(0.1) == "0.1";  shortest_text(345.0) == "345"
//   clip_for_message(value_from_a_file, 80)   // at most ~80 bytes, whole UTF-8 characters
//   shape_text(tensor.sizes()) == "[2, 768]"
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace shardtrain {

// The shortest %g text that reads back as the same double.
std::string shortest_text(double value);

// A duration for a message: "600 s", "2.5 s", "0.001 s" (never rounded to "0 s").
std::string seconds_text(double seconds);

// `text` as an error message may echo it: when it is longer than `max_bytes`,
// its first bytes up to a UTF-8 character boundary followed by
// "... (N bytes)". Values from files can be megabytes long; a message must not be.
std::string clip_for_message(const std::string& text, std::size_t max_bytes);

// Names as one text, "a, b, c" ("" for none).
std::string join_names(const std::vector<std::string>& names, const std::string& separator = ", ");

// A shape as "[d0, d1, ...]" ("[]" for a scalar).
std::string shape_text(const int64_t* dims, std::size_t rank);
// Any contiguous list of dimensions: at::IntArrayRef, std::vector<int64_t>.
template <class Dims>
std::string shape_text(const Dims& dims) {
  return shape_text(dims.data(), dims.size());
}

}  // namespace shardtrain
