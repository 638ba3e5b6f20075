// Flat state in a checkpoint: what a parallel strategy hands to a checkpoint
// and takes back on resume (docs/DESIGN.md, "Checkpoints").
//
// Every strategy keeps parameters (and AdamW's two moments) in flat buffers in
// the layout order of optim/param_layout.h, and each rank owns some element
// ranges of them: DDP an equal 1/W part of its full copy (so all ranks write in
// parallel), ZeRO-1 its shard, ZeRO-2/3 one chunk of every unit. A rank
// describes what it owns as FlatParts; this file turns them into the named
// full-shape datasets of a checkpoint (checkpoint.h), under fixed groups:
//
//   /model/<name>              parameters, float32, true shapes
//   /optim/exp_avg/<name>      AdamW first moment, same names and shapes
//   /optim/exp_avg_sq/<name>   AdamW second moment
//
// and back, for any partition on either side: a file written by 4 ranks of
// zero3 is read by 2 ranks of ddp.
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/optim/param_layout.h"

namespace shardtrain {

// A rank's part of the flat buffers: elements [begin, begin + params.numel())
// of the layout. exp_avg / exp_avg_sq: same numel, or undefined (model only;
// then on every rank alike). Any device and float dtype; the checkpoint holds
// float32. Elements past the layout's end (ZeRO padding) are ignored when
// writing and left as they are when reading.
struct FlatPart {
  int64_t begin = 0;
  at::Tensor params;
  at::Tensor exp_avg;
  at::Tensor exp_avg_sq;
};

// The layout as the checkpoint layer sees it (name, shape, offset per slot).
std::vector<FlatTensor> flat_tensors(const ParamLayout& layout);

// Collective: writes every rank's parts into /model (and /optim/... when the
// parts carry optimizer state). At least one part per rank (an empty one when
// it owns nothing), all with or all without optimizer state on every rank; the
// parts of all ranks must tile the layout's elements exactly. One collective
// write per group.
void write_flat_state(CheckpointWriter& writer, const std::vector<FlatTensor>& layout,
                      const std::vector<FlatPart>& parts);

// Collective: fills every part's params (and exp_avg / exp_avg_sq when
// with_optimizer, which every rank passes alike) from the checkpoint, whatever
// partition wrote it. Error, naming the file and tensor, when the checkpoint's
// tensors do not match the layout (a tensor missing or extra, another shape),
// or when optimizer state is asked for and the checkpoint has none. Every rank
// checks the same file metadata, so all throw alike.
void read_flat_state(CheckpointReader& reader, const std::vector<FlatTensor>& layout, std::vector<FlatPart>& parts,
                     bool with_optimizer);

// Local: Error naming the file when /model's tensors are not exactly `layout`
// (names and shapes).
void check_model_group(const CheckpointReader& reader, const std::vector<FlatTensor>& layout);

// The name of the model group ("model"), for whole-tensor reads (export).
const char* model_group();

}  // namespace shardtrain
