// predict_file over 2 and 4 ranks against the same call on one process
// (MPI_COMM_SELF on every rank), on MRPC dev with a small random BERT saved as a
// HF folder with the bert-base-cased vocabulary.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <mpi.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <unistd.h>

#include "shardtrain/model/task_model.h"
#include "shardtrain/core/check.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/model/hf_folder.h"
#include "shardtrain/metrics/metrics.h"
#include "shardtrain/tasks/sequence_classification.h"
#include "shardtrain/predict/predict.h"
#include "support/mpi_ranks.h"
#include "support/scratch_dir.h"

using namespace shardtrain;
namespace fs = std::filesystem;

namespace {

const std::string kSource = SHARDTRAIN_SOURCE_DIR;
const std::string kDev = kSource + "/data/glue/MRPC/dev.tsv";

using shardtrain_test::world_rank;

// One fresh temp folder per test run (mkdtemp by rank 0, shared with the
// others: never a stale folder of an earlier run whose rank 0 had the same
// pid), removed by the last test case.
const fs::path& temp_dir() {
  static const fs::path dir = shardtrain_test::make_shared_temp_dir("test_predict");
  return dir;
}

EncoderConfig small_config(int64_t num_labels) {
  EncoderConfig config = bert_base_cased_config(num_labels);
  config.hidden_size = 16;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 2;
  config.intermediate_size = 32;
  if (num_labels == 2) config.id2label = {"not_equivalent", "equivalent"};
  if (num_labels == 1) config.problem_type = "regression";
  return config;
}

// Rank 0 writes the folder; every rank returns its path after a barrier.
std::string make_model_folder(const std::string& name, int64_t num_labels, uint64_t seed) {
  const fs::path dir = temp_dir() / name;
  if (world_rank() == 0) {
    TaskModel model(small_config(num_labels));
    model.init_weights(seed);
    // Weights 10x HF's N(0, 0.02) (LayerNorms left at 1 / 0): logits of order 1
    // that differ clearly from row to row, without saturating softmax or tanh.
    torch::NoGradGuard no_grad;
    for (auto& [name, p] : model.state_dict())
      if (name.find("LayerNorm") == std::string::npos) p.mul_(10.0);
    save_hf_folder(model, dir.string());
    fs::copy_file(kSource + "/data/vocab/bert-base-cased-vocab.txt", dir / "vocab.txt",
                  fs::copy_options::overwrite_existing);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return dir.string();
}

std::string write_rank0(const std::string& name, const std::string& content) {
  const fs::path path = temp_dir() / name;
  if (world_rank() == 0) std::ofstream(path, std::ios::binary) << content;
  MPI_Barrier(MPI_COMM_WORLD);
  return path.string();
}

PredictOptions mrpc_options(const std::string& model, int64_t batch_size) {
  PredictOptions options;
  options.model_dir = model;
  options.data_path = kDev;
  options.data.text_a = "#1 String";
  options.data.text_b = "#2 String";
  options.data.label = "Quality";
  options.batch_size = batch_size;
  return options;
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

}  // namespace

TEST_CASE("predict: sharded rows equal the single-process run, each once, in order") {
  const std::string model = make_model_folder("mrpc2", 2, 11);
  int world_size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);

  // 408 rows, batch 6: 408 is a multiple of 6*2 and 6*4, so every rank runs
  // exactly the batches one process runs -> bit-identical logits.
  {
    const PredictResult single_result = predict_file(mrpc_options(model, 6), MPI_COMM_SELF);
    const PredictResult sharded_result = predict_file(mrpc_options(model, 6), MPI_COMM_WORLD);
    const ClassPredictions& single = single_result.as<ClassPredictions>();
    const ClassPredictions& sharded = sharded_result.as<ClassPredictions>();
    CHECK(sharded_result.world_size == world_size);
    REQUIRE(single_result.num_rows == 408);
    REQUIRE(sharded_result.num_rows == 408);
    CHECK(sharded_result.rows == iota(408));
    CHECK(single_result.rows == iota(408));
    REQUIRE(sharded.logits.size() == 408u * 2u);
    CHECK(sharded.logits == single.logits);
    CHECK(sharded.predicted_ids == single.predicted_ids);
    // The rows really differ (so a swapped or repeated row would show).
    int64_t distinct = 0;
    for (int64_t i = 1; i < 408; ++i) distinct += sharded.logits[2 * i] != sharded.logits[2 * (i - 1)];
    CHECK(distinct > 400);
  }

  // Batch 32: the last global batch (24 rows) is split over the ranks into
  // smaller batches with other padding lengths. Padding is masked, so only fp32
  // reduction order changes: logits of size ~1-10 agree to 1e-4 absolute.
  {
    const PredictResult single_result = predict_file(mrpc_options(model, 32), MPI_COMM_SELF);
    const PredictResult sharded_result = predict_file(mrpc_options(model, 32), MPI_COMM_WORLD);
    const ClassPredictions& single = single_result.as<ClassPredictions>();
    const ClassPredictions& sharded = sharded_result.as<ClassPredictions>();
    CHECK(sharded_result.rows == iota(408));
    REQUIRE(sharded.logits.size() == single.logits.size());
    float max_diff = 0, max_abs = 0;
    for (size_t i = 0; i < single.logits.size(); ++i) {
      max_diff = std::max(max_diff, std::abs(single.logits[i] - sharded.logits[i]));
      max_abs = std::max(max_abs, std::abs(single.logits[i]));
    }
    INFO("max |logit| " << max_abs);
    CHECK(max_diff <= 1e-4f);
  }
}

TEST_CASE("predict: logits equal the model run on each row alone; metrics from the logits") {
  const std::string model = make_model_folder("mrpc2b", 2, 12);
  const PredictResult predicted = predict_file(mrpc_options(model, 32), MPI_COMM_WORLD);
  const ClassPredictions& result = predicted.as<ClassPredictions>();

  // Reference: the folder loaded again, each of a few rows run unbatched (no padding at all).
  HfModel hf = load_hf_folder(model);
  CHECK(hf.report.message().empty());
  hf.model->eval();
  const Tokenizer tokenizer = Tokenizer::from_model_dir(model);
  ReaderOptions reader;
  reader.text_a = "#1 String";
  reader.text_b = "#2 String";
  reader.label = "Quality";
  const RawTable table = read_table(kDev, reader);
  torch::NoGradGuard no_grad;
  for (int64_t row : {0, 1, 31, 32, 200, 383, 384, 407}) {
    const Encoding e = tokenizer.encode(table.text_a[row], std::string_view(table.text_b[row]), 128);
    const int64_t n = static_cast<int64_t>(e.input_ids.size());
    at::Tensor ids = torch::tensor(std::vector<int64_t>(e.input_ids.begin(), e.input_ids.end())).view({1, n});
    at::Tensor types =
        torch::tensor(std::vector<int64_t>(e.token_type_ids.begin(), e.token_type_ids.end())).view({1, n});
    at::Tensor logits = hf.model->forward(ids, types, torch::ones({1, n}, torch::kLong));
    for (int64_t j = 0; j < 2; ++j) {
      INFO("row " << row << " class " << j);
      CHECK(result.logits[row * 2 + j] == doctest::Approx(logits[0][j].item<float>()).epsilon(1e-5).scale(1.0));
    }
  }

  // Metrics recomputed here from the logits and the file's Quality column.
  int64_t correct = 0, tp = 0, fp = 0, fn = 0;
  for (int64_t i = 0; i < 408; ++i) {
    const int64_t predicted = result.logits[2 * i + 1] > result.logits[2 * i] ? 1 : 0;
    CHECK(result.predicted_ids[i] == predicted);
    const int64_t label = table.labels.class_ids[i];
    CHECK(result.labels.class_ids[i] == label);
    correct += predicted == label;
    tp += predicted == 1 && label == 1;
    fp += predicted == 1 && label == 0;
    fn += predicted == 0 && label == 1;
  }
  CHECK(result.metrics.at("eval_accuracy") == doctest::Approx(correct / 408.0).epsilon(1e-12));
  const double f1 = 2 * tp + fp + fn == 0 ? 0.0 : 2.0 * tp / (2.0 * tp + fp + fn);
  CHECK(result.metrics.at("eval_f1") == doctest::Approx(f1).epsilon(1e-12));

  // Output: one line per row, label names from the config, read back unchanged.
  CHECK(result.label_names == std::vector<std::string>{"not_equivalent", "equivalent"});
  const std::string line0 = result.json_line(0);
  CHECK(line0.rfind("{\"row\":0,\"line\":2,\"logits\":[", 0) == 0);
  CHECK(line0.find(result.predicted_ids[0] == 1 ? "\"label\":1,\"label_name\":\"equivalent\"}"
                                                 : "\"label\":0,\"label_name\":\"not_equivalent\"}") !=
        std::string::npos);
  if (world_rank() == 0) {
    const std::string path = (temp_dir() / "pred.jsonl").string();
    write_predictions(result, 408, path, "--output");
    CHECK_FALSE(shardtrain_test::has_temporary_of(path));
    std::ifstream in(path);
    std::string line;
    int64_t n = 0;
    while (std::getline(in, line)) {
      if (n < 408) CHECK(line == result.json_line(n));
      ++n;
    }
    CHECK(n == 408);
    // %.9g round-trips: the logits read back are the same floats.
    const size_t open = line0.find('[') + 1;
    CHECK(std::stof(line0.substr(open)) == result.logits[0]);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("predict: regression head and string labels") {
  // Regression: "prediction" is the single logit; MSE / Pearson from it by hand.
  const std::string regression = make_model_folder("reg", 1, 13);
  std::string tsv = "score\ttext\n";
  const char* texts[] = {"A man is playing a guitar.", "Two dogs run.", "The cat sleeps on the mat.",
                         "Stocks fell sharply on Monday.", "She reads.", "Rain is expected tomorrow in Paris.",
                         "He said no.", "The committee approved the budget after a long debate."};
  for (int i = 0; i < 8; ++i) tsv += std::to_string(0.5 * i) + "\t" + texts[i] + "\n";
  PredictOptions options;
  options.model_dir = regression;
  options.data_path = write_rank0("sts.tsv", tsv);
  options.data.text_a = "text";
  options.data.label = "score";
  options.batch_size = 3;
  const PredictResult predicted = predict_file(options, MPI_COMM_WORLD);
  const ClassPredictions& r = predicted.as<ClassPredictions>();
  CHECK(r.regression);
  CHECK(predicted.rows == iota(8));
  double mse = 0, mx = 0, my = 0;
  for (int i = 0; i < 8; ++i) {
    mse += (r.logits[i] - 0.5 * i) * (r.logits[i] - 0.5 * i);
    mx += r.logits[i];
    my += 0.5 * i;
  }
  mx /= 8;
  my /= 8;
  double sxy = 0, sxx = 0, syy = 0;
  for (int i = 0; i < 8; ++i) {
    sxy += (r.logits[i] - mx) * (0.5 * i - my);
    sxx += (r.logits[i] - mx) * (r.logits[i] - mx);
    syy += (0.5 * i - my) * (0.5 * i - my);
  }
  CHECK(r.metrics.at("eval_mse") == doctest::Approx(mse / 8).epsilon(1e-9));
  CHECK(r.metrics.at("eval_pearson") == doctest::Approx(sxy / std::sqrt(sxx * syy)).epsilon(1e-9));
  const std::string line = r.json_line(3);
  CHECK(line.find("\"prediction\":") != std::string::npos);
  CHECK(line.find("\"label\"") == std::string::npos);

  // String labels are looked up in the model's id2label, whatever their sorted order.
  const std::string model = make_model_folder("named", 2, 14);
  options = PredictOptions{};
  options.model_dir = model;
  options.data.text_a = "s";
  options.data.label = "y";
  options.data_path = write_rank0("named.jsonl", "{\"s\": \"Yes indeed.\", \"y\": \"equivalent\"}\n"
                                                 "{\"s\": \"No way.\", \"y\": \"equivalent\"}\n"
                                                 "{\"s\": \"Maybe so.\", \"y\": \"not_equivalent\"}\n");
  const PredictResult named = predict_file(options, MPI_COMM_WORLD);
  CHECK(named.as<ClassPredictions>().labels.class_ids == std::vector<int64_t>{1, 1, 0});
  options.data_path = write_rank0("unknown.jsonl", "{\"s\": \"Yes.\", \"y\": \"paraphrase\"}\n");
  CHECK_THROWS_WITH_AS(predict_file(options, MPI_COMM_WORLD),
                       doctest::Contains("label 'paraphrase' is not one of the model's labels"), Error);
  options.data_path = kDev;
  options.data.text_a = "#1 String";
  options.data.label = "Quality";
  options.data.max_length = 600;
  CHECK_THROWS_WITH_AS(predict_file(options, MPI_COMM_WORLD), doctest::Contains("max_position_embeddings"), Error);
}

TEST_CASE("predict --dtype bfloat16: the model in bf16 (LayerNorm, softmax in fp32), logits close to fp32's") {
  const std::string model = make_model_folder("mrpc_bf16", 2, 11);
  PredictOptions fp32 = mrpc_options(model, 32), bf16 = mrpc_options(model, 32);
  bf16.dtype = at::kBFloat16;
  const PredictResult a_result = predict_file(fp32, MPI_COMM_WORLD);
  const PredictResult b_result = predict_file(bf16, MPI_COMM_WORLD);
  const ClassPredictions& a = a_result.as<ClassPredictions>();
  const ClassPredictions& b = b_result.as<ClassPredictions>();
  REQUIRE(b.logits.size() == a.logits.size());
  // bf16 weights and matmuls keep 8 significant bits; through 2 layers the
  // logits (size ~1-10 here) move by a few percent of their size, not more.
  double max_rel = 0, mean_abs = 0;
  bool differs = false;
  for (size_t i = 0; i < a.logits.size(); ++i) {
    const double d = std::abs(static_cast<double>(a.logits[i]) - b.logits[i]);
    max_rel = std::max(max_rel, d / std::max(1.0, std::abs(static_cast<double>(a.logits[i]))));
    mean_abs += d / static_cast<double>(a.logits.size());
    differs = differs || d > 0;
  }
  MESSAGE("bf16 vs fp32 logits: max relative diff " << max_rel << ", mean |diff| " << mean_abs);
  CHECK(differs);  // the model really ran in bf16
  CHECK(max_rel < 0.05);  // measured 0.0098 (mean |diff| 0.0024) at -np 2
  int64_t same = 0;
  for (int64_t i = 0; i < a_result.num_rows; ++i) same += a.predicted_ids[i] == b.predicted_ids[i];
  CHECK(same >= a_result.num_rows * 95 / 100);
  PredictOptions half = mrpc_options(model, 32);
  half.dtype = at::kHalf;
  CHECK(shardtrain_test::error_of([&] { predict_file(half, MPI_COMM_WORLD); }) ==
        "--dtype float16 needs a GPU (LibTorch's CPU kernels have no fp16 matmul); use bfloat16");
}

// Last in the file: the cases above share temp_dir().
TEST_CASE("predict: clean up") { shardtrain_test::remove_shared_dir(temp_dir().string()); }
