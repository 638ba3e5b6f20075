// Private to src/checkpoint: the local checks of a checkpoint file, made by
// one process with no MPI collective: whether a file is a shardtrain
// checkpoint at all (CheckpointReader runs it on rank 0 before the collective
// open), and verify_checkpoint() (checkpoint.h), which reads every dataset.
#pragma once

#include <string>

namespace shardtrain {
namespace detail {

// The file exists, is HDF5, opens (not truncated, superblock intact) and is a
// shardtrain checkpoint of a version this build reads. Error naming the file
// otherwise.
void check_checkpoint_file(const std::string& path);

}  // namespace detail
}  // namespace shardtrain
