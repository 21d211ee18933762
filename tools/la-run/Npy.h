//===- Npy.h - NumPy .npy file reading and writing --------------*- C++ -*-===//
//
// A small, self-contained reader/writer for NumPy's .npy format
// (https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html)
// plus element-type conversion between the dtypes la-run deals with.
//
// Only little-endian, C-order arrays of the plain numeric dtypes
// '<f4', '<f2', '<f8', '<i4' and '<i8' are supported. NumPy has no bfloat16
// dtype, so bf16 never appears in a .npy file: it exists only in memory (as the
// result of `convert`) and is widened to f32 when written.
//
//===----------------------------------------------------------------------===//

#ifndef LA_TOOLS_LA_RUN_NPY_H
#define LA_TOOLS_LA_RUN_NPY_H

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace larun {
namespace npy {

/// Element types. The .npy descr of each is '<f4', '<f2', (none), '<f8',
/// '<i4' and '<i8'.
enum class DType { F32, F16, BF16, F64, I32, I64 };

/// A dense array in C (row-major) order. `data` holds numElements() elements
/// of elementSize() bytes each, every element stored little-endian regardless
/// of the host. A 0-d array (empty shape) holds exactly one element.
struct Array {
  DType dtype = DType::F32;
  llvm::SmallVector<int64_t, 4> shape;
  std::vector<uint8_t> data;

  /// The product of the extents (1 for a 0-d array, 0 if any extent is 0).
  int64_t numElements() const;
  /// The size in bytes of one element of `dtype`.
  size_t elementSize() const;
};

/// "f32", "f16", "bf16", "f64", "i32" or "i64".
llvm::StringRef dtypeName(DType dtype);

/// The size in bytes of one element of `dtype`.
size_t dtypeSize(DType dtype);

/// Reads a .npy file (format version 1.0, 2.0 or 3.0). Fails, with a message
/// naming `path` and the problem, if the file is not a well-formed .npy file,
/// its dtype is not one of '<f4', '<f2', '<f8', '<i4', '<i8', it is stored in
/// Fortran order (unless that layout is identical to C order, i.e. at most one
/// extent exceeds 1), or its data size does not match its shape.
llvm::Expected<Array> readFile(llvm::StringRef path);

/// Writes `array` to `path` as a version 1.0 .npy file (version 2.0 only if
/// the header would not fit in 1.0, which needs an absurdly high rank), with
/// the header padded by spaces and a trailing '\n' so that the data starts at
/// a multiple of 64 bytes, exactly as numpy.save does.
///
/// bf16 arrays are converted to f32 (exactly) before writing, since NumPy has
/// no bf16 dtype.
///
/// The file is written to a temporary file next to `path` which is renamed to
/// `path` only on success, so a failure never leaves a partial file behind.
llvm::Error writeFile(llvm::StringRef path, const Array &array);

/// Writes `arrays[i]` to `paths[i]` as writeFile does, all or none: every
/// file is complete under a temporary name before any is renamed. (Only a
/// failing rename, after the first ones, can leave some of them written.)
llvm::Error writeFiles(llvm::ArrayRef<llvm::StringRef> paths,
                       llvm::ArrayRef<const Array *> arrays);

/// Converts `array` to element type `to`. Supported: any floating-point dtype
/// (f32, f16, bf16, f64) to any other, rounding to nearest, ties to even, with
/// correct handling of subnormals, infinities and NaNs (overflow gives
/// infinity); and i32 <-> i64, failing if an i64 value does not fit in i32.
/// Converting to the same dtype copies. Float <-> integer is not supported.
llvm::Expected<Array> convert(const Array &array, DType to);

} // namespace npy
} // namespace larun

#endif // LA_TOOLS_LA_RUN_NPY_H
