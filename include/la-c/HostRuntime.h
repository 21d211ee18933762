//===- HostRuntime.h - la's host runtime for CPU kernels ----------*- C -*-===//
//
// libla_host_runtime.so: the allocation functions that kernels lowered by
// `la-lower-to-cpu{host-allocator}` call (finalize-memref-to-llvm's generic
// functions `_mlir_memref_to_llvm_alloc` and `_mlir_memref_to_llvm_free`),
// a cache of large freed blocks between calls, and these two functions to
// inspect and empty it.
//
//===----------------------------------------------------------------------===//

#ifndef LA_C_HOSTRUNTIME_H
#define LA_C_HOSTRUNTIME_H

#include <stddef.h>

#define LA_HOST_RUNTIME_EXPORT __attribute__((visibility("default")))

#ifdef __cplusplus
extern "C" {
#endif

/// finalize-memref-to-llvm's generic allocation functions, which kernels
/// lowered with `host-allocator` call for every buffer.
LA_HOST_RUNTIME_EXPORT void *_mlir_memref_to_llvm_alloc(size_t size);
LA_HOST_RUNTIME_EXPORT void _mlir_memref_to_llvm_free(void *block);

/// The bytes of the freed blocks the allocator holds for later calls.
LA_HOST_RUNTIME_EXPORT size_t laHostCachedBytes(void);

/// Returns every block the allocator holds to the system.
LA_HOST_RUNTIME_EXPORT void laHostReleaseCached(void);

#ifdef __cplusplus
}
#endif

#endif // LA_C_HOSTRUNTIME_H
