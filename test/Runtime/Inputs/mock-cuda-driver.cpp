//===- mock-cuda-driver.cpp - a fake libcuda.so.1 for la's runtime tests --===//
//
// Built by test/Runtime/mock-driver.test and loaded through LA_CUDA_DRIVER, so
// that `la-cuda-info --check` takes its GPU path on a machine without one.
// "Device memory" is host memory; the one kernel it runs (on the host) is
// la-cuda-info's la_cuda_info_fill (out[i] = 3 * i + 1 for i < n); launches
// of any other kernel only print their configuration to stderr. It checks what
// a real driver would reject and what la's runtime must get right: a context is
// current for every call and pushes and pops balance, dynamic shared memory
// above 48 KB was opted into, the layouts of the JIT options, of CUlaunchConfig
// with its cluster attributes and of the TMA encoding arguments.
//
//===----------------------------------------------------------------------===//

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

using CUresult = int;
enum : CUresult {
  kSuccess = 0,
  kInvalidValue = 1,
  kInvalidImage = 200,
  kInvalidContext = 201,
  kInvalidHandle = 400,
  kNotFound = 500,
};

struct Context {
  int device;
};
struct Module {
  int magic;
};
struct Function {
  const char *name = "la_cuda_info_fill";
  int maxDynamicShared = 48 * 1024;
  int nonPortableCluster = 0;
};
struct Stream {
  unsigned flags;
};
struct Event {
  unsigned flags;
  bool recorded = false;
};

Context primary = {0};
Function fill;
thread_local std::vector<Context *> contextStack;
constexpr int kOptinSharedMemory = 232448;

bool current() { return !contextStack.empty(); }

struct LaunchAttribute {
  int id;
  char pad[4];
  union {
    char raw[64];
    void *align;
    struct {
      unsigned x, y, z;
    } clusterDim;
    int policy;
  } value;
};

struct LaunchConfig {
  unsigned gridDimX, gridDimY, gridDimZ;
  unsigned blockDimX, blockDimY, blockDimZ;
  unsigned sharedMemBytes;
  Stream *stream;
  LaunchAttribute *attrs;
  unsigned numAttrs;
};

CUresult run(Function *function, const unsigned (&dims)[6], unsigned shared,
             void **params) {
  if (!function || !params)
    return kInvalidHandle;
  if (shared > 48 * 1024 &&
      static_cast<int>(shared) > function->maxDynamicShared)
    return kInvalidValue;
  unsigned threads = dims[0] * dims[1] * dims[2] * dims[3] * dims[4] * dims[5];
  if (function != &fill) {
    std::fprintf(stderr,
                 "mock launch: %s grid %ux%ux%u block %ux%ux%u "
                 "shared %u\n",
                 function->name, dims[0], dims[1], dims[2], dims[3], dims[4],
                 dims[5], shared);
    return kSuccess;
  }
  auto *out = *static_cast<uint32_t **>(params[0]);
  uint32_t n = *static_cast<uint32_t *>(params[1]);
  for (uint32_t i = 0; i < n && i < threads; ++i)
    out[i] = 3 * i + 1;
  return kSuccess;
}

} // namespace

#define EXPORT extern "C" __attribute__((visibility("default")))

EXPORT CUresult cuInit(unsigned flags) {
  return flags == 0 ? kSuccess : kInvalidValue;
}
EXPORT CUresult cuGetErrorString(CUresult error, const char **text) {
  switch (error) {
  case kInvalidValue:
    *text = "mock: invalid argument";
    return kSuccess;
  case kInvalidImage:
    *text = "mock: device kernel image is invalid";
    return kSuccess;
  case kInvalidContext:
    *text = "mock: invalid device context";
    return kSuccess;
  case kInvalidHandle:
    *text = "mock: invalid resource handle";
    return kSuccess;
  default:
    *text = "mock: error";
    return kSuccess;
  }
}
EXPORT CUresult cuGetErrorName(CUresult, const char **text) {
  *text = "MOCK_ERROR";
  return kSuccess;
}
EXPORT CUresult cuDriverGetVersion(int *version) {
  *version = 13000;
  return kSuccess;
}
EXPORT CUresult cuDeviceGetCount(int *count) {
  *count = 1;
  return kSuccess;
}
EXPORT CUresult cuDeviceGet(int *device, int ordinal) {
  if (ordinal != 0)
    return kInvalidValue;
  *device = 0;
  return kSuccess;
}
EXPORT CUresult cuDeviceGetName(char *name, int length, int) {
  std::snprintf(name, length, "Mock GPU");
  return kSuccess;
}
EXPORT CUresult cuDeviceGetAttribute(int *value, int attribute, int) {
  switch (attribute) {
  case 75:
    *value = 9;
    return kSuccess;
  case 76:
    *value = 0;
    return kSuccess;
  case 97:
    *value = kOptinSharedMemory;
    return kSuccess;
  default:
    return kInvalidValue;
  }
}
EXPORT CUresult cuDevicePrimaryCtxRetain(Context **context, int) {
  *context = &primary;
  return kSuccess;
}
EXPORT CUresult cuCtxPushCurrent_v2(Context *context) {
  if (context != &primary)
    return kInvalidContext;
  contextStack.push_back(context);
  return kSuccess;
}
EXPORT CUresult cuCtxPopCurrent_v2(Context **context) {
  if (contextStack.empty())
    return kInvalidContext;
  if (context)
    *context = contextStack.back();
  contextStack.pop_back();
  return kSuccess;
}
EXPORT CUresult cuCtxSynchronize() {
  return current() ? kSuccess : kInvalidContext;
}

EXPORT CUresult cuModuleLoadDataEx(Module **module, const void *image,
                                   unsigned count, int *options,
                                   void **values) {
  if (!current())
    return kInvalidContext;
  char *log = nullptr;
  size_t logSize = 0;
  for (unsigned i = 0; i < count; ++i) {
    if (options[i] == 5)
      log = static_cast<char *>(values[i]);
    else if (options[i] == 6)
      logSize = reinterpret_cast<uintptr_t>(values[i]);
    else if (options[i] == 7 && reinterpret_cast<uintptr_t>(values[i]) > 4)
      return kInvalidValue;
  }
  // PTX, an ELF cubin (la-run's kernels; never run here), or the fake
  // cubin of the tests ("MOCKCUBIN").
  if (std::strncmp(static_cast<const char *>(image), "\x7f" "ELF", 4) &&
      !std::strstr(static_cast<const char *>(image), ".entry") &&
      std::strncmp(static_cast<const char *>(image), "MOCKCUBIN", 9)) {
    if (log && logSize)
      std::snprintf(log, logSize, "mock: no kernel in this image");
    return kInvalidImage;
  }
  *module = new Module{42};
  return kSuccess;
}
EXPORT CUresult cuModuleUnload(Module *module) {
  if (!current())
    return kInvalidContext;
  if (!module || module->magic != 42)
    return kInvalidHandle;
  delete module;
  return kSuccess;
}
EXPORT CUresult cuModuleGetFunction(Function **function, Module *module,
                                    const char *name) {
  if (!current())
    return kInvalidContext;
  if (!module || module->magic != 42)
    return kInvalidHandle;
  if (!std::strcmp(name, "la_cuda_info_fill")) {
    *function = &fill;
    return kSuccess;
  }
  // Any other kernel, kept for the process's lifetime.
  static std::vector<Function *> others;
  for (Function *other : others)
    if (!std::strcmp(other->name, name)) {
      *function = other;
      return kSuccess;
    }
  others.push_back(new Function{strdup(name)});
  *function = others.back();
  return kSuccess;
}
EXPORT CUresult cuFuncSetAttribute(Function *function, int attribute,
                                   int value) {
  if (!function)
    return kInvalidHandle;
  if (attribute == 8 && value >= 0 && value <= kOptinSharedMemory) {
    function->maxDynamicShared = value;
    return kSuccess;
  }
  if (attribute == 14) {
    function->nonPortableCluster = value;
    return kSuccess;
  }
  return kInvalidValue;
}
EXPORT CUresult cuLaunchKernel(Function *function, unsigned gx, unsigned gy,
                               unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shared, Stream *,
                               void **params, void **extra) {
  if (!current())
    return kInvalidContext;
  if (extra)
    return kInvalidValue;
  return run(function, {gx, gy, gz, bx, by, bz}, shared, params);
}
EXPORT CUresult cuLaunchKernelEx(const LaunchConfig *config, Function *function,
                                 void **params, void **extra) {
  if (!current())
    return kInvalidContext;
  if (extra || config->numAttrs != 2 || config->attrs[0].id != 4 ||
      config->attrs[1].id != 5 || config->attrs[1].value.policy != 1)
    return kInvalidValue;
  auto &cluster = config->attrs[0].value.clusterDim;
  if (cluster.x == 0 || cluster.y == 0 || cluster.z == 0 ||
      config->gridDimX % cluster.x || config->gridDimY % cluster.y ||
      config->gridDimZ % cluster.z)
    return kInvalidValue;
  if (cluster.x * cluster.y * cluster.z > 8 && !function->nonPortableCluster)
    return kInvalidValue;
  std::fprintf(stderr, "mock cluster: %ux%ux%u\n", cluster.x, cluster.y,
               cluster.z);
  return run(function,
             {config->gridDimX, config->gridDimY, config->gridDimZ,
              config->blockDimX, config->blockDimY, config->blockDimZ},
             config->sharedMemBytes, params);
}

EXPORT CUresult cuStreamCreate(Stream **stream, unsigned flags) {
  if (!current())
    return kInvalidContext;
  *stream = new Stream{flags};
  return kSuccess;
}
EXPORT CUresult cuStreamDestroy_v2(Stream *stream) {
  if (!current())
    return kInvalidContext;
  delete stream;
  return kSuccess;
}
EXPORT CUresult cuStreamSynchronize(Stream *) {
  return current() ? kSuccess : kInvalidContext;
}
EXPORT CUresult cuStreamWaitEvent(Stream *, Event *event, unsigned flags) {
  if (!current())
    return kInvalidContext;
  return event && flags == 0 ? kSuccess : kInvalidValue;
}
EXPORT CUresult cuEventCreate(Event **event, unsigned flags) {
  if (!current())
    return kInvalidContext;
  *event = new Event{flags};
  return kSuccess;
}
EXPORT CUresult cuEventDestroy_v2(Event *event) {
  if (!current())
    return kInvalidContext;
  delete event;
  return kSuccess;
}
EXPORT CUresult cuEventRecord(Event *event, Stream *) {
  if (!current())
    return kInvalidContext;
  event->recorded = true;
  return kSuccess;
}
EXPORT CUresult cuEventSynchronize(Event *event) {
  if (!current())
    return kInvalidContext;
  return event->recorded ? kSuccess : kInvalidValue;
}
EXPORT CUresult cuEventElapsedTime_v2(float *ms, Event *start, Event *end) {
  if (!current())
    return kInvalidContext;
  // Events made with CU_EVENT_DISABLE_TIMING cannot be timed.
  if ((start->flags | end->flags) & 2 || !start->recorded || !end->recorded)
    return kInvalidHandle;
  *ms = 0.25f;
  return kSuccess;
}

EXPORT CUresult cuMemAlloc_v2(unsigned long long *ptr, size_t size) {
  if (!current())
    return kInvalidContext;
  *ptr = reinterpret_cast<uintptr_t>(
      std::aligned_alloc(256, (size + 255) & ~size_t(255)));
  return kSuccess;
}
EXPORT CUresult cuMemAllocManaged(unsigned long long *ptr, size_t size,
                                  unsigned flags) {
  if (flags != 1)
    return kInvalidValue;
  return cuMemAlloc_v2(ptr, size);
}
EXPORT CUresult cuMemFree_v2(unsigned long long ptr) {
  if (!current())
    return kInvalidContext;
  std::free(reinterpret_cast<void *>(static_cast<uintptr_t>(ptr)));
  return kSuccess;
}
EXPORT CUresult cuMemcpy(unsigned long long dst, unsigned long long src,
                         size_t size) {
  if (!current())
    return kInvalidContext;
  std::memcpy(reinterpret_cast<void *>(static_cast<uintptr_t>(dst)),
              reinterpret_cast<void *>(static_cast<uintptr_t>(src)), size);
  return kSuccess;
}
EXPORT CUresult cuMemcpyAsync(unsigned long long dst, unsigned long long src,
                              size_t size, Stream *) {
  return cuMemcpy(dst, src, size);
}
EXPORT CUresult cuMemsetD32Async(unsigned long long dst, unsigned value,
                                 size_t count, Stream *) {
  if (!current())
    return kInvalidContext;
  auto *out = reinterpret_cast<uint32_t *>(static_cast<uintptr_t>(dst));
  for (size_t i = 0; i < count; ++i)
    out[i] = value;
  return kSuccess;
}
EXPORT CUresult cuMemsetD16Async(unsigned long long dst, unsigned short value,
                                 size_t count, Stream *) {
  if (!current())
    return kInvalidContext;
  auto *out = reinterpret_cast<uint16_t *>(static_cast<uintptr_t>(dst));
  for (size_t i = 0; i < count; ++i)
    out[i] = value;
  return kSuccess;
}
EXPORT CUresult cuMemHostRegister_v2(void *, size_t, unsigned) {
  return current() ? kSuccess : kInvalidContext;
}
EXPORT CUresult cuMemHostUnregister(void *) {
  return current() ? kSuccess : kInvalidContext;
}

/// Accepts exactly what la-cuda-info asks for: a 64x64 f16 row-major memref
/// in 64x64 boxes with 128-byte swizzle.
EXPORT CUresult cuTensorMapEncodeTiled(void *map, int dataType, unsigned rank,
                                       void *address, const uint64_t *globalDim,
                                       const uint64_t *globalStrides,
                                       const unsigned *boxDim,
                                       const unsigned *elementStrides,
                                       int interleave, int swizzle,
                                       int l2Promotion, int oobFill) {
  if (!current())
    return kInvalidContext;
  if (reinterpret_cast<uintptr_t>(map) % 64 ||
      reinterpret_cast<uintptr_t>(address) % 16 || dataType != 6 || rank != 2 ||
      globalDim[0] != 64 || globalDim[1] != 64 || globalStrides[0] != 128 ||
      boxDim[0] != 64 || boxDim[1] != 64 || elementStrides[0] != 1 ||
      elementStrides[1] != 1 || interleave != 0 || swizzle != 3 ||
      l2Promotion != 0 || oobFill != 0)
    return kInvalidValue;
  std::memset(map, 0x5a, 128);
  return kSuccess;
}
