//===- HostAllocator.cpp - a caching allocator for CPU kernels ------------===//
//
// Kernels lowered with `la-lower-to-cpu{host-allocator}` allocate their
// buffers through `_mlir_memref_to_llvm_alloc` / `_mlir_memref_to_llvm_free`
// (finalize-memref-to-llvm's generic functions), defined here. A backward
// holds tens of temporaries of T * H * K floats; glibc serves such blocks
// with mmap (or returns them to the OS by trimming) and every call then
// faults and clears its pages again, about a quarter of a backward's time.
// This allocator keeps freed blocks of at least kMinCachedBytes, keyed by
// their exact size (a kernel called again asks for the same sizes), up to
// a limit on the bytes it holds ($LA_HOST_CACHE_BYTES, default 2 GiB);
// smaller blocks go to malloc directly.
//
//===----------------------------------------------------------------------===//

#include "la-c/HostRuntime.h"

#include <cstdlib>
#include <mutex>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <unordered_map>
#include <vector>

namespace {
constexpr size_t kMinCachedBytes = size_t(1) << 20;
constexpr size_t kDefaultLimitBytes = size_t(2) << 30;

struct BlockCache {
  std::mutex mutex;
  /// The cached blocks handed out, with their sizes.
  std::unordered_map<void *, size_t> live;
  /// The free blocks by size.
  std::unordered_map<size_t, std::vector<void *>> free;
  size_t freeBytes = 0;
  size_t limitBytes = kDefaultLimitBytes;

  BlockCache() {
    if (const char *limit = std::getenv("LA_HOST_CACHE_BYTES")) {
      char *end = nullptr;
      unsigned long long value = std::strtoull(limit, &end, 10);
      if (end != limit && *end == '\0')
        limitBytes = static_cast<size_t>(value);
    }
  }

  /// Frees every cached block; the caller holds the mutex.
  void releaseLocked() {
    for (auto &entry : free)
      for (void *block : entry.second)
        std::free(block);
    free.clear();
    freeBytes = 0;
  }
};

/// Never destroyed: a kernel may run while static objects are destroyed.
BlockCache &cache() {
  static BlockCache *instance = new BlockCache();
  return *instance;
}
} // namespace

extern "C" LA_HOST_RUNTIME_EXPORT void *
_mlir_memref_to_llvm_alloc(size_t size) {
  if (size < kMinCachedBytes)
    return std::malloc(size);
  BlockCache &c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto found = c.free.find(size);
    if (found != c.free.end() && !found->second.empty()) {
      void *block = found->second.back();
      found->second.pop_back();
      c.freeBytes -= size;
      c.live.emplace(block, size);
      return block;
    }
  }
  void *block = std::malloc(size);
  if (!block)
    return nullptr;
  std::lock_guard<std::mutex> lock(c.mutex);
  c.live.emplace(block, size);
  return block;
}

extern "C" LA_HOST_RUNTIME_EXPORT void _mlir_memref_to_llvm_free(void *block) {
  if (!block)
    return;
#if defined(__GLIBC__)
  // Small blocks (a decode kernel frees tens per head and sequence) never
  // enter the cache: their usable size tells them apart without the lock.
  if (malloc_usable_size(block) < kMinCachedBytes) {
    std::free(block);
    return;
  }
#endif
  BlockCache &c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto found = c.live.find(block);
    if (found != c.live.end()) {
      size_t size = found->second;
      c.live.erase(found);
      if (c.freeBytes + size <= c.limitBytes) {
        c.free[size].push_back(block);
        c.freeBytes += size;
        return;
      }
    }
  }
  std::free(block);
}

extern "C" LA_HOST_RUNTIME_EXPORT size_t laHostCachedBytes(void) {
  BlockCache &c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.freeBytes;
}

extern "C" LA_HOST_RUNTIME_EXPORT void laHostReleaseCached(void) {
  BlockCache &c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.releaseLocked();
}
