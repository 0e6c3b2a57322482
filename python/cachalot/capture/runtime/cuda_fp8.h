/* The runtime's stand-in for NVIDIA's cuda_fp8.h, which NCCL's header includes and which itself
   includes cuda_fp16.h by path, past the stand-in beside this file (see cuda_fp16.h for why the
   runtime declines NVIDIA's). The runtime names no fp8 type. */
#ifndef __CUDA_FP8_H__
#define __CUDA_FP8_H__
#include "cuda_fp16.h"
#include "cuda_bf16.h"
#endif
