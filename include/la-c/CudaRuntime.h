/*===- CudaRuntime.h - la's CUDA runtime (libla_cuda_runtime) -----*- C -*-===*\
|*                                                                            *|
|* libla_cuda_runtime.so implements the host-side `mgpu*` functions that the  *|
|* code of MLIR 22's `gpu-to-llvm` lowering calls (Debian ships no            *|
|* libmlir_cuda_runtime.so), on the CUDA driver API. The driver is loaded at  *|
|* run time with dlopen("libcuda.so.1"): the library links neither libcuda    *|
|* nor libcudart, and on a machine without a GPU every `mgpu*` call returns a *|
|* null handle (after one message on stderr) instead of crashing.             *|
|*                                                                            *|
|* The `laCuda*` functions are for la's own use: whether a GPU is there, its  *|
|* name, and the errors of the `mgpu*` calls, so that a caller can turn a     *|
|* failed launch into an error after the call.                                *|
|*                                                                            *|
|* Environment: LA_CUDA_DRIVER names another driver library to load instead  *|
|* of libcuda.so.1 (for tests).                                               *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/

#ifndef LA_C_CUDARUNTIME_H
#define LA_C_CUDARUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LA_CUDA_RUNTIME_EXPORTED __attribute__((visibility("default")))

/*===----------------------------------------------------------------------===*
 * la's own functions. Text goes to (buffer, size) and is truncated to fit,
 * always NUL-terminated when size > 0; a null buffer is allowed.
 *===----------------------------------------------------------------------===*/

/// Returns 1 when the driver loads, cuInit succeeds and there is at least one
/// device; else 0 and writes the reason (e.g. "libcuda.so.1 not found: ..."
/// or "cuInit failed: ..."). Loads the driver on the first call. Does not
/// count as an error for laCudaLastError and prints nothing.
LA_CUDA_RUNTIME_EXPORTED int laCudaAvailable(char *message, size_t size);

/// Writes the name and compute capability of the default device, e.g.
/// "NVIDIA H200 (sm_90)", and returns 1; returns 0 (and writes the reason)
/// when no GPU is available.
LA_CUDA_RUNTIME_EXPORTED int laCudaDeviceName(char *name, size_t size);

/// The compute capability of the default device (9 and 0 for sm_90).
/// Returns 0 when no GPU is available.
LA_CUDA_RUNTIME_EXPORTED int laCudaComputeCapability(int *major, int *minor);

/// Returns 1 and writes the error text when an `mgpu*` or `laCuda*` call
/// failed since the previous query, else 0; the query clears it. The text is
/// that of the first failure since the previous query ("<call> failed:
/// <driver message>"), followed by the number of later failures and the last
/// one's text, if any.
LA_CUDA_RUNTIME_EXPORTED int laCudaLastError(char *message, size_t size);

/// Whether failures are also printed to stderr (1, the default: each kind of
/// failure once, "la-cuda-runtime: <call> failed: <message>") or only kept
/// for laCudaLastError (0).
LA_CUDA_RUNTIME_EXPORTED void laCudaSetErrorPrinting(int enabled);

/// Waits for all work of the default device's context (cuCtxSynchronize).
/// Returns 1 on success; 0 on failure, which is also kept for
/// laCudaLastError (an asynchronous kernel fault shows up here).
LA_CUDA_RUNTIME_EXPORTED int laCudaSynchronize(void);

/// Timing: an event that records time (mgpuEventCreate's events do not).
/// Record it with mgpuEventRecord, wait with mgpuEventSynchronize, free it
/// with mgpuEventDestroy. Returns null when no GPU is available.
LA_CUDA_RUNTIME_EXPORTED void *laCudaTimingEventCreate(void);

/// The time between two recorded, completed timing events in milliseconds.
/// Returns 1 on success, 0 on failure.
LA_CUDA_RUNTIME_EXPORTED int laCudaEventElapsedMs(void *start, void *end,
                                                  float *milliseconds);

/*===----------------------------------------------------------------------===*
 * The functions that MLIR 22.1's gpu-to-llvm lowering (and nvgpu-to-nvvm for
 * TMA descriptors) calls, with the argument types it emits: `index` values as
 * int64_t (intptr_t), handles as pointers. Streams, events, modules and
 * functions are the driver's CUstream, CUevent, CUmodule and CUfunction.
 *===----------------------------------------------------------------------===*/

/// Loads a cubin or fatbin (gpu-module-to-binary format=bin/fatbin).
LA_CUDA_RUNTIME_EXPORTED void *mgpuModuleLoad(void *data, uint64_t size);
/// Loads NUL-terminated PTX (format=isa), JIT-compiling it at optLevel 0..4.
LA_CUDA_RUNTIME_EXPORTED void *mgpuModuleLoadJIT(void *data, int32_t optLevel);
LA_CUDA_RUNTIME_EXPORTED void mgpuModuleUnload(void *module);
LA_CUDA_RUNTIME_EXPORTED void *mgpuModuleGetFunction(void *module,
                                                     const char *name);

/// Launches `function` on `stream`; `params` holds one pointer per kernel
/// argument (paramsCount of them). Dynamic shared memory above 48 KB is
/// opted into with cuFuncSetAttribute. A grid or block with a zero extent
/// launches nothing (no error).
LA_CUDA_RUNTIME_EXPORTED void
mgpuLaunchKernel(void *function, intptr_t gridX, intptr_t gridY, intptr_t gridZ,
                 intptr_t blockX, intptr_t blockY, intptr_t blockZ,
                 int32_t sharedMemBytes, void *stream, void **params,
                 void **extra, size_t paramsCount);
/// The same with thread-block clusters (cuLaunchKernelEx); grid in blocks.
LA_CUDA_RUNTIME_EXPORTED void
mgpuLaunchClusterKernel(void *function, intptr_t clusterX, intptr_t clusterY,
                        intptr_t clusterZ, intptr_t gridX, intptr_t gridY,
                        intptr_t gridZ, intptr_t blockX, intptr_t blockY,
                        intptr_t blockZ, int32_t sharedMemBytes, void *stream,
                        void **params, void **extra);

LA_CUDA_RUNTIME_EXPORTED void *mgpuStreamCreate(void);
LA_CUDA_RUNTIME_EXPORTED void mgpuStreamDestroy(void *stream);
LA_CUDA_RUNTIME_EXPORTED void mgpuStreamSynchronize(void *stream);
LA_CUDA_RUNTIME_EXPORTED void mgpuStreamWaitEvent(void *stream, void *event);

LA_CUDA_RUNTIME_EXPORTED void *mgpuEventCreate(void);
LA_CUDA_RUNTIME_EXPORTED void mgpuEventDestroy(void *event);
LA_CUDA_RUNTIME_EXPORTED void mgpuEventSynchronize(void *event);
LA_CUDA_RUNTIME_EXPORTED void mgpuEventRecord(void *event, void *stream);

/// Device memory (cuMemAlloc), or managed memory when isHostShared != 0
/// (`gpu.alloc host_shared`). A size of 0 gives a null pointer.
LA_CUDA_RUNTIME_EXPORTED void *mgpuMemAlloc(uint64_t sizeBytes, void *stream,
                                            int8_t isHostShared);
LA_CUDA_RUNTIME_EXPORTED void mgpuMemFree(void *ptr, void *stream);
LA_CUDA_RUNTIME_EXPORTED void mgpuMemcpy(void *dst, void *src, size_t sizeBytes,
                                         void *stream);
LA_CUDA_RUNTIME_EXPORTED void mgpuMemset32(void *dst, uint32_t value,
                                           size_t count, void *stream);
LA_CUDA_RUNTIME_EXPORTED void mgpuMemset16(void *dst, uint16_t value,
                                           size_t count, void *stream);

/// Page-locks host memory (gpu.host_register); `descriptor` points to a
/// ranked memref descriptor of the given rank.
LA_CUDA_RUNTIME_EXPORTED void mgpuMemHostRegister(void *ptr,
                                                  uint64_t sizeBytes);
LA_CUDA_RUNTIME_EXPORTED void mgpuMemHostUnregister(void *ptr);
LA_CUDA_RUNTIME_EXPORTED void
mgpuMemHostRegisterMemRef(int64_t rank, void *descriptor,
                          int64_t elementSizeBytes);
LA_CUDA_RUNTIME_EXPORTED void
mgpuMemHostUnregisterMemRef(int64_t rank, void *descriptor,
                            int64_t elementSizeBytes);

/// The device that later calls on this thread use (gpu.set_default_device).
LA_CUDA_RUNTIME_EXPORTED void mgpuSetDefaultDevice(int32_t device);

/// Encodes a TMA descriptor (cuTensorMapEncodeTiled) for the memref that
/// `descriptor` points to (rank `rank`, boxDims[rank] elements per box,
/// outermost first), copies it to device memory and returns that address.
/// The enum arguments are the driver's CUtensorMapDataType, ...Interleave,
/// ...Swizzle, ...L2promotion and ...FloatOOBfill values.
LA_CUDA_RUNTIME_EXPORTED void *mgpuTensorMapEncodeTiledMemref(
    int64_t rank, void *descriptor, int64_t dataType, int64_t interleave,
    int64_t swizzle, int64_t l2Promotion, int64_t oobFill, int64_t *boxDims);

#ifdef __cplusplus
}
#endif

#endif /* LA_C_CUDARUNTIME_H */
