#include "shardtrain/checkpoint/flat_state.h"

#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <map>
#include <string>

#include "checkpoint/slice_plan.h"
#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/core/check.h"

namespace shardtrain {
namespace {

constexpr const char* kModelGroup = "model";
constexpr const char* kExpAvgGroup = "optim/exp_avg";
constexpr const char* kExpAvgSqGroup = "optim/exp_avg_sq";

// Whether every rank has `value`; Error on all ranks (naming `what`) when the
// ranks disagree, because the collective calls that follow would not match.
bool agreed_flag(bool value, MPI_Comm comm, const std::string& what) {
  const int64_t mine = value ? 1 : 0;
  const int64_t low = min_over_ranks(mine, comm, what + ": agreeing on optimizer state");
  const int64_t high = max_over_ranks(mine, comm, what + ": agreeing on optimizer state");
  if (low != high) throw Error(what + ": some ranks pass optimizer state and others do not");
  return low == 1;
}

// The part's tensors, flat, float32 (the dtype the checkpoint stores).
at::Tensor flat_float(const at::Tensor& tensor) { return tensor.reshape({-1}).to(at::kFloat); }

// A malformed FlatPart is a bug in the caller, not a user error; asserting
// aborts the job instead of leaving the other ranks waiting in a collective.
void check_part_sizes(const FlatPart& part, const std::string& where) {
  ST_ASSERT(part.params.defined(), where + ": FlatPart.params is undefined");
  ST_ASSERT(part.begin >= 0, where + ": FlatPart.begin is negative");
  ST_ASSERT(part.exp_avg.defined() == part.exp_avg_sq.defined(),
            where + ": FlatPart has only one of exp_avg / exp_avg_sq");
  ST_ASSERT(!part.exp_avg.defined() ||
                (part.exp_avg.numel() == part.params.numel() && part.exp_avg_sq.numel() == part.params.numel()),
            where + ": FlatPart exp_avg / exp_avg_sq must have params.numel() elements");
}

bool parts_have_optimizer(const std::vector<FlatPart>& parts, const std::string& where) {
  ST_ASSERT(!parts.empty(), where + ": no FlatPart (a rank that owns nothing passes one empty part)");
  for (const FlatPart& part : parts) {
    check_part_sizes(part, where);
    ST_ASSERT(part.exp_avg.defined() == parts.front().exp_avg.defined(),
              where + ": some FlatParts carry optimizer state and others do not");
  }
  return parts.front().exp_avg.defined();
}

// Names and shapes of `group` against the layout; the same answer on every rank
// because every rank reads the same file metadata.
void check_group_matches(const CheckpointReader& reader, const std::string& group,
                         const std::vector<FlatTensor>& layout) {
  const std::string& path = reader.path();
  const size_t slash = group.rfind('/');
  if (slash != std::string::npos && !reader.has(group.substr(0, slash), group.substr(slash + 1)))
    throw Error(path + ": the checkpoint has no optimizer state (/" + group +
                " is missing); it was written with the model only");
  const std::vector<std::string> stored = reader.names(group);
  std::map<std::string, const FlatTensor*> expected;
  for (const auto& tensor : layout) expected[tensor.name] = &tensor;
  for (const auto& name : stored)
    if (!expected.count(name))
      throw Error(path + ": tensor /" + group + "/" + name +
                  " is not a parameter of this model (the checkpoint belongs to another model architecture)");
  for (const auto& tensor : layout) {
    if (!std::binary_search(stored.begin(), stored.end(), tensor.name))
      throw Error(path + ": the checkpoint has no tensor /" + group + "/" + tensor.name +
                  " (the checkpoint belongs to another model architecture)");
    const std::vector<int64_t> shape = reader.shape(group, tensor.name);
    if (shape != tensor.shape)
      throw Error(path + ": tensor /" + group + "/" + tensor.name + " has shape " + shape_text(shape) +
                  " in the checkpoint but the model's is " + shape_text(tensor.shape));
  }
}

// Reads /group into the parts' tensors (float32 parts starting at their
// `begin`), in one collective read: through contiguous CPU float32 buffers
// where a part's tensor is anything else.
void read_group(CheckpointReader& reader, const std::string& group, const std::vector<FlatTensor>& layout,
                std::vector<FlatPart>& parts, at::Tensor FlatPart::*member) {
  std::vector<TensorSlice> slices;
  std::vector<std::pair<at::Tensor*, at::Tensor>> copies;  // (part tensor, staging buffer)
  for (FlatPart& part : parts) {
    at::Tensor& flat = part.*member;
    const bool direct = flat.device().is_cpu() && flat.scalar_type() == at::kFloat && flat.is_contiguous();
    at::Tensor buffer =
        direct ? flat.view({-1}) : at::empty({flat.numel()}, at::TensorOptions().dtype(at::kFloat));
    if (!direct) copies.emplace_back(&flat, buffer);
    for (TensorSlice& slice : slices_of_shard(layout, part.begin, buffer)) slices.push_back(std::move(slice));
  }
  reader.read(group, slices);
  for (auto& copy : copies) copy.first->copy_(copy.second.view(copy.first->sizes()));
}

// Every part's slices of one group, for one collective write.
std::vector<TensorSlice> slices_of_parts(const std::vector<FlatTensor>& layout, const std::vector<FlatPart>& parts,
                                         at::Tensor FlatPart::*member) {
  std::vector<TensorSlice> slices;
  for (const FlatPart& part : parts)
    for (TensorSlice& slice : slices_of_shard(layout, part.begin, flat_float(part.*member)))
      slices.push_back(std::move(slice));
  return slices;
}

}  // namespace

std::vector<TensorSlice> slices_of_shard(const std::vector<FlatTensor>& layout, int64_t shard_begin,
                                         const at::Tensor& shard) {
  const int64_t shard_end = shard_begin + shard.numel();
  at::Tensor flat = shard.view({-1});
  std::vector<TensorSlice> slices;
  for (const auto& tensor : layout) {
    const int64_t begin = std::max(tensor.offset, shard_begin);
    const int64_t end = std::min(tensor.offset + detail::numel_of(tensor.shape), shard_end);
    // An empty tensor is in every shard, so its dataset is still created.
    if (begin >= end && detail::numel_of(tensor.shape) > 0) continue;
    if (begin >= end) {
      slices.push_back(TensorSlice{tensor.name, tensor.shape, 0, flat.narrow(0, 0, 0)});
      continue;
    }
    slices.push_back(TensorSlice{tensor.name, tensor.shape, begin - tensor.offset,
                                 flat.narrow(0, begin - shard_begin, end - begin)});
  }
  return slices;
}

const char* model_group() { return kModelGroup; }

std::vector<FlatTensor> flat_tensors(const ParamLayout& layout) {
  std::vector<FlatTensor> out;
  out.reserve(layout.slots().size());
  for (const auto& slot : layout.slots()) out.push_back(FlatTensor{slot.name, slot.shape, slot.offset});
  return out;
}

void write_flat_state(CheckpointWriter& writer, const std::vector<FlatTensor>& layout,
                      const std::vector<FlatPart>& parts) {
  const std::string& where = writer.final_path();
  const bool with_optimizer = agreed_flag(parts_have_optimizer(parts, where), writer.comm(), where);
  writer.write_group(kModelGroup, slices_of_parts(layout, parts, &FlatPart::params));
  if (with_optimizer) {
    writer.write_group(kExpAvgGroup, slices_of_parts(layout, parts, &FlatPart::exp_avg));
    writer.write_group(kExpAvgSqGroup, slices_of_parts(layout, parts, &FlatPart::exp_avg_sq));
  }
}

void check_model_group(const CheckpointReader& reader, const std::vector<FlatTensor>& layout) {
  check_group_matches(reader, kModelGroup, layout);
}

void read_flat_state(CheckpointReader& reader, const std::vector<FlatTensor>& layout, std::vector<FlatPart>& parts,
                     bool with_optimizer) {
  for (const FlatPart& part : parts) {
    check_part_sizes(part, reader.path());
    ST_ASSERT(part.exp_avg.defined() == with_optimizer,
              reader.path() + ": read_flat_state: a part's optimizer tensors do not match with_optimizer");
  }
  check_group_matches(reader, kModelGroup, layout);
  if (with_optimizer) {
    check_group_matches(reader, kExpAvgGroup, layout);
    check_group_matches(reader, kExpAvgSqGroup, layout);
  }
  read_group(reader, kModelGroup, layout, parts, &FlatPart::params);
  if (with_optimizer) {
    read_group(reader, kExpAvgGroup, layout, parts, &FlatPart::exp_avg);
    read_group(reader, kExpAvgSqGroup, layout, parts, &FlatPart::exp_avg_sq);
  }
}

}  // namespace shardtrain
