//===- CudaRuntime.cpp - mgpu* functions on the CUDA driver API -----------===//
//
// The host side of MLIR's GPU lowering: `gpu-to-llvm` turns gpu.alloc,
// gpu.memcpy, gpu.launch_func, ... into calls of `mgpu*` functions, and the
// translation to LLVM IR loads each gpu.binary with mgpuModuleLoad (cubin,
// fatbin) or mgpuModuleLoadJIT (PTX) from a global constructor. This file
// implements them on the CUDA driver API, which it loads with dlopen: the
// library needs neither cuda.h nor libcuda to build, and runs (returning null
// handles) where there is no driver or no GPU.
//
// Every call makes the primary context of the default device current for its
// duration (push/pop), so that it works from any thread and leaves the
// caller's context alone. A failing driver call is printed once per kind of
// failure ("la-cuda-runtime: <call> failed: <message>") and kept for
// laCudaLastError.
//
//===----------------------------------------------------------------------===//

#include "la-c/CudaRuntime.h"

#include <dlfcn.h>

#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>

namespace {

//===----------------------------------------------------------------------===//
// The part of the driver API this file uses, declared here (values as in
// CUDA 12/13's cuda.h).
//===----------------------------------------------------------------------===//

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctxOpaque *;
using CUmodule = struct CUmodOpaque *;
using CUfunction = struct CUfuncOpaque *;
using CUstream = struct CUstreamOpaque *;
using CUevent = struct CUeventOpaque *;

constexpr CUresult kSuccess = 0;
constexpr CUresult kDeinitialized = 4;
constexpr int kDeviceAttrMaxSharedMemoryPerBlockOptin = 97;
constexpr int kDeviceAttrComputeCapabilityMajor = 75;
constexpr int kDeviceAttrComputeCapabilityMinor = 76;
constexpr int kFuncAttrMaxDynamicSharedSizeBytes = 8;
constexpr int kFuncAttrNonPortableClusterSizeAllowed = 14;
constexpr int kJitErrorLogBuffer = 5;
constexpr int kJitErrorLogBufferSizeBytes = 6;
constexpr int kJitOptimizationLevel = 7;
constexpr unsigned kStreamNonBlocking = 1;
constexpr unsigned kEventDefault = 0;
constexpr unsigned kEventDisableTiming = 2;
constexpr unsigned kMemAttachGlobal = 1;
constexpr int kLaunchAttrClusterDimension = 4;
constexpr int kLaunchAttrClusterSchedulingPolicy = 5;
constexpr int kClusterSchedulingPolicySpread = 1;
/// Dynamic shared memory a kernel gets without opting in.
constexpr int32_t kDefaultSharedMemoryLimit = 48 * 1024;

/// CUlaunchAttribute: a 4-byte id, padding, a 64-byte union.
struct LaunchAttribute {
  int id;
  char pad[4];
  union {
    char raw[64];
    void *align;
    struct {
      unsigned x, y, z;
    } clusterDim;
    int clusterSchedulingPolicy;
  } value;
};
static_assert(sizeof(LaunchAttribute) == 72, "CUlaunchAttribute layout");

/// CUlaunchConfig.
struct LaunchConfig {
  unsigned gridDimX, gridDimY, gridDimZ;
  unsigned blockDimX, blockDimY, blockDimZ;
  unsigned sharedMemBytes;
  CUstream stream;
  LaunchAttribute *attrs;
  unsigned numAttrs;
};

/// CUtensorMap: 128 opaque bytes, 128-byte aligned since CUDA 13 (64 before).
struct alignas(128) TensorMap {
  uint64_t opaque[16];
};

/// A ranked memref descriptor: {allocated, aligned, offset} followed by
/// rank sizes and rank strides (in elements).
struct MemRefHeader {
  char *allocated;
  char *aligned;
  int64_t offset;
};

const int64_t *memrefSizes(const MemRefHeader *descriptor) {
  return reinterpret_cast<const int64_t *>(descriptor + 1);
}

/// The driver entry points, resolved with dlsym.
struct DriverApi {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuGetErrorString)(CUresult, const char **);
  CUresult (*cuGetErrorName)(CUresult, const char **);
  CUresult (*cuDriverGetVersion)(int *);
  CUresult (*cuDeviceGetCount)(int *);
  CUresult (*cuDeviceGet)(CUdevice *, int);
  CUresult (*cuDeviceGetName)(char *, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*cuCtxPushCurrent)(CUcontext);
  CUresult (*cuCtxPopCurrent)(CUcontext *);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuModuleLoadDataEx)(CUmodule *, const void *, unsigned, int *,
                                 void **);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, unsigned, CUstream, void **,
                             void **);
  CUresult (*cuStreamCreate)(CUstream *, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned);
  CUresult (*cuEventCreate)(CUevent *, unsigned);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
  CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
  CUresult (*cuMemAllocManaged)(CUdeviceptr *, size_t, unsigned);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpy)(CUdeviceptr, CUdeviceptr, size_t);
  CUresult (*cuMemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemsetD32Async)(CUdeviceptr, unsigned, size_t, CUstream);
  CUresult (*cuMemsetD16Async)(CUdeviceptr, unsigned short, size_t, CUstream);
  CUresult (*cuMemHostRegister)(void *, size_t, unsigned);
  CUresult (*cuMemHostUnregister)(void *);
  // Optional (newer drivers): used only by cluster launches and TMA.
  CUresult (*cuLaunchKernelEx)(const LaunchConfig *, CUfunction, void **,
                               void **);
  CUresult (*cuTensorMapEncodeTiled)(TensorMap *, int, unsigned, void *,
                                     const uint64_t *, const uint64_t *,
                                     const unsigned *, const unsigned *, int,
                                     int, int, int);
};

constexpr int kMaxDevices = 64;
constexpr unsigned kMaxPrintedErrors = 16;

/// The process-wide state. Allocated once and never freed, so that module
/// unloads from global destructors that run after this file's static
/// destructors still find it.
struct Runtime {
  std::once_flag loadOnce;
  void *library = nullptr;
  DriverApi api = {};
  bool available = false;
  std::string unavailableReason;
  int deviceCount = 0;

  std::mutex mutex; // guards everything below
  CUcontext contexts[kMaxDevices] = {};
  int sharedMemoryOptin[kMaxDevices] = {};
  bool printErrors = true;
  bool printedUnavailable = false;
  /// The kinds of failure printed so far (at most kMaxPrintedErrors).
  struct {
    char key[64];
    CUresult code;
  } printed[kMaxPrintedErrors];
  unsigned printedCount = 0;
  std::string firstError, lastError;
  unsigned errorCount = 0;
};

Runtime &runtime() {
  static Runtime *state = new Runtime;
  return *state;
}

thread_local int32_t defaultDevice = 0;

void copyOut(const std::string &text, char *buffer, size_t size) {
  if (!buffer || size == 0)
    return;
  size_t length = std::min(text.size(), size - 1);
  std::memcpy(buffer, text.data(), length);
  buffer[length] = '\0';
}

std::string format(const char *fmt, ...) {
  char buffer[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buffer, sizeof(buffer), fmt, args);
  va_end(args);
  return buffer;
}

/// The driver's text for `result` ("out of memory"), or its number.
std::string errorText(CUresult result) {
  Runtime &rt = runtime();
  const char *text = nullptr;
  if (rt.api.cuGetErrorString &&
      rt.api.cuGetErrorString(result, &text) == kSuccess && text)
    return text;
  if (rt.api.cuGetErrorName &&
      rt.api.cuGetErrorName(result, &text) == kSuccess && text)
    return text;
  // Drivers that cannot describe their errors (the toolkit's stub libcuda).
  switch (result) {
  case 3:
    return "CUDA error 3 (CUDA_ERROR_NOT_INITIALIZED)";
  case 34:
    return "CUDA error 34 (CUDA_ERROR_STUB_LIBRARY: the CUDA toolkit's stub "
           "libcuda was loaded, not a real driver)";
  case 35:
    return "CUDA error 35 (CUDA_ERROR_INSUFFICIENT_DRIVER)";
  case 100:
    return "CUDA error 100 (CUDA_ERROR_NO_DEVICE)";
  default:
    return format("CUDA error %d", result);
  }
}

/// Keeps `message` for laCudaLastError and prints it unless a failure of the
/// same kind (`key`, `code`) was printed before.
void recordError(const std::string &message, const std::string &key,
                 CUresult code) {
  Runtime &rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (rt.errorCount++ == 0)
    rt.firstError = message;
  rt.lastError = message;
  if (!rt.printErrors || rt.printedCount > kMaxPrintedErrors)
    return;
  char shortKey[sizeof(rt.printed[0].key)];
  std::snprintf(shortKey, sizeof(shortKey), "%s", key.c_str());
  for (unsigned i = 0; i < rt.printedCount; ++i)
    if (rt.printed[i].code == code && !std::strcmp(rt.printed[i].key, shortKey))
      return;
  if (rt.printedCount == kMaxPrintedErrors) {
    ++rt.printedCount;
    std::fprintf(stderr, "la-cuda-runtime: further errors are not printed\n");
    return;
  }
  std::memcpy(rt.printed[rt.printedCount].key, shortKey, sizeof(shortKey));
  rt.printed[rt.printedCount++].code = code;
  std::fprintf(stderr, "la-cuda-runtime: %s\n", message.c_str());
}

/// Records a failed driver call; returns whether `result` is success.
bool check(CUresult result, const char *call) {
  if (result == kSuccess)
    return true;
  // Module unloads and frees from global destructors can run after the
  // driver has shut down at exit; there is nothing left to report then.
  if (result == kDeinitialized)
    return false;
  recordError(format("%s failed: %s", call, errorText(result).c_str()), call,
              result);
  return false;
}

/// Records a misuse found before calling the driver.
void fail(const char *key, const std::string &message) {
  recordError(message, key, -1);
}

template <typename Fn>
bool resolve(Fn &slot, void *library, const char *name,
             const char *fallback = nullptr) {
  void *symbol = dlsym(library, name);
  if (!symbol && fallback)
    symbol = dlsym(library, fallback);
  slot = reinterpret_cast<Fn>(symbol);
  return symbol != nullptr;
}

void loadDriver(Runtime &rt) {
  const char *override = std::getenv("LA_CUDA_DRIVER");
  const char *name = override && *override ? override : "libcuda.so.1";
  dlerror();
  rt.library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!rt.library) {
    const char *why = dlerror();
    rt.unavailableReason =
        format("%s not found: %s", name, why ? why : "unknown error");
    return;
  }

  DriverApi &api = rt.api;
  const char *missing = nullptr;
  auto need = [&](bool found, const char *symbol) {
    if (!found && !missing)
      missing = symbol;
  };
  void *lib = rt.library;
  resolve(api.cuGetErrorName, lib, "cuGetErrorName");
  need(resolve(api.cuInit, lib, "cuInit"), "cuInit");
  need(resolve(api.cuGetErrorString, lib, "cuGetErrorString"),
       "cuGetErrorString");
  need(resolve(api.cuDriverGetVersion, lib, "cuDriverGetVersion"),
       "cuDriverGetVersion");
  need(resolve(api.cuDeviceGetCount, lib, "cuDeviceGetCount"),
       "cuDeviceGetCount");
  need(resolve(api.cuDeviceGet, lib, "cuDeviceGet"), "cuDeviceGet");
  need(resolve(api.cuDeviceGetName, lib, "cuDeviceGetName"), "cuDeviceGetName");
  need(resolve(api.cuDeviceGetAttribute, lib, "cuDeviceGetAttribute"),
       "cuDeviceGetAttribute");
  need(resolve(api.cuDevicePrimaryCtxRetain, lib, "cuDevicePrimaryCtxRetain"),
       "cuDevicePrimaryCtxRetain");
  need(resolve(api.cuCtxPushCurrent, lib, "cuCtxPushCurrent_v2",
               "cuCtxPushCurrent"),
       "cuCtxPushCurrent_v2");
  need(resolve(api.cuCtxPopCurrent, lib, "cuCtxPopCurrent_v2",
               "cuCtxPopCurrent"),
       "cuCtxPopCurrent_v2");
  need(resolve(api.cuCtxSynchronize, lib, "cuCtxSynchronize"),
       "cuCtxSynchronize");
  need(resolve(api.cuModuleLoadDataEx, lib, "cuModuleLoadDataEx"),
       "cuModuleLoadDataEx");
  need(resolve(api.cuModuleUnload, lib, "cuModuleUnload"), "cuModuleUnload");
  need(resolve(api.cuModuleGetFunction, lib, "cuModuleGetFunction"),
       "cuModuleGetFunction");
  need(resolve(api.cuFuncSetAttribute, lib, "cuFuncSetAttribute"),
       "cuFuncSetAttribute");
  need(resolve(api.cuLaunchKernel, lib, "cuLaunchKernel"), "cuLaunchKernel");
  need(resolve(api.cuStreamCreate, lib, "cuStreamCreate"), "cuStreamCreate");
  need(resolve(api.cuStreamDestroy, lib, "cuStreamDestroy_v2",
               "cuStreamDestroy"),
       "cuStreamDestroy_v2");
  need(resolve(api.cuStreamSynchronize, lib, "cuStreamSynchronize"),
       "cuStreamSynchronize");
  need(resolve(api.cuStreamWaitEvent, lib, "cuStreamWaitEvent"),
       "cuStreamWaitEvent");
  need(resolve(api.cuEventCreate, lib, "cuEventCreate"), "cuEventCreate");
  need(resolve(api.cuEventDestroy, lib, "cuEventDestroy_v2", "cuEventDestroy"),
       "cuEventDestroy_v2");
  need(resolve(api.cuEventRecord, lib, "cuEventRecord"), "cuEventRecord");
  need(resolve(api.cuEventSynchronize, lib, "cuEventSynchronize"),
       "cuEventSynchronize");
  need(resolve(api.cuEventElapsedTime, lib, "cuEventElapsedTime_v2",
               "cuEventElapsedTime"),
       "cuEventElapsedTime");
  need(resolve(api.cuMemAlloc, lib, "cuMemAlloc_v2"), "cuMemAlloc_v2");
  need(resolve(api.cuMemAllocManaged, lib, "cuMemAllocManaged"),
       "cuMemAllocManaged");
  need(resolve(api.cuMemFree, lib, "cuMemFree_v2"), "cuMemFree_v2");
  need(resolve(api.cuMemcpy, lib, "cuMemcpy"), "cuMemcpy");
  need(resolve(api.cuMemcpyAsync, lib, "cuMemcpyAsync"), "cuMemcpyAsync");
  need(resolve(api.cuMemsetD32Async, lib, "cuMemsetD32Async"),
       "cuMemsetD32Async");
  need(resolve(api.cuMemsetD16Async, lib, "cuMemsetD16Async"),
       "cuMemsetD16Async");
  need(resolve(api.cuMemHostRegister, lib, "cuMemHostRegister_v2",
               "cuMemHostRegister"),
       "cuMemHostRegister_v2");
  need(resolve(api.cuMemHostUnregister, lib, "cuMemHostUnregister"),
       "cuMemHostUnregister");
  resolve(api.cuLaunchKernelEx, lib, "cuLaunchKernelEx");
  resolve(api.cuTensorMapEncodeTiled, lib, "cuTensorMapEncodeTiled");
  if (missing) {
    rt.unavailableReason =
        format("%s does not export %s (driver too old?)", name, missing);
    return;
  }

  CUresult result = api.cuInit(0);
  if (result != kSuccess) {
    rt.unavailableReason =
        format("cuInit failed: %s", errorText(result).c_str());
    return;
  }
  result = api.cuDeviceGetCount(&rt.deviceCount);
  if (result != kSuccess) {
    rt.unavailableReason =
        format("cuDeviceGetCount failed: %s", errorText(result).c_str());
    return;
  }
  if (rt.deviceCount <= 0) {
    rt.unavailableReason = "the CUDA driver found no device";
    return;
  }
  rt.available = true;
}

Runtime &loadedRuntime() {
  Runtime &rt = runtime();
  std::call_once(rt.loadOnce, loadDriver, std::ref(rt));
  return rt;
}

/// Whether the driver and a device are there; if not, records (and prints
/// once) why, on behalf of `call`.
bool requireDriver(const char *call) {
  Runtime &rt = loadedRuntime();
  if (rt.available)
    return true;
  std::string message = format("%s: no CUDA driver/GPU available (%s)", call,
                               rt.unavailableReason.c_str());
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (rt.errorCount++ == 0)
    rt.firstError = message;
  rt.lastError = message;
  if (rt.printErrors && !rt.printedUnavailable) {
    rt.printedUnavailable = true;
    std::fprintf(stderr,
                 "la-cuda-runtime: no CUDA driver/GPU available: %s; GPU "
                 "calls do nothing and return null handles\n",
                 rt.unavailableReason.c_str());
  }
  return false;
}

/// The primary context of `ordinal`, retained on first use (never released:
/// it lives as long as the process).
CUcontext primaryContext(int ordinal) {
  Runtime &rt = runtime();
  if (ordinal < 0 || ordinal >= rt.deviceCount || ordinal >= kMaxDevices) {
    fail("device", format("device %d does not exist (%d devices)", ordinal,
                          rt.deviceCount));
    return nullptr;
  }
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    if (rt.contexts[ordinal])
      return rt.contexts[ordinal];
  }
  CUdevice device = 0;
  CUcontext context = nullptr;
  if (!check(rt.api.cuDeviceGet(&device, ordinal), "cuDeviceGet") ||
      !check(rt.api.cuDevicePrimaryCtxRetain(&context, device),
             "cuDevicePrimaryCtxRetain"))
    return nullptr;
  int optin = 0;
  if (rt.api.cuDeviceGetAttribute(
          &optin, kDeviceAttrMaxSharedMemoryPerBlockOptin, device) != kSuccess)
    optin = 0;
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (!rt.contexts[ordinal]) {
    rt.contexts[ordinal] = context;
    rt.sharedMemoryOptin[ordinal] = optin;
  }
  return rt.contexts[ordinal];
}

/// Makes the default device's primary context current for its lifetime.
/// ok() is false (and the failure recorded) when there is no driver or the
/// context cannot be made current.
class ScopedContext {
public:
  explicit ScopedContext(const char *call) {
    if (!requireDriver(call))
      return;
    CUcontext context = primaryContext(defaultDevice);
    if (!context)
      return;
    pushed = check(runtime().api.cuCtxPushCurrent(context), "cuCtxPushCurrent");
  }
  ~ScopedContext() {
    if (pushed) {
      CUcontext previous = nullptr;
      check(runtime().api.cuCtxPopCurrent(&previous), "cuCtxPopCurrent");
    }
  }
  ScopedContext(const ScopedContext &) = delete;
  ScopedContext &operator=(const ScopedContext &) = delete;

  bool ok() const { return pushed; }
  const DriverApi &api() const { return runtime().api; }

private:
  bool pushed = false;
};

CUdeviceptr devicePointer(const void *ptr) {
  return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(ptr));
}

/// Checks and narrows the launch dimensions. Returns false (after recording
/// why) when one is negative or too large; `empty` is set when one is zero,
/// a launch of no blocks, which does nothing.
bool launchDims(const char *call, const intptr_t (&in)[6], unsigned (&out)[6],
                bool &empty) {
  empty = false;
  for (int i = 0; i < 6; ++i) {
    if (in[i] < 0 || static_cast<uint64_t>(in[i]) > UINT32_MAX) {
      fail(call, format("%s: invalid launch dimensions grid (%" PRIdPTR
                        ", %" PRIdPTR ", %" PRIdPTR "), block (%" PRIdPTR
                        ", %" PRIdPTR ", %" PRIdPTR ")",
                        call, in[0], in[1], in[2], in[3], in[4], in[5]));
      return false;
    }
    out[i] = static_cast<unsigned>(in[i]);
    empty |= in[i] == 0;
  }
  return true;
}

/// Opts `function` into `bytes` of dynamic shared memory when that is more
/// than the default 48 KB; false (recorded) when the device allows less.
bool setSharedMemory(const char *call, const ScopedContext &context,
                     CUfunction function, int32_t bytes) {
  if (bytes < 0) {
    fail(call, format("%s: negative dynamic shared memory size %d", call,
                      static_cast<int>(bytes)));
    return false;
  }
  if (bytes <= kDefaultSharedMemoryLimit)
    return true;
  Runtime &rt = runtime();
  int optin;
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    optin = rt.sharedMemoryOptin[defaultDevice];
  }
  if (optin > 0 && bytes > optin) {
    fail(call,
         format("%s: %d bytes of dynamic shared memory requested, device %d "
                "allows at most %d per block",
                call, static_cast<int>(bytes), defaultDevice, optin));
    return false;
  }
  return check(context.api().cuFuncSetAttribute(
                   function, kFuncAttrMaxDynamicSharedSizeBytes, bytes),
               "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
}

CUmodule loadModule(const char *call, const void *data, int optLevel) {
  ScopedContext context(call);
  if (!context.ok())
    return nullptr;
  if (!data) {
    fail(call, format("%s: null module image", call));
    return nullptr;
  }
  char log[8192] = {0};
  int options[3] = {kJitErrorLogBuffer, kJitErrorLogBufferSizeBytes,
                    kJitOptimizationLevel};
  void *values[3] = {log, reinterpret_cast<void *>(sizeof(log)),
                     reinterpret_cast<void *>(
                         static_cast<intptr_t>(std::clamp(optLevel, 0, 4)))};
  CUmodule module = nullptr;
  CUresult result = context.api().cuModuleLoadDataEx(
      &module, data, optLevel < 0 ? 2u : 3u, options, values);
  if (result == kSuccess)
    return module;
  std::string message =
      format("%s failed: %s", call, errorText(result).c_str());
  if (log[0])
    message += std::string(": ") + log;
  recordError(message, call, result);
  return nullptr;
}

/// The element sizes of CUtensorMapDataType 0..12 (uint8 ... tfloat32_ftz).
constexpr int kTensorMapElementBytes[] = {1, 2, 4, 4, 8, 8, 2,
                                          4, 8, 2, 4, 4, 4};

/// The number of elements a strided memref spans from its first element.
uint64_t spannedElements(int64_t rank, const MemRefHeader *descriptor) {
  const int64_t *sizes = memrefSizes(descriptor);
  const int64_t *strides = sizes + rank;
  uint64_t last = 0;
  for (int64_t i = 0; i < rank; ++i) {
    if (sizes[i] <= 0)
      return 0;
    last += static_cast<uint64_t>(sizes[i] - 1) *
            static_cast<uint64_t>(strides[i] < 0 ? -strides[i] : strides[i]);
  }
  return last + 1;
}

} // namespace

//===----------------------------------------------------------------------===//
// la's own functions
//===----------------------------------------------------------------------===//

extern "C" int laCudaAvailable(char *message, size_t size) {
  Runtime &rt = loadedRuntime();
  copyOut(rt.available ? std::string() : rt.unavailableReason, message, size);
  return rt.available ? 1 : 0;
}

extern "C" int laCudaComputeCapability(int *major, int *minor) {
  Runtime &rt = loadedRuntime();
  if (!rt.available)
    return 0;
  CUdevice device = 0;
  int values[2] = {0, 0};
  if (!check(rt.api.cuDeviceGet(&device, defaultDevice), "cuDeviceGet") ||
      !check(rt.api.cuDeviceGetAttribute(
                 &values[0], kDeviceAttrComputeCapabilityMajor, device),
             "cuDeviceGetAttribute") ||
      !check(rt.api.cuDeviceGetAttribute(
                 &values[1], kDeviceAttrComputeCapabilityMinor, device),
             "cuDeviceGetAttribute"))
    return 0;
  if (major)
    *major = values[0];
  if (minor)
    *minor = values[1];
  return 1;
}

extern "C" int laCudaDeviceName(char *name, size_t size) {
  Runtime &rt = loadedRuntime();
  if (!rt.available) {
    copyOut(rt.unavailableReason, name, size);
    return 0;
  }
  CUdevice device = 0;
  char text[256] = {0};
  int major = 0, minor = 0;
  if (!check(rt.api.cuDeviceGet(&device, defaultDevice), "cuDeviceGet") ||
      !check(rt.api.cuDeviceGetName(text, sizeof(text) - 1, device),
             "cuDeviceGetName") ||
      !laCudaComputeCapability(&major, &minor)) {
    copyOut("cannot query the device", name, size);
    return 0;
  }
  copyOut(format("%s (sm_%d%d)", text, major, minor), name, size);
  return 1;
}

extern "C" int laCudaLastError(char *message, size_t size) {
  Runtime &rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (rt.errorCount == 0) {
    copyOut("", message, size);
    return 0;
  }
  std::string text = rt.firstError;
  if (rt.errorCount > 1)
    text += format(" (and %u later failures, the last: %s)", rt.errorCount - 1,
                   rt.lastError.c_str());
  copyOut(text, message, size);
  rt.errorCount = 0;
  rt.firstError.clear();
  rt.lastError.clear();
  return 1;
}

extern "C" void laCudaSetErrorPrinting(int enabled) {
  Runtime &rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  rt.printErrors = enabled != 0;
}

extern "C" int laCudaSynchronize(void) {
  ScopedContext context("laCudaSynchronize");
  if (!context.ok())
    return 0;
  return check(context.api().cuCtxSynchronize(), "cuCtxSynchronize") ? 1 : 0;
}

extern "C" void *laCudaTimingEventCreate(void) {
  ScopedContext context("laCudaTimingEventCreate");
  if (!context.ok())
    return nullptr;
  CUevent event = nullptr;
  check(context.api().cuEventCreate(&event, kEventDefault), "cuEventCreate");
  return event;
}

extern "C" int laCudaEventElapsedMs(void *start, void *end,
                                    float *milliseconds) {
  ScopedContext context("laCudaEventElapsedMs");
  if (!context.ok())
    return 0;
  if (!start || !end || !milliseconds) {
    fail("laCudaEventElapsedMs", "laCudaEventElapsedMs: null argument");
    return 0;
  }
  return check(context.api().cuEventElapsedTime(milliseconds,
                                                static_cast<CUevent>(start),
                                                static_cast<CUevent>(end)),
               "cuEventElapsedTime")
             ? 1
             : 0;
}

//===----------------------------------------------------------------------===//
// Modules and launches
//===----------------------------------------------------------------------===//

extern "C" void *mgpuModuleLoad(void *data, uint64_t /*size*/) {
  // A cubin or fatbin carries its own size; JIT options are ignored for it.
  return loadModule("mgpuModuleLoad", data, /*optLevel=*/-1);
}

extern "C" void *mgpuModuleLoadJIT(void *data, int32_t optLevel) {
  return loadModule("mgpuModuleLoadJIT", data, optLevel);
}

extern "C" void mgpuModuleUnload(void *module) {
  // A null module failed to load; that has been reported.
  if (!module || !loadedRuntime().available)
    return;
  ScopedContext context("mgpuModuleUnload");
  if (context.ok())
    check(context.api().cuModuleUnload(static_cast<CUmodule>(module)),
          "cuModuleUnload");
}

extern "C" void *mgpuModuleGetFunction(void *module, const char *name) {
  ScopedContext context("mgpuModuleGetFunction");
  if (!context.ok())
    return nullptr;
  if (!module || !name) {
    fail("mgpuModuleGetFunction",
         format("mgpuModuleGetFunction: no module to take '%s' from (its "
                "module failed to load)",
                name ? name : "<null>"));
    return nullptr;
  }
  CUfunction function = nullptr;
  CUresult result = context.api().cuModuleGetFunction(
      &function, static_cast<CUmodule>(module), name);
  if (result != kSuccess) {
    recordError(format("cuModuleGetFunction('%s') failed: %s", name,
                       errorText(result).c_str()),
                "cuModuleGetFunction", result);
    return nullptr;
  }
  return function;
}

extern "C" void mgpuLaunchKernel(void *function, intptr_t gridX, intptr_t gridY,
                                 intptr_t gridZ, intptr_t blockX,
                                 intptr_t blockY, intptr_t blockZ,
                                 int32_t sharedMemBytes, void *stream,
                                 void **params, void **extra,
                                 size_t /*paramsCount*/) {
  const char *call = "mgpuLaunchKernel";
  ScopedContext context(call);
  if (!context.ok())
    return;
  if (!function) {
    fail(call, "mgpuLaunchKernel: no kernel to launch (loading its module or "
               "looking it up failed)");
    return;
  }
  unsigned dims[6];
  bool empty;
  if (!launchDims(call, {gridX, gridY, gridZ, blockX, blockY, blockZ}, dims,
                  empty) ||
      empty)
    return;
  auto *fn = static_cast<CUfunction>(function);
  if (!setSharedMemory(call, context, fn, sharedMemBytes))
    return;
  check(context.api().cuLaunchKernel(
            fn, dims[0], dims[1], dims[2], dims[3], dims[4], dims[5],
            static_cast<unsigned>(sharedMemBytes),
            static_cast<CUstream>(stream), params, extra),
        "cuLaunchKernel");
}

extern "C" void mgpuLaunchClusterKernel(void *function, intptr_t clusterX,
                                        intptr_t clusterY, intptr_t clusterZ,
                                        intptr_t gridX, intptr_t gridY,
                                        intptr_t gridZ, intptr_t blockX,
                                        intptr_t blockY, intptr_t blockZ,
                                        int32_t sharedMemBytes, void *stream,
                                        void **params, void **extra) {
  const char *call = "mgpuLaunchClusterKernel";
  ScopedContext context(call);
  if (!context.ok())
    return;
  if (!context.api().cuLaunchKernelEx) {
    fail(call, "mgpuLaunchClusterKernel: the CUDA driver has no "
               "cuLaunchKernelEx (CUDA 12 or newer is needed)");
    return;
  }
  if (!function) {
    fail(call, "mgpuLaunchClusterKernel: no kernel to launch (loading its "
               "module or looking it up failed)");
    return;
  }
  unsigned dims[6], cluster[6];
  bool empty, emptyCluster;
  if (!launchDims(call, {gridX, gridY, gridZ, blockX, blockY, blockZ}, dims,
                  empty) ||
      !launchDims(call, {clusterX, clusterY, clusterZ, 1, 1, 1}, cluster,
                  emptyCluster) ||
      empty)
    return;
  auto *fn = static_cast<CUfunction>(function);
  if (!setSharedMemory(call, context, fn, sharedMemBytes))
    return;
  if (static_cast<uint64_t>(cluster[0]) * cluster[1] * cluster[2] > 8 &&
      !check(context.api().cuFuncSetAttribute(
                 fn, kFuncAttrNonPortableClusterSizeAllowed, 1),
             "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)"))
    return;
  LaunchAttribute attrs[2];
  std::memset(attrs, 0, sizeof(attrs));
  attrs[0].id = kLaunchAttrClusterDimension;
  attrs[0].value.clusterDim.x = cluster[0];
  attrs[0].value.clusterDim.y = cluster[1];
  attrs[0].value.clusterDim.z = cluster[2];
  attrs[1].id = kLaunchAttrClusterSchedulingPolicy;
  attrs[1].value.clusterSchedulingPolicy = kClusterSchedulingPolicySpread;
  LaunchConfig config;
  std::memset(&config, 0, sizeof(config));
  config.gridDimX = dims[0];
  config.gridDimY = dims[1];
  config.gridDimZ = dims[2];
  config.blockDimX = dims[3];
  config.blockDimY = dims[4];
  config.blockDimZ = dims[5];
  config.sharedMemBytes = static_cast<unsigned>(sharedMemBytes);
  config.stream = static_cast<CUstream>(stream);
  config.attrs = attrs;
  config.numAttrs = 2;
  check(context.api().cuLaunchKernelEx(&config, fn, params, extra),
        "cuLaunchKernelEx");
}

//===----------------------------------------------------------------------===//
// Streams and events
//===----------------------------------------------------------------------===//

extern "C" void *mgpuStreamCreate(void) {
  ScopedContext context("mgpuStreamCreate");
  if (!context.ok())
    return nullptr;
  CUstream stream = nullptr;
  check(context.api().cuStreamCreate(&stream, kStreamNonBlocking),
        "cuStreamCreate");
  return stream;
}

extern "C" void mgpuStreamDestroy(void *stream) {
  ScopedContext context("mgpuStreamDestroy");
  if (context.ok() && stream)
    check(context.api().cuStreamDestroy(static_cast<CUstream>(stream)),
          "cuStreamDestroy");
}

extern "C" void mgpuStreamSynchronize(void *stream) {
  ScopedContext context("mgpuStreamSynchronize");
  if (context.ok())
    check(context.api().cuStreamSynchronize(static_cast<CUstream>(stream)),
          "cuStreamSynchronize");
}

extern "C" void mgpuStreamWaitEvent(void *stream, void *event) {
  ScopedContext context("mgpuStreamWaitEvent");
  if (context.ok() && event)
    check(context.api().cuStreamWaitEvent(static_cast<CUstream>(stream),
                                          static_cast<CUevent>(event), 0),
          "cuStreamWaitEvent");
}

extern "C" void *mgpuEventCreate(void) {
  ScopedContext context("mgpuEventCreate");
  if (!context.ok())
    return nullptr;
  CUevent event = nullptr;
  check(context.api().cuEventCreate(&event, kEventDisableTiming),
        "cuEventCreate");
  return event;
}

extern "C" void mgpuEventDestroy(void *event) {
  ScopedContext context("mgpuEventDestroy");
  if (context.ok() && event)
    check(context.api().cuEventDestroy(static_cast<CUevent>(event)),
          "cuEventDestroy");
}

extern "C" void mgpuEventSynchronize(void *event) {
  ScopedContext context("mgpuEventSynchronize");
  if (context.ok() && event)
    check(context.api().cuEventSynchronize(static_cast<CUevent>(event)),
          "cuEventSynchronize");
}

extern "C" void mgpuEventRecord(void *event, void *stream) {
  ScopedContext context("mgpuEventRecord");
  if (context.ok() && event)
    check(context.api().cuEventRecord(static_cast<CUevent>(event),
                                      static_cast<CUstream>(stream)),
          "cuEventRecord");
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

extern "C" void *mgpuMemAlloc(uint64_t sizeBytes, void * /*stream*/,
                              int8_t isHostShared) {
  ScopedContext context("mgpuMemAlloc");
  if (!context.ok() || sizeBytes == 0)
    return nullptr;
  CUdeviceptr ptr = 0;
  if (isHostShared) {
    if (!check(
            context.api().cuMemAllocManaged(&ptr, sizeBytes, kMemAttachGlobal),
            "cuMemAllocManaged"))
      return nullptr;
  } else if (!check(context.api().cuMemAlloc(&ptr, sizeBytes), "cuMemAlloc")) {
    return nullptr;
  }
  return reinterpret_cast<void *>(static_cast<uintptr_t>(ptr));
}

extern "C" void mgpuMemFree(void *ptr, void * /*stream*/) {
  ScopedContext context("mgpuMemFree");
  if (context.ok() && ptr)
    check(context.api().cuMemFree(devicePointer(ptr)), "cuMemFree");
}

extern "C" void mgpuMemcpy(void *dst, void *src, size_t sizeBytes,
                           void *stream) {
  ScopedContext context("mgpuMemcpy");
  if (!context.ok() || sizeBytes == 0)
    return;
  if (!dst || !src) {
    fail("mgpuMemcpy", "mgpuMemcpy: null pointer");
    return;
  }
  check(context.api().cuMemcpyAsync(devicePointer(dst), devicePointer(src),
                                    sizeBytes, static_cast<CUstream>(stream)),
        "cuMemcpyAsync");
}

extern "C" void mgpuMemset32(void *dst, uint32_t value, size_t count,
                             void *stream) {
  ScopedContext context("mgpuMemset32");
  if (!context.ok() || count == 0)
    return;
  if (!dst) {
    fail("mgpuMemset32", "mgpuMemset32: null pointer");
    return;
  }
  check(context.api().cuMemsetD32Async(devicePointer(dst), value, count,
                                       static_cast<CUstream>(stream)),
        "cuMemsetD32Async");
}

extern "C" void mgpuMemset16(void *dst, uint16_t value, size_t count,
                             void *stream) {
  ScopedContext context("mgpuMemset16");
  if (!context.ok() || count == 0)
    return;
  if (!dst) {
    fail("mgpuMemset16", "mgpuMemset16: null pointer");
    return;
  }
  check(context.api().cuMemsetD16Async(devicePointer(dst), value, count,
                                       static_cast<CUstream>(stream)),
        "cuMemsetD16Async");
}

extern "C" void mgpuMemHostRegister(void *ptr, uint64_t sizeBytes) {
  ScopedContext context("mgpuMemHostRegister");
  if (context.ok() && ptr && sizeBytes)
    check(context.api().cuMemHostRegister(ptr, sizeBytes, 0),
          "cuMemHostRegister");
}

extern "C" void mgpuMemHostUnregister(void *ptr) {
  ScopedContext context("mgpuMemHostUnregister");
  if (context.ok() && ptr)
    check(context.api().cuMemHostUnregister(ptr), "cuMemHostUnregister");
}

extern "C" void mgpuMemHostRegisterMemRef(int64_t rank, void *descriptor,
                                          int64_t elementSizeBytes) {
  if (!descriptor || rank < 0 || elementSizeBytes <= 0) {
    fail("mgpuMemHostRegisterMemRef",
         "mgpuMemHostRegisterMemRef: invalid memref");
    return;
  }
  auto *header = static_cast<const MemRefHeader *>(descriptor);
  mgpuMemHostRegister(header->aligned + header->offset * elementSizeBytes,
                      spannedElements(rank, header) * elementSizeBytes);
}

extern "C" void mgpuMemHostUnregisterMemRef(int64_t rank, void *descriptor,
                                            int64_t elementSizeBytes) {
  if (!descriptor || rank < 0 || elementSizeBytes <= 0) {
    fail("mgpuMemHostUnregisterMemRef",
         "mgpuMemHostUnregisterMemRef: invalid memref");
    return;
  }
  auto *header = static_cast<const MemRefHeader *>(descriptor);
  if (spannedElements(rank, header) == 0)
    return;
  mgpuMemHostUnregister(header->aligned + header->offset * elementSizeBytes);
}

extern "C" void mgpuSetDefaultDevice(int32_t device) { defaultDevice = device; }

//===----------------------------------------------------------------------===//
// TMA descriptors
//===----------------------------------------------------------------------===//

extern "C" void *mgpuTensorMapEncodeTiledMemref(
    int64_t rank, void *descriptor, int64_t dataType, int64_t interleave,
    int64_t swizzle, int64_t l2Promotion, int64_t oobFill, int64_t *boxDims) {
  const char *call = "mgpuTensorMapEncodeTiledMemref";
  ScopedContext context(call);
  if (!context.ok())
    return nullptr;
  if (!context.api().cuTensorMapEncodeTiled) {
    fail(call, "mgpuTensorMapEncodeTiledMemref: the CUDA driver has no "
               "cuTensorMapEncodeTiled (CUDA 12 or newer is needed)");
    return nullptr;
  }
  constexpr int64_t kTypes =
      sizeof(kTensorMapElementBytes) / sizeof(kTensorMapElementBytes[0]);
  if (!descriptor || !boxDims || rank < 1 || rank > 5 || dataType < 0 ||
      dataType >= kTypes) {
    fail(call, format("%s: unsupported memref (rank %" PRId64
                      ", data type %" PRId64 ")",
                      call, rank, dataType));
    return nullptr;
  }
  // The driver orders dimensions innermost first; memrefs outermost first.
  auto *header = static_cast<const MemRefHeader *>(descriptor);
  const int64_t *sizes = memrefSizes(header);
  const int64_t *strides = sizes + rank;
  const uint64_t elementBytes = kTensorMapElementBytes[dataType];
  uint64_t globalDim[5] = {0}, globalStrides[5] = {0};
  unsigned boxDim[5] = {0}, elementStrides[5] = {0};
  for (int64_t r = 0; r < rank; ++r) {
    int64_t d = rank - 1 - r;
    globalDim[r] = static_cast<uint64_t>(sizes[d]);
    boxDim[r] = static_cast<unsigned>(boxDims[d]);
    elementStrides[r] = 1;
    // Byte strides of dimensions 1..rank-1; dimension 0 must be contiguous.
    if (r > 0)
      globalStrides[r - 1] = static_cast<uint64_t>(strides[d]) * elementBytes;
  }
  TensorMap map;
  if (!check(context.api().cuTensorMapEncodeTiled(
                 &map, static_cast<int>(dataType), static_cast<unsigned>(rank),
                 header->aligned + header->offset * elementBytes, globalDim,
                 globalStrides, boxDim, elementStrides,
                 static_cast<int>(interleave), static_cast<int>(swizzle),
                 static_cast<int>(l2Promotion), static_cast<int>(oobFill)),
             "cuTensorMapEncodeTiled"))
    return nullptr;
  // The kernel reads the descriptor from global memory; it is never freed,
  // as in MLIR's own runtime.
  CUdeviceptr device = 0;
  if (!check(context.api().cuMemAlloc(&device, sizeof(map)), "cuMemAlloc"))
    return nullptr;
  if (!check(context.api().cuMemcpy(device, devicePointer(&map), sizeof(map)),
             "cuMemcpy")) {
    context.api().cuMemFree(device);
    return nullptr;
  }
  return reinterpret_cast<void *>(static_cast<uintptr_t>(device));
}
