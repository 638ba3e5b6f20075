// Run config: file + overrides -> validated RunConfig, and the error messages
// a user sees for a typo'd key, a wrong type and a bad value.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <stdlib.h>

#include <fstream>
#include <string>
#include <vector>

#include "shardtrain/config/config.h"
#include "shardtrain/core/check.h"

using shardtrain::ConfigOverrides;
using shardtrain::load_run_config;
using shardtrain::RunConfig;
// StrategyKind, FileFormat, ...: this file compiled only after another file of
// its unity batch had said the same.
using namespace shardtrain;

namespace {

// A scratch folder with a data file and a vocabulary, so path checks pass.
struct Scratch {
  std::string dir;
  Scratch() {
    char pattern[] = "/tmp/shardtrain_config_XXXXXX";
    dir = mkdtemp(pattern);
    std::ofstream(dir + "/train.tsv") << "Quality\t#1 String\t#2 String\n1\ta\tb\n";
    std::ofstream(dir + "/vocab.txt") << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n";
    std::ofstream(dir + "/bert.json") << "{}";
  }
  ~Scratch() { std::system(("rm -rf '" + dir + "'").c_str()); }

  // Writes a config whose [model] and [data] sections point at the scratch files,
  // followed by `extra` (more sections).
  std::string config(const std::string& extra, const std::string& name = "run.toml") const {
    const std::string path = dir + "/" + name;
    std::ofstream(path) << "[model]\ninit = \"random\"\nconfig = \"" << dir << "/bert.json\"\nvocab = \"" << dir
                        << "/vocab.txt\"\n\n[data]\ntrain_file = \"" << dir << "/train.tsv\"\n\n"
                        << extra;
    return path;
  }
};

std::string error_of(const std::string& file, const ConfigOverrides& overrides = {}) {
  try {
    load_run_config(file, overrides);
  } catch (const shardtrain::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("a minimal config gets the reference defaults") {
  Scratch s;
  RunConfig c = load_run_config(s.config(""), {});
  CHECK(c.train.lr == 2e-5);
  CHECK(c.train.num_epochs == 3);
  CHECK(c.train.batch_size == 16);
  CHECK(c.train.eval_batch_size == 32);
  CHECK(c.train.seed == 42);
  CHECK(c.train.weight_decay == 0.01);
  CHECK(c.parallel.strategy == StrategyKind::kDdp);
  CHECK(c.run.collective_timeout_s == 600.0);
  CHECK(c.data.text_a == "#1 String");  // '#' inside a default is not a comment
  CHECK(c.data.format == FileFormat::kTsv);        // derived from the extension
  CHECK(c.run.name == "run");           // derived from the config file's stem
  CHECK_FALSE(c.model.hidden_dropout_prob.has_value());
}

TEST_CASE("file values, then command-line overrides") {
  Scratch s;
  const std::string file = s.dir + "/x.toml";
  std::ofstream(file) << "# MRPC's column names start with '#': not comments inside quotes\n"
                      << "[model]\ninit = \"random\"\nconfig = \"" << s.dir << "/bert.json\"\nvocab = \"" << s.dir
                      << "/vocab.txt\"\n[data]\ntrain_file = \"" << s.dir
                      << "/train.tsv\"\ntext_b = \"#2 String\" # a comment\n[train]\nlr = 3e-5\nbatch_size = 8\n";
  RunConfig c = load_run_config(file, {{"train.batch_size", "4"}, {"model.hidden_dropout_prob", "0"}});
  CHECK(c.train.lr == 3e-5);
  CHECK(c.train.batch_size == 4);
  CHECK(c.data.text_b == "#2 String");
  REQUIRE(c.model.hidden_dropout_prob.has_value());
  CHECK(*c.model.hidden_dropout_prob == 0.0);
}

TEST_CASE("a typo'd key names the key, the file line and the likely key") {
  Scratch s;
  const std::string file = s.config("[train]\nlr = 3e-5\nbatch_sise = 8\n");
  const std::string message = error_of(file);
  CHECK(message.find("unknown key 'train.batch_sise'") != std::string::npos);
  CHECK(message.find("line 11") != std::string::npos);
  CHECK(message.find("did you mean 'train.batch_size'?") != std::string::npos);

  // The right key in the wrong section.
  CHECK(error_of(s.config("[run]\nlr = 1e-5\n")).find("did you mean 'train.lr'?") != std::string::npos);
  // An unknown key on the command line.
  CHECK(error_of(s.config(""), {{"train.epochs", "2"}}) ==
        "unknown key 'train.epochs' (on the command line); did you mean 'train.num_epochs'?");
  // A key before any section.
  CHECK(error_of(s.dir + "/bare.toml").find("not found") != std::string::npos);
  std::ofstream(s.dir + "/bare.toml") << "lr = 1\n";
  CHECK(error_of(s.dir + "/bare.toml").find("outside any section") != std::string::npos);
}

TEST_CASE("a wrong type names the key and the value") {
  Scratch s;
  CHECK(error_of(s.config("[train]\nlr = \"fast\"\n")).find("train.lr: expected a number, got 'fast'") == 0);
  CHECK(error_of(s.config("[train]\nlr = \"3e-5\"\n")).find("train.lr: expected a number, got '3e-5' in ") == 0);
  CHECK(error_of(s.config("[parallel.fsdp]\nrank0_only = 1\n"))
            .find("parallel.fsdp.rank0_only: expected true or false, got 1 in ") == 0);
  CHECK(error_of(s.config("[checkpoint]\nevery_steps = true\n"))
            .find("checkpoint.every_steps: expected an integer, got true") == 0);
  CHECK(error_of(s.config("[run]\nname = 7\n")).find("run.name: expected a string (in quotes), got 7") == 0);
  CHECK(error_of(s.config("[train\nlr = 1\n")).find("cannot parse config file") == 0);
  CHECK(error_of(s.config("[train]\nbatch_size = 1.5\n")).find("train.batch_size: expected an integer, got 1.5") ==
        0);
  CHECK(error_of(s.config(""), {{"data.drop_last", "maybe"}}) ==
        "data.drop_last: expected true or false, got 'maybe' (on the command line)");
  CHECK(error_of(s.config("[train]\nlr = [1, 2]\n")).find("train.lr") == 0);
  // A table given one value is a table, not an unknown key.
  const std::string table = error_of(s.config("[train]\nlr_scheduler_kwargs = 0.5\n"));
  CHECK(table.find("train.lr_scheduler_kwargs in ") == 0);
  CHECK(table.find("is a table of keys (num_cycles, timescale") != std::string::npos);
  CHECK(table.find("unknown key") == std::string::npos);
  CHECK(error_of(s.config(""), {{"train.lr_scheduler_kwargs", "3"}}).find("train.lr_scheduler_kwargs (on the command "
                                                                            "line): is a table of keys") == 0);
}

TEST_CASE("a bad value names the key and what is allowed") {
  Scratch s;
  CHECK(error_of(s.config("[train]\nmixed_precision = \"fp8\"\n"))
            .find("train.mixed_precision = 'fp8' in ") == 0);
  CHECK(error_of(s.config("[train]\nmixed_precision = \"fp8\"\n"))
            .find("allowed values are \"no\", \"bf16\", \"fp16\"") != std::string::npos);
  CHECK(error_of(s.config("[train]\nbatch_size = 0\n")) == "train.batch_size = 0: must be > 0");
  CHECK(error_of(s.config("[train]\nlr = -1e-5\n")) == "train.lr = -1e-05: must be > 0");
  CHECK(error_of(s.config(""), {{"data.max_length", "2"}}).find("data.max_length = 2: must be in [3, 65536]") == 0);
  CHECK(error_of(s.config(""), {{"checkpoint.score_attribute", "f1"}})
            .find("checkpoint.score_attribute = 'f1': allowed values are \"eval_accuracy\"") == 0);
  CHECK(error_of(s.config(""), {{"run.name", "a/b"}}).find("run.name = 'a/b'") == 0);
  CHECK(error_of(s.config(""), {{"data.train_file", s.dir + "/missing.tsv"}}).find("no such file") !=
        std::string::npos);
}

TEST_CASE("impossible combinations are refused with the keys involved") {
  Scratch s;
  CHECK(error_of(s.config("[train]\nwarmup_steps = 100\nwarmup_ratio = 0.1\n")) ==
        "train.warmup_steps and train.warmup_ratio are both set; set only one");
  CHECK(error_of(s.config("[train]\nmixed_precision = \"fp16\"\n"))
            .find("train.mixed_precision = \"fp16\" needs run.device = \"cuda\"") == 0);
  CHECK(error_of(s.config("[parallel]\nstrategy = \"ddp\"\n\n[parallel.fsdp]\nrank0_only = false\n")) ==
        "parallel.fsdp.rank0_only only applies when parallel.strategy = \"fsdp\" (it is \"ddp\")");
  CHECK_NOTHROW(load_run_config(
      s.config("[parallel]\nstrategy = \"fsdp\"\n\n[parallel.fsdp]\nsharding_strategy = \"SHARD_GRAD_OP\"\n"), {}));
  CHECK(error_of(s.config(""), {{"checkpoint.score_attribute", "eval_f1"}})
            .find("needs data.eval_file") != std::string::npos);
  CHECK(error_of(s.config(""), {{"model.init", "pretrained"}}).find("model.init = \"pretrained\" needs model.path") ==
        0);
  CHECK(error_of(s.config(""), {{"train.early_stopping_patience", "3"}}) ==
        "train.early_stopping_patience = 3 needs checkpoint.score_attribute (the metric that must improve, e.g. "
        "\"eval_mcc\") and checkpoint.score_order");
  CHECK(error_of(s.config(""), {{"train.early_stopping_threshold", "-0.1"}}) ==
        "train.early_stopping_threshold = -0.1: must be >= 0");
}

TEST_CASE("the printed config reads back to the same config") {
  Scratch s;
  RunConfig c = load_run_config(s.config("[train]\nlr = 3e-5\nwarmup_ratio = 0.06\n"),
                                {{"model.attention_probs_dropout_prob", "0.25"}, {"run.name", "my run"}});
  const std::string toml = shardtrain::config_to_toml(c);
  CHECK(toml.find("[train]\n") != std::string::npos);
  CHECK(toml.find("lr = 3e-05\n") != std::string::npos);
  CHECK(toml.find("# hidden_dropout_prob = (the model config's value)") != std::string::npos);
  const std::string path = s.dir + "/resolved.toml";
  std::ofstream(path) << toml;
  RunConfig again = load_run_config(path, {});
  CHECK(shardtrain::config_to_toml(again) == toml);
  CHECK(again.run.name == "my run");
  CHECK(again.train.warmup_ratio == 0.06);
}

TEST_CASE("question answering's keys: refused under another task when changed; its printed config reads back") {
  Scratch s;
  // At their defaults (a printed config lists every key) they pass under any task.
  CHECK_NOTHROW(load_run_config(s.config(""), {{"data.doc_stride", "128"}, {"data.n_best_size", "20"}}));
  CHECK(error_of(s.config(""), {{"data.doc_stride", "64"}}) ==
        "data.doc_stride only applies when model.task = \"question_answering\" (it is \"sequence_classification\")");
  CHECK(error_of(s.config(""), {{"data.version_2_with_negative", "true"}}).find("data.version_2_with_negative only") ==
        0);
  std::ofstream(s.dir + "/train.json") << "{\"data\": []}";
  const ConfigOverrides qa = {{"model.task", "question_answering"}, {"data.train_file", s.dir + "/train.json"}};
  ConfigOverrides with_text_a = qa;
  with_text_a.push_back({"data.text_a", "question"});
  CHECK(error_of(s.config(""), with_text_a).find("data.text_a = 'question' does not apply to question answering") ==
        0);
  const RunConfig c = load_run_config(s.config(""), qa);
  CHECK(c.data.max_length == 384);
  CHECK(c.data.text_a.empty());
  const std::string path = s.dir + "/qa_resolved.toml";
  std::ofstream(path) << config_to_toml(c);
  CHECK(config_to_toml(load_run_config(path, {})) == config_to_toml(c));
}

// A list-valued key given as a flag: '["O","B-PER"]' was split at its commas
// into the tags '["O"' and '"B-PER"]'. Now a TOML array, as in the file; the
// comma form where it cannot mean anything else.
TEST_CASE("a list-valued key on the command line: a TOML array, or the comma form where unambiguous") {
  Scratch s;
  const std::string file = s.config("");
  auto labels = [&](const std::string& text) {
    return load_run_config(file, {{"model.task", "token_classification"}, {"data.labels", text}}).data.labels;
  };
  const std::vector<std::string> tags = {"O", "B-PER"};
  CHECK(labels(R"(["O","B-PER"])") == tags);
  CHECK(labels(R"( [ "O", 'B-PER' ] )") == tags);
  CHECK(labels("O,B-PER") == tags);
  CHECK(labels(R"(["a,b", "c d"])") == std::vector<std::string>{"a,b", "c d"});  // what only the array can say
  CHECK(labels("[]").empty());
  CHECK(labels("").empty());
  const ConfigOverrides choices = {{"model.task", "multiple_choice"}, {"data.text_a", "ctx"},
                                   {"data.choices", R"(["ending0", "ending1"])"}};
  CHECK(load_run_config(file, choices).data.choices == std::vector<std::string>{"ending0", "ending1"});

  auto error = [&](const std::string& text) {
    return error_of(file, {{"model.task", "token_classification"}, {"data.labels", text}});
  };
  const std::string forms = " (on the command line a list is a TOML array, in single quotes for the shell: "
                            "'[\"O\", \"B-PER\"]', or the comma form O,B-PER)";
  // The array with its quotes eaten by the shell; quotes or spaces in the comma form.
  CHECK(error("[O,B-PER]") == "data.labels = '[O,B-PER]': not a TOML array of strings" + forms);
  CHECK(error(R"("O","B-PER")") == R"(data.labels = '"O","B-PER"': the item '"O"' has quotes or brackets, or )"
                                   "spaces at its ends, so the comma form is ambiguous" + forms);
  CHECK(error("O, B-PER") == "data.labels = 'O, B-PER': the item ' B-PER' has quotes or brackets, or spaces at its "
                             "ends, so the comma form is ambiguous" + forms);
  CHECK(error(R"(["O", ""])").find("data.labels: expected an array of non-empty strings") == 0);
  CHECK(error(R"(["O", 1])").find("data.labels: expected an array of non-empty strings") == 0);
  CHECK(error("[\"O\"]\nx = 1").find("data.labels = '[\"O\"]\nx = 1': not a TOML array of strings") == 0);
  CHECK(error("O,,B-PER") == "data.labels: empty item in the list 'O,,B-PER'");
}

// Multiple choice without a preset read sequence classification's MRPC
// columns: the label "Quality", the context "#1 String".
TEST_CASE("multiple choice without a preset: the label column is \"label\", the context must be named") {
  Scratch s;
  const std::string file = s.config("");
  const ConfigOverrides mc = {{"model.task", "multiple_choice"}, {"data.choices", "ending0,ending1"}};
  ConfigOverrides named = mc;
  named.push_back({"data.text_a", "context"});
  const RunConfig c = load_run_config(file, named);
  CHECK(c.data.label == "label");
  CHECK(c.data.text_a == "context");
  CHECK(c.data.text_b.empty());
  CHECK(error_of(file, mc) == "data.text_a: not set (the context column, the first text of every pair; or "
                              "data.preset = \"swag\" / \"copa\")");
  // Given keys are kept; a preset names every column.
  named.push_back({"data.label", "answer"});
  CHECK(load_run_config(file, named).data.label == "answer");
  const RunConfig copa = load_run_config(file, {{"model.task", "multiple_choice"}, {"data.preset", "copa"}});
  CHECK(copa.data.text_a == "premise");
  CHECK(copa.data.label == "label");
  // The printed config reads back to the same.
  const std::string path = s.dir + "/mc_resolved.toml";
  std::ofstream(path) << config_to_toml(c);
  CHECK(config_to_toml(load_run_config(path, {})) == config_to_toml(c));
}

TEST_CASE("an empty run.name, a huge label count and a megabyte value are refused with short messages") {
  Scratch s;
  CHECK(error_of(s.config(""), {{"run.name", ""}}).find("run.name = '': must not be empty") == 0);
  CHECK(error_of(s.config("[run]\nname = \"\"\n")).find("run.name = '': must not be empty") == 0);
  CHECK(error_of(s.config(""), {{"model.num_labels", "1000000000"}}) ==
        "model.num_labels = 1000000000: more than the 1048576 labels a classifier may have");
  CHECK(error_of(s.config(""), {{"train.eval_batch_size", "-3"}}) == "train.eval_batch_size = -3: must be > 0");
  CHECK(error_of(s.config(""), {{"run.collective_timeout_s", "1e12"}}) ==
        "run.collective_timeout_s = 1e+12: at most 1e7 s (115 days)");
  const std::string huge(1 << 20, 'n');
  const std::string message = error_of(s.config(""), {{"run.name", huge + "/x"}});
  CHECK(message.size() < 400);
  CHECK(message.find("run.name = '" + std::string(200, 'n') + "... (") == 0);
  // A megabyte unknown key: cut, and no seconds spent on suggestions.
  CHECK(error_of(s.config(""), {{"train." + huge, "1"}}).size() < 400);
}

// Issue 37, item 3: model.lowercase and the tokenizer depended on how the vocab
// path was spelled. Every spelling of model.path's own tokenizer resolves to
// the folder (recorded so in config.toml), and model.lowercase = true with it
// is refused as `tokenize --lowercase` refuses it.
TEST_CASE("model.path's tokenizer is one resolution whatever the spelling") {
  Scratch s;
  const std::string hf = s.dir + "/hf";
  std::system(("mkdir -p '" + hf + "' && cp '" + s.dir + "/vocab.txt' '" + hf + "/vocab.txt' && echo '{}' > '" + hf +
               "/tokenizer.json' && ln -s hf/vocab.txt '" + s.dir + "/linked_vocab.txt'")
                  .c_str());
  for (const std::string& vocab : {std::string(""), hf + "/vocab.txt", hf + "/./vocab.txt", s.dir + "/./hf/../hf/vocab.txt",
                                   s.dir + "/linked_vocab.txt", hf + "/tokenizer.json", hf, hf + "/"}) {
    CAPTURE(vocab);
    ConfigOverrides overrides = {{"model.path", hf}, {"model.vocab", vocab}};  // "": unset
    const RunConfig c = load_run_config(s.config(""), overrides);
    CHECK(c.model.vocab == hf);
    CHECK(config_to_toml(c).find("vocab = \"" + hf + "\"") != std::string::npos);
    overrides.push_back({"model.lowercase", "true"});
    CHECK(error_of(s.config(""), overrides).rfind("model.lowercase = true goes with a vocab.txt file, but the tokenizer is "
                                                  "the folder '" + hf + "' (model.path's own",
                                                  0) == 0);
  }
  // A vocab.txt of its own beside model.path stays that file, and takes model.lowercase.
  const RunConfig own = load_run_config(s.config(""), {{"model.path", hf}, {"model.vocab", s.dir + "/vocab.txt"},
                                                       {"model.lowercase", "true"}});
  CHECK(own.model.vocab == s.dir + "/vocab.txt");
  CHECK(own.model.lowercase);
  // A lone tokenizer.json says itself whether it lowercases.
  CHECK(error_of(s.config(""), {{"model.vocab", hf + "/tokenizer.json"}, {"model.lowercase", "true"}})
            .find("the tokenizer.json '" + hf + "/tokenizer.json'") != std::string::npos);
}
