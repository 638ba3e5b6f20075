// Streaming export (issue #6, gather_16bit_weights_on_model_save / full state
// dict): SafetensorsStreamWriter writes the same bytes as write_safetensors
// and refuses misuse; model_flat_tensors() lists the model's state dict
// without building it; export_checkpoint_safetensors(), run by rank 0 alone on
// a checkpoint written by every rank, writes exactly the bytes of the
// whole-model path (load_checkpoint_model + write_safetensors) while holding
// at most the largest tensor (float32) or the largest tensor plus one
// converted chunk (float16 / bfloat16), far less than the model.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/train/checkpoint_manager.h"
#include "shardtrain/core/check.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/model/safetensors.h"
#include "shardtrain/optim/param_layout.h"
#include "shardtrain/train/checkpoint_model.h"
#include "shardtrain/train/train_checkpoint.h"
#include "support/mpi_ranks.h"
#include "support/scratch_dir.h"

namespace export_stream_mpi_test {
using namespace shardtrain;
using shardtrain_test::all_ranks;
using shardtrain_test::contains;
using shardtrain_test::error_of;
using shardtrain_test::world_rank;
using shardtrain_test::world_size;
namespace fs = std::filesystem;

namespace {

std::string file_bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Shared by all ranks; each rank names its own files where ranks write alone.
const std::string& export_dir() {
  static const std::string dir = shardtrain_test::make_shared_temp_dir("export_stream_test");
  return dir;
}

std::string rank_file(const std::string& name) {
  return export_dir() + "/r" + std::to_string(world_rank()) + "_" + name;
}

// Several layers whose largest tensor (word embeddings, 120 x 32) is well
// under a tenth of the model.
EncoderConfig export_config() {
  EncoderConfig config;
  config.vocab_size = 120;
  config.hidden_size = 32;
  config.num_hidden_layers = 6;
  config.num_attention_heads = 4;
  config.intermediate_size = 48;
  config.max_position_embeddings = 40;
  config.set_num_labels(3);
  return config;
}

// Collective: a checkpoint of `model` written from an even part per rank.
void write_model_checkpoint(const std::string& path, const TaskModel& model,
                            const EncoderConfig& stated_config) {
  torch::NoGradGuard no_grad;
  const auto named = model.state_dict();
  const ParamLayout layout(named);
  std::vector<at::Tensor> tensors;
  for (const auto& [name, param] : named) tensors.push_back(param);
  const at::Tensor flat = layout.flatten(tensors, layout.numel());
  const int64_t n = layout.numel(), w = world_size(), r = world_rank();
  const int64_t begin = n * r / w, end = n * (r + 1) / w;
  FlatPart part;
  part.begin = begin;
  part.params = flat.narrow(0, begin, end - begin);
  TrainState state;
  state.step = 11;
  state.epoch = 1;
  state.model_config_json = stated_config.to_json();
  state.vocab_text = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n";
  write_train_checkpoint(path, flat_tensors(layout), part, state, MPI_COMM_WORLD);
}

struct ExportFixture {
  EncoderConfig config = export_config();
  std::shared_ptr<TaskModel> model;
  std::string checkpoint;
};

ExportFixture& export_fixture() {
  static ExportFixture f;
  if (f.model) return f;
  f.model = std::make_shared<TaskModel>(f.config);
  {
    torch::NoGradGuard no_grad;
    torch::manual_seed(5);
    // Values that round differently to float16 and bfloat16 (not HF's init).
    for (auto& [name, param] : f.model->state_dict()) param.normal_(0.0, 0.7);
  }
  f.checkpoint = checkpoint_path(export_dir(), 1);
  write_model_checkpoint(f.checkpoint, *f.model, f.config);
  return f;
}

NamedTensors mixed_tensors() {
  torch::manual_seed(3);
  return {{"w", torch::randn({3, 4})},
          {"t", torch::randn({5, 2}).t()},  // not contiguous
          {"h", torch::randn({7}).to(torch::kHalf)},
          {"b", torch::randn({2, 3}).to(torch::kBFloat16)},
          {"i", torch::arange(6, torch::kLong).reshape({2, 3})},
          {"scalar", torch::tensor(2.5)},
          {"empty", torch::zeros({0, 3})},
          {"flag", torch::tensor({true, false, true})}};
}

std::vector<SafetensorsTensorSpec> specs_of(const NamedTensors& tensors) {
  std::vector<SafetensorsTensorSpec> specs;
  for (const auto& [name, t] : tensors) specs.push_back({name, t.scalar_type(), t.sizes().vec()});
  return specs;
}

}  // namespace

TEST_CASE("stream writer: the bytes of write_safetensors and of the format's reference layout") {
  const NamedTensors tensors = mixed_tensors();
  const std::string whole = rank_file("whole.safetensors"), streamed = rank_file("streamed.safetensors");
  write_safetensors(whole, tensors);
  {
    SafetensorsStreamWriter writer(streamed, specs_of(tensors));
    for (const auto& [name, t] : tensors) {
      const std::size_t copied = writer.write_next(name, t);
      // Only the transposed tensor needed a contiguous copy.
      CHECK(copied == (name == "t" ? std::size_t(10 * 4) : std::size_t(0)));
    }
    CHECK(writer.tensors_written() == tensors.size());
    CHECK_FALSE(fs::exists(streamed));  // not before commit()
    writer.commit();
    CHECK(writer.file_bytes() == fs::file_size(streamed));
  }
  const std::string bytes = file_bytes_of(streamed);
  CHECK(bytes == file_bytes_of(whole));
  CHECK_FALSE(shardtrain_test::has_temporary_of(streamed));

  // Independently of both writers: the serialised header, then each tensor's
  // contiguous bytes in order.
  std::vector<at::Tensor> host;
  std::vector<SafetensorsBlob> blobs;
  for (const auto& [name, t] : tensors) host.push_back(t.contiguous());
  std::string expected_data;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    SafetensorsBlob blob;
    blob.name = tensors[i].first;
    blob.dtype = to_safetensors_dtype(host[i].scalar_type());
    blob.shape = host[i].sizes().vec();
    blob.data = host[i].data_ptr();
    blob.num_bytes = host[i].numel() * host[i].element_size();
    expected_data.append(static_cast<const char*>(blob.data), blob.num_bytes);
    blobs.push_back(blob);
  }
  CHECK(bytes == serialize_safetensors_header(blobs, {{"format", "pt"}}) + expected_data);

  const SafetensorsFile file(streamed);
  REQUIRE(file.entries().size() == tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    CHECK(file.entries()[i].name == tensors[i].first);
    CHECK(at::equal(file.tensor(tensors[i].first), tensors[i].second));
  }
}

TEST_CASE("stream writer: misuse is refused by name and leaves no file") {
  const std::string path = rank_file("misuse.safetensors");
  const std::vector<SafetensorsTensorSpec> specs = {{"a", at::kFloat, {2, 3}}, {"b", at::kHalf, {4}}};
  auto expect_refused = [&](const std::function<void(SafetensorsStreamWriter&)>& misuse, const std::string& text) {
    {
      SafetensorsStreamWriter writer(path, specs);
      const std::string message = error_of([&] { misuse(writer); });
      CHECK_MESSAGE(contains(message, text), message);
      CHECK_MESSAGE(contains(message, path), message);
      // Unusable afterwards; the temporary file is gone at once.
      CHECK_FALSE(shardtrain_test::has_temporary_of(path));
      CHECK(contains(error_of([&] { writer.commit(); }), "failed earlier"));
    }
    CHECK_FALSE(fs::exists(path));
  };
  expect_refused([](auto& w) { w.write_next("b", torch::zeros({4}, torch::kHalf)); },
                 "got tensor 'b' but the header lists 'a' next");
  expect_refused([](auto& w) { w.write_next("a", torch::zeros({2, 3}, torch::kDouble)); },
                 "tensor 'a' has dtype Double but the header says Float");
  expect_refused([](auto& w) { w.write_next("a", torch::zeros({3, 2})); }, "has shape [3, 2] but the header says [2, 3]");
  expect_refused([](auto& w) { w.write_next("a", at::Tensor()); }, "'a' (number 0) is undefined");
  expect_refused(
      [](auto& w) {
        w.write_next("a", torch::zeros({2, 3}));
        w.commit();
      },
      "commit() after 1 of 2 tensors (next: 'b')");
  expect_refused(
      [](auto& w) {
        w.write_next("a", torch::zeros({2, 3}));
        w.write_next_converting("b", torch::zeros({4}));
        w.write_next("c", torch::zeros({1}));
      },
      "tensor 'c' is one more than the 2 the header lists");

  // Bad specs: refused before any file exists.
  auto refused_specs = [&](std::vector<SafetensorsTensorSpec> bad, const std::string& text) {
    const std::string message = error_of([&] { SafetensorsStreamWriter writer(path, bad); });
    CHECK_MESSAGE(contains(message, text), message);
    CHECK_FALSE(shardtrain_test::has_temporary_of(path));
  };
  refused_specs({{"a", at::kFloat, {1}}, {"a", at::kFloat, {2}}}, "tensor name 'a' appears twice");
  refused_specs({{"__metadata__", at::kFloat, {1}}}, "__metadata__");
  refused_specs({{"a", at::kFloat, {2, -1}}}, "negative dimension");
  refused_specs({{"a", at::kComplexFloat, {2}}}, "cannot store");

  // Dropped without commit(): an existing file at `path` is left as it was.
  {
    std::ofstream(path) << "old";
    SafetensorsStreamWriter writer(path, specs);
    writer.write_next("a", torch::zeros({2, 3}));
    CHECK(shardtrain_test::has_temporary_of(path));
  }
  CHECK_FALSE(shardtrain_test::has_temporary_of(path));
  CHECK(file_bytes_of(path) == "old");
  fs::remove(path);
}

TEST_CASE("stream writer: converting in chunks gives the bytes of a whole conversion") {
  // More than two chunks, and not a multiple of the chunk.
  const int64_t n = 2 * SafetensorsStreamWriter::kConvertChunkElements + 12345;
  torch::manual_seed(9);
  const at::Tensor source = torch::randn({n}) * 1000;
  for (const at::ScalarType dtype : {at::kHalf, at::kBFloat16}) {
    const std::string chunked = rank_file("chunked.safetensors"), whole = rank_file("whole_converted.safetensors");
    {
      SafetensorsStreamWriter writer(chunked, {{"x", dtype, source.sizes().vec()}});
      const std::size_t held = writer.write_next_converting("x", source);
      // One chunk of 2-byte values at a time, never the whole converted copy.
      CHECK(held == static_cast<std::size_t>(SafetensorsStreamWriter::kConvertChunkElements) * 2);
      writer.commit();
    }
    write_safetensors(whole, {{"x", source.to(dtype)}});
    CHECK(file_bytes_of(chunked) == file_bytes_of(whole));
  }
}

TEST_CASE("model_flat_tensors: the state dict's names, order, shapes and offsets without the model") {
  EncoderConfig regression = export_config();
  regression.num_hidden_layers = 3;
  regression.type_vocab_size = 3;
  regression.intermediate_size = 64;
  regression.problem_type = "regression";
  regression.set_num_labels(1);
  for (const EncoderConfig& config : {export_config(), regression}) {
    const TaskModel model(config);
    const std::vector<FlatTensor> want = flat_tensors(ParamLayout(model.state_dict()));
    const std::vector<FlatTensor> got = model_flat_tensors(config);
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      CHECK(got[i].name == want[i].name);
      CHECK(got[i].shape == want[i].shape);
      CHECK(got[i].offset == want[i].offset);
    }
  }
  EncoderConfig bad = export_config();
  bad.num_attention_heads = 5;
  CHECK(contains(error_of([&] { model_flat_tensors(bad, "ckpt.h5 (model_config_json)"); }),
                 "ckpt.h5 (model_config_json)"));
}

TEST_CASE("export: rank 0 alone streams the bytes of the whole-model path, holding one tensor at a time") {
  ExportFixture& f = export_fixture();
  // The reference, the way export worked before: every rank loads the whole
  // model (collective), rank 0 writes its state dict.
  const CheckpointModel loaded = load_checkpoint_model(f.checkpoint, MPI_COMM_WORLD);
  const std::vector<FlatTensor> layout = model_flat_tensors(f.config);
  int64_t model_bytes = 0, largest = 0;
  for (const auto& t : layout) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    model_bytes += numel * 4;
    largest = std::max(largest, numel * 4);
  }
  REQUIRE(largest == 120 * 32 * 4);  // the word embeddings
  REQUIRE(largest * 10 < model_bytes);

  bool ok = true;
  if (world_rank() == 0) {
    for (const at::ScalarType dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
      const std::string dtype_name = c10::toString(dtype);
      CAPTURE(dtype_name);
      const std::string reference = export_dir() + "/reference.safetensors";
      const std::string streamed = export_dir() + "/streamed.safetensors";
      NamedTensors tensors;
      for (const auto& [name, param] : loaded.model->state_dict()) tensors.emplace_back(name, param.detach().to(dtype));
      write_safetensors(reference, tensors);

      // Local: the other ranks are not involved (they wait at the barrier below).
      const CheckpointExport stats = export_checkpoint_safetensors(f.checkpoint, streamed, dtype);
      const bool same = file_bytes_of(streamed) == file_bytes_of(reference);
      CHECK(same);
      ok = ok && same;
      CHECK(stats.tensors == static_cast<int64_t>(layout.size()));
      CHECK(stats.model_bytes == model_bytes);
      CHECK(stats.largest_tensor_bytes == largest);
      // float32: exactly the largest tensor. 16-bit: the tensor read plus its
      // converted copy (these tensors are smaller than one conversion chunk).
      CHECK(stats.peak_bytes_held == (dtype == at::kFloat ? largest : largest + largest / 2));
      CHECK(stats.peak_bytes_held * 6 < model_bytes);
      CHECK(stats.file_bytes == fs::file_size(streamed));
      CHECK(stats.state.step == 11);
      CHECK(stats.config.to_json() == f.config.to_json());
      MESSAGE("export " << dtype_name << ": " << stats.tensors << " tensors, peak " << stats.peak_bytes_held
                        << " bytes held, largest tensor " << largest << " bytes, model " << model_bytes << " bytes");
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(all_ranks(ok));
}

TEST_CASE("export: a checkpoint whose tensors do not match its config is refused before any file appears") {
  ExportFixture& f = export_fixture();
  // Tensors of the 3-label model, attribute saying 2 labels.
  EncoderConfig stated = f.config;
  stated.set_num_labels(2);
  const std::string odd = checkpoint_path(export_dir(), 2);
  write_model_checkpoint(odd, *f.model, stated);
  if (world_rank() == 0) {
    const std::string out = export_dir() + "/odd.safetensors";
    const std::string message = error_of([&] { export_checkpoint_safetensors(odd, out); });
    CHECK_MESSAGE(contains(message, odd), message);
    CHECK_MESSAGE(contains(message, "classifier.weight has shape [3, 32] in the checkpoint but the model's is [2, 32]"),
                  message);
    CHECK_FALSE(fs::exists(out));
    CHECK_FALSE(shardtrain_test::has_temporary_of(out));
    CHECK(contains(error_of([&] { export_checkpoint_safetensors(f.checkpoint, out, at::kDouble); }),
                   "float32, float16 or bfloat16"));
    CHECK(contains(error_of([&] { export_checkpoint_safetensors(export_dir() + "/nope.h5", out); }), "nope.h5"));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("export stream: clean up") {
  MPI_Barrier(MPI_COMM_WORLD);
  shardtrain_test::remove_shared_dir(export_dir());
}

}  // namespace export_stream_mpi_test
