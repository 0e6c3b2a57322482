/* The runtime's stand-in for NVIDIA's cuda_fp16.h (build.py puts runtime/ first on the include
   path). cuBLAS's and NCCL's headers include it for the half type, which they name only through
   pointers; NVIDIA's own header carries inline arithmetic that needs CCCL's <nv/target>, which
   CUDA 12 wheels do not ship. A declaration is all the runtime needs, under the real header's
   include guard so that a later include of the real one by path is a no-op. */
#ifndef __CUDA_FP16_H__
#define __CUDA_FP16_H__
#ifdef __cplusplus
struct __half;
struct __half2;
#endif
#endif
