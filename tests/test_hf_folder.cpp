// HF model folders: legacy and bare-model names, missing heads, refusals, sharded
// checkpoints and save -> load round trips.
#include <torch/torch.h>
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "shardtrain/core/check.h"
#include "shardtrain/model/classifier.h"
#include "shardtrain/model/hf_folder.h"
#include "shardtrain/model/safetensors.h"

using namespace shardtrain;
namespace fs = std::filesystem;

namespace {

const fs::path kTiny = fs::path(SHARDTRAIN_SOURCE_DIR) / "tests/fixtures/bert_golden/small_gelu_new_l2";

fs::path scratch(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("shardtrain_test_hf_folder_" + std::to_string(::getpid())) / name;
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

at::Tensor logits_of(SequenceClassifier& model) {
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
