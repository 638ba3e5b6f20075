// HF model folders: legacy and bare-model names, missing heads, refusals, sharded
// checkpoints and save -> load round trips.
#include <torch/torch.h>
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <fstream>
#include <sstream>
#include <string>

#include "shardtrain/core/check.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/model/encoder_config.h"
#include "shardtrain/model/hf_folder.h"
#include "shardtrain/model/safetensors.h"
#include "support/mpi_ranks.h"
#include "support/scratch_dir.h"

using namespace shardtrain;
namespace fs = std::filesystem;

namespace {

const fs::path kTiny = fs::path(SHARDTRAIN_SOURCE_DIR) / "tests/fixtures/bert_golden/small_gelu_new_l2";

fs::path scratch(const std::string& name) {
  // One fresh folder for the process (mkdtemp: never a stale one of an earlier
  // process with the same pid), removed at exit.
  static const shardtrain_test::ScratchDir root("test_hf_folder");
  fs::path dir = fs::path(root.dir) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A folder with the fixture's config.json and the given tensors as model.safetensors.
fs::path folder_with(const std::string& name, const NamedTensors& tensors) {
  fs::path dir = scratch(name);
  fs::copy_file(kTiny / "config.json", dir / "config.json");
  write_safetensors((dir / "model.safetensors").string(), tensors);
  return dir;
}

NamedTensors fixture_tensors() { return SafetensorsFile((kTiny / "model.safetensors").string()).all_tensors(); }

struct Inputs {
  at::Tensor ids, types, mask;
};

Inputs fixture_inputs() {
  SafetensorsFile golden((kTiny / "golden.safetensors").string());
  return {golden.tensor("input_ids"), golden.tensor("token_type_ids"), golden.tensor("attention_mask")};
}

at::Tensor logits_of(TaskModel& model) {
  Inputs in = fixture_inputs();
  model.eval();
  at::NoGradGuard no_grad;
  return model.forward(in.ids, in.types, in.mask);
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

TEST_CASE("legacy gamma/beta names and a bare BertModel checkpoint load like HF names") {
  HfModel reference = load_hf_folder(kTiny.string());
  at::Tensor want = logits_of(*reference.model);

  NamedTensors renamed;
  for (auto [name, tensor] : fixture_tensors()) {
    if (ends_with(name, "LayerNorm.weight")) name = name.substr(0, name.size() - 6) + "gamma";
    if (ends_with(name, "LayerNorm.bias")) name = name.substr(0, name.size() - 4) + "beta";
    if (name.rfind("bert.", 0) == 0) name = name.substr(5);
    renamed.emplace_back(name, tensor);
  }
  renamed.emplace_back("embeddings.position_ids", torch::arange(32).view({1, 32}));  // old buffer, dropped
  HfModel loaded = load_hf_folder(folder_with("legacy", renamed).string());
  CHECK(loaded.report.missing_keys.empty());
  CHECK(loaded.report.unexpected_keys.empty());
  CHECK(loaded.report.message().empty());
  CHECK(loaded.report.renamed_keys.size() == renamed.size() - 3);  // all but classifier.{weight,bias} and position_ids
  CHECK(at::equal(logits_of(*loaded.model), want));
}

TEST_CASE("a missing classifier is initialised and reported like HF; pretraining heads are unused") {
  NamedTensors pretrained;
  for (const auto& [name, tensor] : fixture_tensors())
    if (name.rfind("classifier.", 0) != 0) pretrained.emplace_back(name, tensor);
  pretrained.emplace_back("cls.predictions.bias", torch::zeros({50}));
  pretrained.emplace_back("cls.seq_relationship.weight", torch::zeros({2, 16}));
  const fs::path dir = folder_with("pretrained", pretrained);

  HfLoadOptions options;
  options.init_seed = 11;
  HfModel loaded = load_hf_folder(dir.string(), options);
  CHECK(loaded.report.missing_keys == std::vector<std::string>{"classifier.weight", "classifier.bias"});
  CHECK(loaded.report.unexpected_keys ==
        std::vector<std::string>{"cls.predictions.bias", "cls.seq_relationship.weight"});
  const std::string message = loaded.report.message();
  CHECK(message.find("Some weights of BertForSequenceClassification were not initialized from the model checkpoint at " +
                     dir.string() + " and are newly initialized: ['classifier.weight', 'classifier.bias']") !=
        std::string::npos);
  CHECK(message.find("You should probably TRAIN this model") != std::string::npos);
  CHECK(message.find("were not used when initializing BertForSequenceClassification: ['cls.predictions.bias', "
                     "'cls.seq_relationship.weight']") != std::string::npos);
  // HF init for the new head: bias 0, weight ~ N(0, initializer_range = 0.02), seeded.
  const at::Tensor head_weight = loaded.model->parameter("classifier.weight");
  CHECK(loaded.model->parameter("classifier.bias").abs().sum().item<double>() == 0.0);
  CHECK(head_weight.abs().max().item<double>() < 0.02 * 6);
  CHECK(head_weight.abs().max().item<double>() > 0.0);
  HfModel again = load_hf_folder(dir.string(), options);
  CHECK(at::equal(again.model->parameter("classifier.weight"), head_weight));
  // The encoder is the checkpoint's.
  CHECK(at::equal(loaded.model->parameter("bert.encoder.layer.0.attention.self.query.weight"), fixture_tensors()[5].second));

  // Without a head in the checkpoint, num_labels may be overridden.
  options.num_labels = 5;
  HfModel five = load_hf_folder(dir.string(), options);
  CHECK(five.config.num_labels == 5);
  CHECK(five.config.id2label.back() == "LABEL_4");
  CHECK(five.model->parameter("classifier.weight").sizes() == at::IntArrayRef({5, 16}));
  CHECK(logits_of(*five.model).sizes() == at::IntArrayRef({3, 5}));
}

TEST_CASE("num_labels override conflicting with a trained head is an error") {
  HfLoadOptions options;
  options.num_labels = 2;
  CHECK_THROWS_WITH_AS(load_hf_folder(kTiny.string(), options),
                       doctest::Contains("num_labels 2 differs from the checkpoint's classifier head (3 labels)"), Error);
  options.num_labels = 3;  // equal: fine
  CHECK_NOTHROW(load_hf_folder(kTiny.string(), options));
}

TEST_CASE("shape mismatches and unusable folders are refused with a clear message") {
  NamedTensors tensors = fixture_tensors();
  for (auto& [name, tensor] : tensors)
    if (name == "bert.pooler.dense.weight") tensor = torch::zeros({16, 8});
  CHECK_THROWS_WITH_AS(load_hf_folder(folder_with("bad_shape", tensors).string()),
                       doctest::Contains("'bert.pooler.dense.weight' has shape [16, 8] in the checkpoint but the "
                                         "model (config.json) expects [16, 16]"),
                       Error);

  const fs::path pickle = scratch("pickle_only");
  fs::copy_file(kTiny / "config.json", pickle / "config.json");
  std::ofstream(pickle / "pytorch_model.bin") << "\x80\x02}q\x00.";
  CHECK_THROWS_WITH_AS(load_hf_folder(pickle.string()), doctest::Contains("never loads pickles"), Error);
  CHECK_THROWS_WITH_AS(load_hf_folder(pickle.string()), doctest::Contains("Provide model.safetensors"), Error);

  const fs::path no_config = scratch("no_config");
  CHECK_THROWS_WITH_AS(load_hf_folder(no_config.string()), doctest::Contains("no config.json"), Error);
  CHECK_THROWS_WITH_AS(load_hf_folder((no_config / "nope").string()), doctest::Contains("does not exist"), Error);
  const fs::path no_weights = scratch("no_weights");
  fs::copy_file(kTiny / "config.json", no_weights / "config.json");
  CHECK_THROWS_WITH_AS(load_hf_folder(no_weights.string()), doctest::Contains("no model.safetensors"), Error);
}

TEST_CASE("sharded checkpoint with an index") {
  HfModel reference = load_hf_folder(kTiny.string());
  NamedTensors all = fixture_tensors();
  NamedTensors first(all.begin(), all.begin() + 10), second(all.begin() + 10, all.end());
  const fs::path dir = scratch("sharded");
  fs::copy_file(kTiny / "config.json", dir / "config.json");
  write_safetensors((dir / "model-00001-of-00002.safetensors").string(), first);
  write_safetensors((dir / "model-00002-of-00002.safetensors").string(), second);
  std::string index = R"({"metadata": {"total_size": 0}, "weight_map": {)";
  for (std::size_t i = 0; i < all.size(); ++i)
    index += (i ? "," : "") + std::string("\"") + all[i].first + "\": \"model-0000" + (i < 10 ? "1" : "2") +
             "-of-00002.safetensors\"";
  std::ofstream(dir / "model.safetensors.index.json") << index << "}}";
  HfModel sharded = load_hf_folder(dir.string());
  CHECK(sharded.report.missing_keys.empty());
  CHECK(at::equal(logits_of(*sharded.model), logits_of(*reference.model)));

  fs::remove(dir / "model-00002-of-00002.safetensors");
  CHECK_THROWS_WITH_AS(load_hf_folder(dir.string()), doctest::Contains("is missing"), Error);
}

// Issue 37, item 7: transformers loads a shard whole; an index that forgets a
// tensor left it random here. Now it loads, and a tensor in two shards is refused.
TEST_CASE("a sharded index that omits a tensor still loads it from its shard") {
  HfModel reference = load_hf_folder(kTiny.string());
  NamedTensors all = fixture_tensors();
  const fs::path dir = scratch("sharded_omission");
  fs::copy_file(kTiny / "config.json", dir / "config.json");
  write_safetensors((dir / "model-00001-of-00001.safetensors").string(), all);
  std::string index = R"({"weight_map": {)";
  for (std::size_t i = 1; i < all.size(); ++i)  // all[0] is not in the index
    index += (i > 1 ? "," : "") + std::string("\"") + all[i].first + "\": \"model-00001-of-00001.safetensors\"";
  std::ofstream(dir / "model.safetensors.index.json") << index << "}}";
  HfModel sharded = load_hf_folder(dir.string());
  CHECK(sharded.report.missing_keys.empty());
  CHECK(at::equal(logits_of(*sharded.model), logits_of(*reference.model)));

  write_safetensors((dir / "model-extra.safetensors").string(), {all[0]});
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"weight_map": {")" << all[0].first << R"(": "model-extra.safetensors", ")" << all[1].first
      << R"(": "model-00001-of-00001.safetensors"}})";
  const std::string twice = "tensor '" + all[0].first +
                            "' is in two shards, model-00001-of-00001.safetensors and model-extra.safetensors";
  CHECK_THROWS_WITH_AS(load_hf_folder(dir.string()), doctest::Contains(twice.c_str()), Error);
}

// Issue 37, items 4 and 5: a folder of another family (or no model_type)
// loaded as BERT with every weight random; NaN weights went unnoticed.
TEST_CASE("hostile folders: no model_type, another family's weights, NaN weights") {
  NamedTensors tensors = fixture_tensors();
  const fs::path no_type = folder_with("no_model_type", tensors);
  std::string config = read_text(kTiny / "config.json");
  const size_t at = config.find("\"model_type\"");
  REQUIRE(at != std::string::npos);
  config.replace(at, std::string("\"model_type\"").size(), "\"model_kind\"");
  std::ofstream(no_type / "config.json") << config;
  CHECK_THROWS_WITH_AS(load_hf_folder(no_type.string()),
                       doctest::Contains("config.json: no \"model_type\" key, so the model family is unknown"), Error);

  // RoBERTa's names under a BERT config: not one tensor matches.
  NamedTensors roberta;
  for (const auto& [name, tensor] : tensors)
    roberta.emplace_back(name.rfind("bert.", 0) == 0 ? "roberta." + name.substr(5) : name, tensor);
  NamedTensors no_head;
  for (const auto& entry : roberta)
    if (entry.first.rfind("classifier.", 0) != 0) no_head.push_back(entry);
  const std::string message = shardtrain_test::error_of([&] { load_hf_folder(folder_with("other_family", no_head).string()); });
  CHECK_MESSAGE(message.find("the weights hold none of the") != std::string::npos, message);
  CHECK_MESSAGE(message.find("named like 'roberta.") != std::string::npos, message);
  CHECK_MESSAGE(message.find("model_type (\"bert\")") != std::string::npos, message);

  // Some missing: loaded, and the report says how many.
  NamedTensors without_classifier;
  for (const auto& entry : tensors)
    if (entry.first.rfind("classifier.", 0) != 0) without_classifier.push_back(entry);
  HfModel partial = load_hf_folder(folder_with("partial", without_classifier).string());
  const size_t total = partial.report.num_model_tensors;
  CHECK(total == tensors.size());
  CHECK(partial.report.message().find("2 of the model's " + std::to_string(total) + " tensors are newly initialized, " +
                                      std::to_string(total - 2) + " loaded.") != std::string::npos);

  for (const double bad : {std::nan(""), std::numeric_limits<double>::infinity()}) {
    NamedTensors poisoned = tensors;
    for (auto& [name, tensor] : poisoned)
      if (name == "bert.encoder.layer.1.output.dense.weight") {
        tensor = tensor.clone();
        tensor.view({-1})[3] = bad;
        tensor.view({-1})[7] = bad;
      }
    CHECK_THROWS_WITH_AS(load_hf_folder(folder_with("poisoned", poisoned).string()),
                         doctest::Contains("tensor 'bert.encoder.layer.1.output.dense.weight' holds 2 non-finite values "
                                           "(NaN or infinity); refusing to load it"),
                         Error);
  }
}

// Issue 37, item 8.
TEST_CASE("id2label and label2id that disagree are refused, naming both") {
  const std::string base =
      R"({"model_type": "bert", "id2label": {"0": "negative", "1": "positive"}, "label2id": )";
  CHECK(EncoderConfig::from_json(base + R"({"negative": 0, "positive": 1}})", "c.json").id2label.back() == "positive");
  const auto error = [&](const std::string& label2id) {
    return shardtrain_test::error_of([&] { EncoderConfig::from_json(base + label2id + "}", "c.json"); });
  };
  CHECK(error(R"({"negative": 1, "positive": 0})") ==
        "c.json: id2label and label2id disagree: label2id[\"negative\"] = 1 but id2label[\"1\"] = \"positive\"; make "
        "label2id the inverse of id2label (or remove label2id)");
  CHECK(error(R"({"negative": 0, "positive": 1, "neutral": 2})").find("label2id[\"neutral\"] = 2 is not an id of "
                                                                      "id2label (0..1)") != std::string::npos);
  CHECK(error(R"({"negative": 0})").find("id2label has 2 labels, label2id 1") != std::string::npos);
  CHECK(error(R"({"negative": "0", "positive": 1})").find("key \"label2id\": the id of \"negative\" must be an integer") !=
        std::string::npos);
}

TEST_CASE("save -> load gives identical logits; config and tokenizer files are written") {
  HfModel original = load_hf_folder(kTiny.string());
  const fs::path vocab_dir = scratch("vocab_source");
  std::ofstream(vocab_dir / "vocab.txt") << "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n";
  std::ofstream(vocab_dir / "tokenizer_config.json") << R"({"do_lower_case": false})";

  const fs::path out = scratch("export") / "nested" / "model";
  HfSaveOptions save;
  save.copy_files = {(vocab_dir / "vocab.txt").string(), (vocab_dir / "tokenizer_config.json").string()};
  save_hf_folder(*original.model, out.string(), save);
  CHECK(fs::exists(out / "vocab.txt"));
  CHECK(read_text(out / "tokenizer_config.json") == R"({"do_lower_case": false})");
  const std::string config = read_text(out / "config.json");
  CHECK(config.find("\"BertForSequenceClassification\"") != std::string::npos);
  CHECK(config.find("\"model_type\": \"bert\"") != std::string::npos);
  CHECK(config.find("\"positive\": 2") != std::string::npos);  // label2id
  CHECK(config.find("\"torch_dtype\": \"float32\"") != std::string::npos);

  SafetensorsFile weights((out / "model.safetensors").string());
  CHECK(weights.metadata().at("format") == "pt");
  CHECK(weights.entries().size() == original.model->state_dict().size());
  CHECK_FALSE(weights.contains("bert.embeddings.position_ids"));

  HfModel reloaded = load_hf_folder(out.string());
  CHECK(reloaded.report.message().empty());
  CHECK(reloaded.config.id2label == original.config.id2label);
  CHECK(at::equal(logits_of(*reloaded.model), logits_of(*original.model)));

  // bf16 export: half the bytes, logits within bf16 rounding of the weights (8 bits of mantissa).
  save.dtype = at::kBFloat16;
  save.copy_files.clear();
  const fs::path out16 = scratch("export_bf16");
  save_hf_folder(*original.model, out16.string(), save);
  CHECK((SafetensorsFile((out16 / "model.safetensors").string()).entry("classifier.weight").dtype ==
         SafetensorsDtype::BF16));
  HfModel reloaded16 = load_hf_folder(out16.string());
  CHECK(at::allclose(logits_of(*reloaded16.model), logits_of(*original.model), 0.05, 0.05));

  save.copy_files = {(vocab_dir / "missing.txt").string()};
  CHECK_THROWS_WITH_AS(save_hf_folder(*original.model, out16.string(), save), doctest::Contains("missing.txt"), Error);
}
