// Whole-file reads and atomic writes for the small text files of a run folder.
//
//   write_file_atomic(run_dir + "/curves.svg", svg);   // readers see the old or the new file, never half
//   const std::string text = read_whole_file(path);    // throws Error naming the path
#pragma once

#include <string>

namespace shardtrain {

// The bytes of `path`. Throws shardtrain::Error ("cannot read '<path>': <reason>").
std::string read_whole_file(const std::string& path);

// Writes `content` to `tmp_path` (default "<path>.tmp"; it must be in the same
// folder), flushes it, then renames it over `path`. Throws shardtrain::Error
// naming the file and the reason.
void write_file_atomic(const std::string& path, const std::string& content, const std::string& tmp_path = "");

}  // namespace shardtrain
