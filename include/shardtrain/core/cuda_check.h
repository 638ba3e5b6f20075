// CUDA and NCCL check macros. Only included by code compiled with CUDA/NCCL.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "shardtrain/core/check.h"

#define ST_CHECK_CUDA(call)                                                             \
  do {                                                                                  \
    cudaError_t st_cuda_rc_ = (call);                                                   \
    if (st_cuda_rc_ != cudaSuccess)                                                     \
      ::shardtrain::fatal("CUDA", __FILE__, __LINE__,                                   \
                          std::string(cudaGetErrorString(st_cuda_rc_)) + " (in " #call ")"); \
  } while (0)

#define ST_CHECK_NCCL(call)                                                             \
  do {                                                                                  \
    ncclResult_t st_nccl_rc_ = (call);                                                  \
    if (st_nccl_rc_ != ncclSuccess && st_nccl_rc_ != ncclInProgress)                    \
      ::shardtrain::fatal("NCCL", __FILE__, __LINE__,                                   \
                          std::string(ncclGetErrorString(st_nccl_rc_)) + " (in " #call ")"); \
  } while (0)
