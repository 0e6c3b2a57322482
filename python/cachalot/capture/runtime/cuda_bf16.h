/* The runtime's stand-in for NVIDIA's cuda_bf16.h: the bfloat16 types, declared only (see
   cuda_fp16.h beside it for why), under the real header's include guard. */
#ifndef __CUDA_BF16_H__
#define __CUDA_BF16_H__
#define __CUDA_BF16_TYPES_EXIST__  // as NVIDIA's header says (NCCL's then has ncclBfloat16)
#ifdef __cplusplus
struct __nv_bfloat16;
struct __nv_bfloat162;
#endif
#endif
