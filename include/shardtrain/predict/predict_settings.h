// `predict`'s data settings: the flags given, else, for a training
// checkpoint, what its run evaluated with (the resolved run config the
// checkpoint saved), else predict's defaults (docs/commands.md, "predict").
// A checkpoint's run knows the columns or preset, the label column, the
// format, max_length, doc_stride, n_best_size, max_answer_length, SQuAD v2,
// label_all_tokens, the eval batch size, the precision and the packed or
// padded forward, so `predict --model CKPT --data EVAL` computes what the
// run's evaluation reported; a HF folder knows none of them, and predict
// keeps asking for the columns it needs.
//
//   std::vector<PredictSetting> used = resolve_predict_settings(&run, task, given, options);
//   log_info("predict settings: %s", describe_predict_settings(used).c_str());
#pragma once

#include <set>
#include <string>
#include <vector>

#include "shardtrain/core/run_config.h"
#include "shardtrain/predict/predict.h"

namespace shardtrain {

// One setting as predict uses it, for the line it prints.
struct PredictSetting {
  std::string flag;    // "--max-length"
  std::string value;   // as the flag would be written ("64", "'#1 String'", "true")
  std::string origin;  // "flag", "run: data.max_length", "default", ...
};

// Fills every setting of `options` whose flag is not in `given` (long names
// with their dashes, "--max-length"): from `run` when it is not null (a
// checkpoint's run config, config/config.h's parse_saved_run_config), else
// predict's defaults (max_length 128; question answering 384, run_qa's).
// `task` is the model's. A label column that comes from the run is kept only
// when options.data_path has it (a file without labels is predicted without
// metrics), and SQuAD answers are scored when every question has them; the
// run's format is kept unless the file's extension names another. Error for
// a flag of another task's key (--choices for a token classifier). Returns
// the settings that apply to the task, in flag order.
std::vector<PredictSetting> resolve_predict_settings(const RunConfig* run, Task task, const std::set<std::string>& given,
                                                     PredictOptions& options);

// "--text-a '#1 String' (run: data.text_a), --max-length 32 (flag), ..."
std::string describe_predict_settings(const std::vector<PredictSetting>& settings);

// predict's flag for a data key ("data.doc_stride" -> "--doc-stride"), or ""
// for a key it has no flag for.
std::string predict_flag_of(const std::string& key);

}  // namespace shardtrain
