//===- la-cuda-info.cpp - is there a GPU for la's CUDA runtime? -----------===//
//
// la-cuda-info [--check]
//
// Prints "cuda: available: <device> (sm_XY)" or "cuda: unavailable:
// <reason>" and exits 0 either way. With --check it then calls the mgpu*
// functions of libla_cuda_runtime: without a GPU, that they return null
// handles and report the missing driver through laCudaLastError; with one,
// memory, a JIT-compiled PTX kernel launched with 64 KB of dynamic shared
// memory, a cluster launch, events, managed memory, a TMA descriptor and the
// reporting of failed calls. It prints "check: ok" or "check: FAILED: ..."
// (exit 1). Bad arguments exit 1.
//
//===----------------------------------------------------------------------===//

#include "la-c/CudaRuntime.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

/// A kernel that stores 3*i+1 at out[i] for i < n, passing the value
/// through dynamic shared memory. Accepted by ptxas for sm_75 to sm_90a.
const char kFillPtx[] = R"ptx(
.version 7.0
.target sm_75
.address_size 64

.extern .shared .align 16 .b8 la_dynamic_smem[];

.visible .entry la_cuda_info_fill(
  .param .u64 la_out,
  .param .u32 la_n
)
{
  .reg .pred %p<2>;
  .reg .b32 %r<10>;
  .reg .b64 %rd<5>;

  ld.param.u64 %rd1, [la_out];
  ld.param.u32 %r1, [la_n];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.s32 %r5, %r2, %r3, %r4;
  mov.u32 %r6, la_dynamic_smem;
  shl.b32 %r7, %r4, 2;
  add.s32 %r6, %r6, %r7;
  mad.lo.s32 %r8, %r5, 3, 1;
  st.shared.u32 [%r6], %r8;
  bar.sync 0;
  ld.shared.u32 %r9, [%r6];
  setp.ge.u32 %p1, %r5, %r1;
  @%p1 bra LA_DONE;
  cvta.to.global.u64 %rd2, %rd1;
  mul.wide.u32 %rd3, %r5, 4;
  add.s64 %rd4, %rd2, %rd3;
  st.global.u32 [%rd4], %r9;
LA_DONE:
  ret;
}
)ptx";

std::string lastError() {
  char text[2048];
  return laCudaLastError(text, sizeof(text)) ? text : "";
}

int failed(const char *step, const std::string &why) {
  std::printf("check: FAILED: %s%s%s\n", step, why.empty() ? "" : ": ",
              why.c_str());
  return 1;
}

/// Fails when a runtime call since the last query failed.
#define EXPECT_NO_ERROR(step)                                                  \
  do {                                                                         \
    std::string error = lastError();                                           \
    if (!error.empty())                                                        \
      return failed(step, error);                                              \
  } while (0)

/// Without a driver: null handles, no crash, errors reported.
int checkWithoutGpu() {
  lastError();
  laCudaSetErrorPrinting(0);
  void *stream = mgpuStreamCreate();
  void *memory = mgpuMemAlloc(64, stream, 0);
  void *module = mgpuModuleLoadJIT(const_cast<char *>(kFillPtx), 2);
  void *function = mgpuModuleGetFunction(module, "la_cuda_info_fill");
  mgpuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, stream, nullptr, nullptr, 0);
  mgpuMemset32(memory, 0, 16, stream);
  mgpuStreamSynchronize(stream);
  mgpuMemFree(memory, stream);
  mgpuModuleUnload(module);
  mgpuStreamDestroy(stream);
  laCudaSetErrorPrinting(1);
  if (stream || memory || module || function)
    return failed("no GPU", "a call returned a non-null handle");
  std::string error = lastError();
  if (error.find("no CUDA driver/GPU available") == std::string::npos)
    return failed("no GPU", "laCudaLastError reported '" + error + "'");
  if (!lastError().empty())
    return failed("no GPU", "laCudaLastError did not clear the error");
  std::printf("check: ok (no GPU: null handles, '%s')\n",
              error.substr(0, error.find(" (")).c_str());
  return 0;
}

int checkWithGpu() {
  lastError();
  constexpr uint32_t n = 1000;
  constexpr size_t bytes = n * sizeof(uint32_t);
  std::vector<uint32_t> host(n, 0);

  void *stream = mgpuStreamCreate();
  void *memory = mgpuMemAlloc(bytes, stream, 0);
  if (!stream || !memory)
    return failed("stream and memory", lastError());

  // memset32 and memset16, copied back.
  mgpuMemset32(memory, 0xdeadbeefu, n, stream);
  mgpuMemcpy(host.data(), memory, bytes, stream);
  mgpuStreamSynchronize(stream);
  EXPECT_NO_ERROR("memset32");
  for (uint32_t value : host)
    if (value != 0xdeadbeefu)
      return failed("memset32", "wrong value copied back");
  mgpuMemset16(memory, 0x1234u, 2 * n, stream);
  mgpuMemcpy(host.data(), memory, bytes, stream);
  mgpuStreamSynchronize(stream);
  EXPECT_NO_ERROR("memset16");
  for (uint32_t value : host)
    if (value != 0x12341234u)
      return failed("memset16", "wrong value copied back");

  // A PTX module, a launch with dynamic shared memory above 48 KB, timed.
  void *module = mgpuModuleLoadJIT(const_cast<char *>(kFillPtx), 2);
  void *function = mgpuModuleGetFunction(module, "la_cuda_info_fill");
  EXPECT_NO_ERROR("PTX module");
  uint32_t count = n;
  void *params[] = {&memory, &count};
  void *start = laCudaTimingEventCreate();
  void *end = laCudaTimingEventCreate();
  mgpuEventRecord(start, stream);
  mgpuLaunchKernel(function, (n + 127) / 128, 1, 1, 128, 1, 1, 64 * 1024,
                   stream, params, nullptr, 2);
  mgpuEventRecord(end, stream);
  mgpuEventSynchronize(end);
  float ms = -1;
  if (!laCudaEventElapsedMs(start, end, &ms) || ms < 0)
    return failed("timing", lastError());
  mgpuMemcpy(host.data(), memory, bytes, stream);
  mgpuStreamSynchronize(stream);
  EXPECT_NO_ERROR("launch with 64 KB of dynamic shared memory");
  for (uint32_t i = 0; i < n; ++i)
    if (host[i] != 3 * i + 1)
      return failed("launch", "wrong value at " + std::to_string(i));

  // A cluster launch of two blocks per cluster, ordered by an event.
  mgpuMemset32(memory, 0, n, stream);
  void *event = mgpuEventCreate();
  mgpuEventRecord(event, stream);
  void *other = mgpuStreamCreate();
  mgpuStreamWaitEvent(other, event);
  // The kernel stages each thread's value in dynamic shared memory: a
  // launch must give it 4 bytes per thread.
  mgpuLaunchClusterKernel(function, 2, 1, 1, 8, 1, 1, 128, 1, 1,
                          128 * sizeof(uint32_t), other, params, nullptr);
  mgpuStreamSynchronize(other);
  mgpuMemcpy(host.data(), memory, bytes, stream);
  mgpuStreamSynchronize(stream);
  EXPECT_NO_ERROR("cluster launch");
  for (uint32_t i = 0; i < n; ++i)
    if (host[i] != 3 * i + 1)
      return failed("cluster launch", "wrong value at " + std::to_string(i));

  // Managed memory, read on the host.
  auto *shared = static_cast<uint32_t *>(mgpuMemAlloc(bytes, stream, 1));
  mgpuMemset32(shared, 7, n, stream);
  mgpuStreamSynchronize(stream);
  EXPECT_NO_ERROR("host-shared memory");
  if (!shared || shared[0] != 7 || shared[n - 1] != 7)
    return failed("host-shared memory", "wrong value");
  mgpuMemFree(shared, stream);

  // A TMA descriptor for a 64x64 f16 memref, 64x64 boxes, 128-byte swizzle.
  void *tile = mgpuMemAlloc(64 * 64 * 2, stream, 0);
  struct {
    void *allocated, *aligned;
    int64_t offset, sizes[2], strides[2];
  } descriptor = {tile, tile, 0, {64, 64}, {64, 1}};
  int64_t box[2] = {64, 64};
  void *tensorMap = mgpuTensorMapEncodeTiledMemref(
      2, &descriptor, /*FLOAT16=*/6, /*interleave none=*/0,
      /*swizzle 128B=*/3, /*L2 none=*/0, /*OOB zero=*/0, box);
  EXPECT_NO_ERROR("TMA descriptor");
  if (!tensorMap)
    return failed("TMA descriptor", "null");
  mgpuMemFree(tensorMap, stream);
  mgpuMemFree(tile, stream);

  // Failures are reported after the call.
  laCudaSetErrorPrinting(0);
  mgpuLaunchKernel(function, 1, 1, 1, 128, 1, 1, 1 << 30, stream, params,
                   nullptr, 2);
  std::string tooMuch = lastError();
  void *bad = mgpuModuleLoad(const_cast<char *>("not a cubin"), 12);
  std::string badModule = lastError();
  laCudaSetErrorPrinting(1);
  if (tooMuch.find("shared memory") == std::string::npos)
    return failed("error reporting", "oversized launch: '" + tooMuch + "'");
  if (bad || badModule.empty())
    return failed("error reporting", "a bad module image was accepted");

  mgpuEventDestroy(event);
  mgpuEventDestroy(start);
  mgpuEventDestroy(end);
  mgpuStreamDestroy(other);
  mgpuModuleUnload(module);
  mgpuMemFree(memory, stream);
  mgpuStreamDestroy(stream);
  if (!laCudaSynchronize())
    return failed("synchronize", lastError());
  EXPECT_NO_ERROR("clean-up");
  std::printf("check: ok (kernel %.3f ms)\n", ms);
  return 0;
}

void usage(std::FILE *out) {
  std::fprintf(out,
               "usage: la-cuda-info [--check]\n"
               "  Prints whether la's CUDA runtime (libla_cuda_runtime) finds "
               "a GPU.\n"
               "  --check  also exercises the runtime (on the GPU if there is "
               "one)\n");
}

} // namespace

int main(int argc, char **argv) {
  bool check = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--check")) {
      check = true;
    } else if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    } else {
      std::fprintf(stderr, "la-cuda-info: unknown argument '%s'\n", argv[i]);
      usage(stderr);
      return 1;
    }
  }

  char text[1024];
  bool available = laCudaAvailable(text, sizeof(text));
  if (available && !laCudaDeviceName(text, sizeof(text)))
    std::snprintf(text, sizeof(text), "(device name unknown)");
  std::printf("cuda: %s: %s\n", available ? "available" : "unavailable", text);
  std::fflush(stdout);
  if (!check)
    return 0;
  return available ? checkWithGpu() : checkWithoutGpu();
}
