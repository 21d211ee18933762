//===- Npy.cpp - NumPy .npy file reading and writing ----------------------===//
//
// See Npy.h. The .npy format is: the magic "\x93NUMPY", a major and a minor
// version byte, the header length (little-endian uint16 for version 1.0,
// uint32 for 2.0 and 3.0), the header -- a Python dict literal such as
// "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" padded with
// spaces and a final '\n' -- and then the raw array data.
//
//===----------------------------------------------------------------------===//

#include "Npy.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/Twine.h"
#include "llvm/ADT/bit.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <system_error>

using namespace larun::npy;
using llvm::StringRef;
using llvm::Twine;

namespace {
constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
/// numpy aligns the start of the data to this many bytes.
constexpr size_t kArrayAlign = 64;
/// numpy pads the header with spaces so that the first extent can grow to
/// this many digits in place (numpy.lib.format.GROWTH_AXIS_MAX_DIGITS).
constexpr size_t kGrowthAxisMaxDigits = 21;
/// Guards the header parser against pathologically nested input.
constexpr unsigned kMaxNesting = 32;
} // namespace

//===----------------------------------------------------------------------===//
// DType and Array
//===----------------------------------------------------------------------===//

StringRef larun::npy::dtypeName(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return "f32";
  case DType::F16:
    return "f16";
  case DType::BF16:
    return "bf16";
  case DType::F64:
    return "f64";
  case DType::I32:
    return "i32";
  case DType::I64:
    return "i64";
  }
  llvm_unreachable("unknown DType");
}

size_t larun::npy::dtypeSize(DType dtype) {
  switch (dtype) {
  case DType::F16:
  case DType::BF16:
    return 2;
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::F64:
  case DType::I64:
    return 8;
  }
  llvm_unreachable("unknown DType");
}

int64_t Array::numElements() const {
  int64_t n = 1;
  for (int64_t extent : shape)
    n *= extent;
  return n;
}

size_t Array::elementSize() const { return dtypeSize(dtype); }

static bool isFloat(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16 ||
         dtype == DType::F64;
}

/// Formats `shape` the way Python's repr formats a tuple: "()", "(3,)",
/// "(2, 3)".
static std::string shapeRepr(llvm::ArrayRef<int64_t> shape) {
  std::string s = "(";
  for (auto [i, extent] : llvm::enumerate(shape)) {
    if (i != 0)
      s += ", ";
    s += std::to_string(extent);
  }
  if (shape.size() == 1)
    s += ",";
  s += ")";
  return s;
}

/// Computes the number of data bytes for `shape` with `elementSize`-byte
/// elements, failing (with a message) on negative extents or overflow.
static llvm::Expected<uint64_t> dataByteSize(llvm::ArrayRef<int64_t> shape,
                                             size_t elementSize) {
  int64_t n = 1;
  for (int64_t extent : shape) {
    if (extent < 0)
      return llvm::createStringError("negative extent in shape " +
                                     shapeRepr(shape));
    if (llvm::MulOverflow(n, extent, n))
      return llvm::createStringError("shape " + shapeRepr(shape) +
                                     " has too many elements");
  }
  int64_t bytes;
  if (llvm::MulOverflow(n, static_cast<int64_t>(elementSize), bytes))
    return llvm::createStringError("shape " + shapeRepr(shape) +
                                   " has too many elements");
  return static_cast<uint64_t>(bytes);
}

/// Checks that `array`'s shape is valid and its data size matches it.
static llvm::Error checkArray(const Array &array) {
  llvm::Expected<uint64_t> bytes =
      dataByteSize(array.shape, array.elementSize());
  if (!bytes)
    return bytes.takeError();
  if (*bytes != array.data.size())
    return llvm::createStringError(
        "array data is " + Twine(array.data.size()) + " bytes but shape " +
        shapeRepr(array.shape) + " of " + dtypeName(array.dtype) + " needs " +
        Twine(*bytes));
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Header parsing: a parser for the subset of Python literal syntax that
// ast.literal_eval would accept in a .npy header.
//===----------------------------------------------------------------------===//

namespace {
struct PyValue {
  enum Kind { Str, Int, Bool, None, Tuple, List, Dict } kind = None;
  std::string str;
  int64_t intValue = 0;
  bool boolValue = false;
  /// Elements of a tuple or list; alternating keys and values of a dict.
  std::vector<PyValue> items;
};

class HeaderParser {
public:
  explicit HeaderParser(StringRef header) : text(header) {}

  /// Parses the whole header as one value followed only by whitespace.
  llvm::Expected<PyValue> parse() {
    llvm::Expected<PyValue> value = parseValue(0);
    if (!value)
      return value.takeError();
    skipSpace();
    if (pos != text.size())
      return error("unexpected text after the header dict");
    return value;
  }

private:
  llvm::Error error(const Twine &message) {
    return llvm::createStringError(message + " at offset " + Twine(pos));
  }

  void skipSpace() {
    while (pos < text.size() && llvm::isSpace(text[pos]))
      ++pos;
  }

  bool consume(char c) {
    skipSpace();
    if (pos < text.size() && text[pos] == c) {
      ++pos;
      return true;
    }
    return false;
  }

  bool consumeWord(StringRef word) {
    if (!text.substr(pos).starts_with(word))
      return false;
    size_t end = pos + word.size();
    if (end < text.size() && (llvm::isAlnum(text[end]) || text[end] == '_'))
      return false;
    pos = end;
    return true;
  }

  llvm::Expected<PyValue> parseValue(unsigned depth) {
    if (depth > kMaxNesting)
      return error("header nested too deeply");
    skipSpace();
    if (pos >= text.size())
      return error("unexpected end of header");
    char c = text[pos];
    if (c == '\'' || c == '"')
      return parseString();
    if (c == '-' || c == '+' || llvm::isDigit(c))
      return parseInt();
    if (c == '(')
      return parseSequence(PyValue::Tuple, ')', depth);
    if (c == '[')
      return parseSequence(PyValue::List, ']', depth);
    if (c == '{')
      return parseDict(depth);
    PyValue value;
    bool isTrue = consumeWord("True");
    if (isTrue || consumeWord("False")) {
      value.kind = PyValue::Bool;
      value.boolValue = isTrue;
      return value;
    }
    if (consumeWord("None"))
      return value;
    return error("unexpected character '" + Twine(c) + "'");
  }

  llvm::Expected<PyValue> parseString() {
    char quote = text[pos++];
    PyValue value;
    value.kind = PyValue::Str;
    while (pos < text.size() && text[pos] != quote) {
      if (text[pos] == '\n')
        return error("newline in string");
      // Escapes never occur in numpy's headers; keep the escaped character.
      if (text[pos] == '\\' && pos + 1 < text.size())
        ++pos;
      value.str += text[pos++];
    }
    if (pos >= text.size())
      return error("unterminated string");
    ++pos;
    return value;
  }

  llvm::Expected<PyValue> parseInt() {
    bool negative = false;
    if (text[pos] == '-' || text[pos] == '+') {
      negative = text[pos] == '-';
      ++pos;
      skipSpace();
    }
    if (pos >= text.size() || !llvm::isDigit(text[pos]))
      return error("expected an integer");
    uint64_t magnitude = 0;
    while (pos < text.size() && llvm::isDigit(text[pos])) {
      if (magnitude > (uint64_t(INT64_MAX) - 9) / 10)
        return error("integer too large");
      magnitude = magnitude * 10 + static_cast<uint64_t>(text[pos++] - '0');
    }
    // Python 2 era numpy wrote long integers as e.g. "3L".
    if (pos < text.size() && (text[pos] == 'L' || text[pos] == 'l'))
      ++pos;
    PyValue value;
    value.kind = PyValue::Int;
    value.intValue =
        negative ? -static_cast<int64_t>(magnitude) : int64_t(magnitude);
    return value;
  }

  llvm::Expected<PyValue> parseSequence(PyValue::Kind kind, char close,
                                        unsigned depth) {
    ++pos; // '(' or '['
    PyValue value;
    value.kind = kind;
    bool sawComma = false;
    while (!consume(close)) {
      llvm::Expected<PyValue> item = parseValue(depth + 1);
      if (!item)
        return item.takeError();
      value.items.push_back(std::move(*item));
      if (consume(','))
        sawComma = true;
      else if (!consume(close))
        return error("expected ',' or '" + Twine(close) + "'");
      else
        break;
    }
    // In Python "(x)" is just x, not a one-element tuple.
    if (kind == PyValue::Tuple && value.items.size() == 1 && !sawComma)
      return std::move(value.items.front());
    return value;
  }

  llvm::Expected<PyValue> parseDict(unsigned depth) {
    ++pos; // '{'
    PyValue value;
    value.kind = PyValue::Dict;
    while (!consume('}')) {
      llvm::Expected<PyValue> key = parseValue(depth + 1);
      if (!key)
        return key.takeError();
      if (!consume(':'))
        return error("expected ':'");
      llvm::Expected<PyValue> item = parseValue(depth + 1);
      if (!item)
        return item.takeError();
      value.items.push_back(std::move(*key));
      value.items.push_back(std::move(*item));
      if (!consume(',')) {
        if (!consume('}'))
          return error("expected ',' or '}'");
        break;
      }
    }
    return value;
  }

  StringRef text;
  size_t pos = 0;
};
} // namespace

/// Maps a .npy descr to a DType.
static std::optional<DType> dtypeFromDescr(StringRef descr) {
  return llvm::StringSwitch<std::optional<DType>>(descr)
      .Case("<f4", DType::F32)
      .Case("<f2", DType::F16)
      .Case("<f8", DType::F64)
      .Case("<i4", DType::I32)
      .Case("<i8", DType::I64)
      .Default(std::nullopt);
}

static StringRef descrOf(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return "<f4";
  case DType::F16:
    return "<f2";
  case DType::F64:
    return "<f8";
  case DType::I32:
    return "<i4";
  case DType::I64:
    return "<i8";
  case DType::BF16:
    break;
  }
  llvm_unreachable("dtype has no .npy descr");
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

/// Parses the .npy file held in `buffer`; error messages do not yet name the
/// file.
static llvm::Expected<Array> parseNpy(StringRef buffer) {
  auto fail = [](const Twine &message) -> llvm::Expected<Array> {
    return llvm::createStringError(message);
  };

  if (!buffer.starts_with(StringRef(kMagic, kMagicLen)))
    return fail("not a .npy file (bad magic string)");
  if (buffer.size() < kMagicLen + 2)
    return fail("truncated file: no format version");
  unsigned major = static_cast<uint8_t>(buffer[kMagicLen]);
  unsigned minor = static_cast<uint8_t>(buffer[kMagicLen + 1]);
  if (minor != 0 || major < 1 || major > 3)
    return fail("unsupported .npy format version " + Twine(major) + "." +
                Twine(minor) + " (supported: 1.0, 2.0, 3.0)");

  size_t lengthSize = major == 1 ? 2 : 4;
  size_t headerStart = kMagicLen + 2 + lengthSize;
  if (buffer.size() < headerStart)
    return fail("truncated file: no header length");
  const char *lengthPtr = buffer.data() + kMagicLen + 2;
  uint64_t headerLength = major == 1
                              ? llvm::support::endian::read16le(lengthPtr)
                              : llvm::support::endian::read32le(lengthPtr);
  if (buffer.size() - headerStart < headerLength)
    return fail("truncated file: header is " + Twine(headerLength) +
                " bytes but only " + Twine(buffer.size() - headerStart) +
                " remain");
  StringRef header = buffer.substr(headerStart, headerLength);

  llvm::Expected<PyValue> parsed = HeaderParser(header).parse();
  if (!parsed)
    return fail("header not parsable: " + llvm::toString(parsed.takeError()) +
                ": \"" + header.rtrim() + "\"");
  if (parsed->kind != PyValue::Dict)
    return fail("header not parsable: not a dict: \"" + header.rtrim() + "\"");

  const PyValue *descr = nullptr, *fortranOrder = nullptr, *shape = nullptr;
  for (size_t i = 0; i < parsed->items.size(); i += 2) {
    const PyValue &key = parsed->items[i];
    const PyValue *value = &parsed->items[i + 1];
    const PyValue **slot = nullptr;
    if (key.kind == PyValue::Str) {
      if (key.str == "descr")
        slot = &descr;
      else if (key.str == "fortran_order")
        slot = &fortranOrder;
      else if (key.str == "shape")
        slot = &shape;
    }
    if (!slot)
      return fail("header not parsable: unexpected key " +
                  (key.kind == PyValue::Str ? "'" + key.str + "'"
                                            : std::string("(not a string)")) +
                  " in \"" + header.rtrim() + "\"");
    if (*slot)
      return fail("header not parsable: duplicate key '" + key.str + "'");
    *slot = value;
  }
  if (!descr || !fortranOrder || !shape)
    return fail("header not parsable: missing key '" +
                Twine(!descr          ? "descr"
                      : !fortranOrder ? "fortran_order"
                                      : "shape") +
                "' in \"" + header.rtrim() + "\"");

  Array array;
  if (descr->kind != PyValue::Str)
    return fail("unsupported dtype: structured dtypes are not supported "
                "(supported descr: '<f4', '<f2', '<f8', '<i4', '<i8')");
  std::optional<DType> dtype = dtypeFromDescr(descr->str);
  if (!dtype) {
    StringRef d = descr->str;
    std::string why;
    if (d.size() > 1 && d[0] == '>')
      why = " (big-endian data is not supported)";
    return fail("unsupported dtype descr '" + d + "'" + why +
                " (supported: '<f4', '<f2', '<f8', '<i4', '<i8')");
  }
  array.dtype = *dtype;

  if (shape->kind != PyValue::Tuple)
    return fail("header not parsable: 'shape' is not a tuple");
  for (const PyValue &extent : shape->items) {
    if (extent.kind != PyValue::Int)
      return fail("header not parsable: 'shape' is not a tuple of integers");
    array.shape.push_back(extent.intValue);
  }
  llvm::Expected<uint64_t> dataSize =
      dataByteSize(array.shape, array.elementSize());
  if (!dataSize)
    return fail("invalid shape: " + llvm::toString(dataSize.takeError()));

  if (fortranOrder->kind != PyValue::Bool)
    return fail("header not parsable: 'fortran_order' is not True or False");
  // Fortran order is the same layout as C order when at most one extent
  // exceeds 1 (or there are no elements at all).
  if (fortranOrder->boolValue && array.numElements() != 0 &&
      llvm::count_if(array.shape, [](int64_t e) { return e > 1; }) > 1)
    return fail("fortran_order True is not supported (shape " +
                shapeRepr(array.shape) +
                "); save a C-contiguous array, e.g. "
                "numpy.save(path, numpy.ascontiguousarray(a))");

  uint64_t available = buffer.size() - headerStart - headerLength;
  if (available < *dataSize)
    return fail("truncated file: shape " + shapeRepr(array.shape) + " of " +
                descr->str + " needs " + Twine(*dataSize) +
                " data bytes but only " + Twine(available) + " remain");
  if (available > *dataSize)
    return fail("data size does not match shape: shape " +
                shapeRepr(array.shape) + " of " + descr->str + " needs " +
                Twine(*dataSize) + " data bytes but the file has " +
                Twine(available));

  const uint8_t *data = reinterpret_cast<const uint8_t *>(buffer.data()) +
                        headerStart + headerLength;
  array.data.assign(data, data + *dataSize);
  return array;
}

llvm::Expected<Array> larun::npy::readFile(StringRef path) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                  /*RequiresNullTerminator=*/false);
  if (!buffer)
    return llvm::createStringError(
        buffer.getError(),
        path + ": cannot read: " + buffer.getError().message());
  llvm::Expected<Array> array = parseNpy((*buffer)->getBuffer());
  if (!array)
    return llvm::createStringError(path + ": " +
                                   llvm::toString(array.takeError()));
  return array;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

/// Builds the magic string, version, header length and padded header of a
/// .npy file for `array`, byte for byte as numpy.save does.
static std::string makeHeader(const Array &array) {
  std::string dict =
      ("{'descr': '" + descrOf(array.dtype) +
       "', 'fortran_order': False, 'shape': " + shapeRepr(array.shape) + ", }")
          .str();
  if (!array.shape.empty())
    dict.append(
        kGrowthAxisMaxDigits - std::to_string(array.shape.front()).size(), ' ');

  for (unsigned major : {1u, 2u}) {
    size_t lengthSize = major == 1 ? 2 : 4;
    size_t used = kMagicLen + 2 + lengthSize + dict.size() + 1; // +1: '\n'
    size_t padding = kArrayAlign - used % kArrayAlign;
    size_t headerLength = dict.size() + padding + 1;
    if (major == 1 && headerLength > UINT16_MAX)
      continue;
    std::string result(kMagic, kMagicLen);
    result += static_cast<char>(major);
    result += '\0';
    char length[4];
    llvm::support::endian::write32le(length,
                                     static_cast<uint32_t>(headerLength));
    result.append(length, lengthSize);
    result += dict;
    result.append(padding, ' ');
    result += '\n';
    return result;
  }
  llvm_unreachable("header cannot exceed 4 GiB");
}

/// Writes `chunks` to a new temporary file next to `path` and returns its
/// name; on failure removes it.
static llvm::Expected<std::string>
writeTemporary(StringRef path, llvm::ArrayRef<StringRef> chunks) {
  std::string tempPath;
  int fd = -1;
  for (unsigned attempt = 0;; ++attempt) {
    uint64_t random = (uint64_t(llvm::sys::Process::GetRandomNumber()) << 32) ^
                      llvm::sys::Process::GetRandomNumber();
    tempPath = (path + ".tmp-" + llvm::utohexstr(random)).str();
    std::error_code ec = llvm::sys::fs::openFileForWrite(
        tempPath, fd, llvm::sys::fs::CD_CreateNew, llvm::sys::fs::OF_None);
    if (!ec)
      break;
    if (ec == std::errc::file_exists && attempt < 100)
      continue;
    return llvm::createStringError(ec, path +
                                           ": cannot create temporary file '" +
                                           tempPath + "': " + ec.message());
  }

  std::error_code ec;
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    for (StringRef chunk : chunks)
      os << chunk;
    os.close();
    if (os.has_error()) {
      ec = os.error();
      os.clear_error(); // Otherwise the destructor reports a fatal error.
    }
  }
  if (ec) {
    llvm::sys::fs::remove(tempPath);
    return llvm::createStringError(ec,
                                   path + ": cannot write: " + ec.message());
  }
  return tempPath;
}

/// The .npy bytes of `array` (bf16 widened to f32, which represents it
/// exactly: NumPy has no bf16) as a header and a copy of the data.
static llvm::Expected<std::pair<std::string, std::vector<uint8_t>>>
encode(StringRef path, const Array &array) {
  if (llvm::Error err = checkArray(array))
    return llvm::createStringError(
        path + ": cannot write: " + llvm::toString(std::move(err)));
  if (array.dtype == DType::BF16) {
    llvm::Expected<Array> widened = convert(array, DType::F32);
    if (!widened)
      return llvm::createStringError(
          path + ": cannot write: " + llvm::toString(widened.takeError()));
    return encode(path, *widened);
  }
  return std::make_pair(makeHeader(array), array.data);
}

llvm::Error larun::npy::writeFile(StringRef path, const Array &array) {
  return writeFiles({path}, {&array});
}

llvm::Error larun::npy::writeFiles(llvm::ArrayRef<StringRef> paths,
                                   llvm::ArrayRef<const Array *> arrays) {
  assert(paths.size() == arrays.size() && "one path per array");
  // Every file is written under a temporary name first; only when all of
  // them are complete are they renamed, so a failure leaves no output.
  llvm::SmallVector<std::string> temporaries;
  auto removeTemporaries = [&] {
    for (const std::string &temporary : temporaries)
      llvm::sys::fs::remove(temporary);
  };
  for (auto [path, array] : llvm::zip(paths, arrays)) {
    auto bytes = encode(path, *array);
    llvm::Expected<std::string> temporary =
        bytes ? writeTemporary(path, {bytes->first,
                                      StringRef(reinterpret_cast<const char *>(
                                                    bytes->second.data()),
                                                bytes->second.size())})
              : llvm::Expected<std::string>(bytes.takeError());
    if (!temporary) {
      removeTemporaries();
      return temporary.takeError();
    }
    temporaries.push_back(std::move(*temporary));
  }
  for (auto [index, path] : llvm::enumerate(paths)) {
    if (std::error_code ec = llvm::sys::fs::rename(temporaries[index], path)) {
      removeTemporaries();
      return llvm::createStringError(ec,
                                     path + ": cannot write: " + ec.message());
    }
  }
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Conversion
//===----------------------------------------------------------------------===//

/// Rounds `value` to the IEEE-754 binary format with `expBits` exponent bits
/// and `mantBits` explicit mantissa bits (f16: 5/10, bf16: 8/7), to nearest,
/// ties to even, and returns its bit pattern. Overflow gives infinity; NaNs
/// stay (quiet) NaNs, keeping the sign and the top payload bits. Since every
/// f16, bf16 and f32 value is exactly a double, rounding from double is
/// correctly rounded for them all.
static uint32_t roundFromDouble(double value, unsigned expBits,
                                unsigned mantBits) {
  uint64_t bits = llvm::bit_cast<uint64_t>(value);
  uint32_t sign = static_cast<uint32_t>(bits >> 63) << (expBits + mantBits);
  unsigned exp = static_cast<unsigned>(bits >> 52) & 0x7ff;
  uint64_t mant = bits & ((uint64_t(1) << 52) - 1);
  uint32_t expMax = (uint32_t(1) << expBits) - 1;
  uint32_t infBits = expMax << mantBits;

  if (exp == 0x7ff) {
    if (mant == 0)
      return sign | infBits;
    return sign | infBits | (uint32_t(1) << (mantBits - 1)) |
           static_cast<uint32_t>(mant >> (52 - mantBits));
  }
  // Zeros, and double subnormals (< 2^-1022), which are far below half the
  // smallest subnormal of the narrower formats, become (signed) zero.
  if (exp == 0)
    return sign;

  int bias = (1 << (expBits - 1)) - 1;
  int targetExp = static_cast<int>(exp) - 1023 + bias;
  uint64_t sig = mant | (uint64_t(1) << 52);
  // Number of low bits of `sig` to round away: normal results keep mantBits
  // bits after the implicit 1, subnormal results fewer.
  unsigned shift = 52 - mantBits;
  if (targetExp < 1)
    shift += static_cast<unsigned>(1 - targetExp);
  if (shift > 53) // Less than half the smallest subnormal: rounds to zero.
    return sign;
  uint64_t q = sig >> shift;
  uint64_t rem = sig & ((uint64_t(1) << shift) - 1);
  uint64_t half = uint64_t(1) << (shift - 1);
  if (rem > half || (rem == half && (q & 1)))
    ++q;
  // For a normal result q includes the implicit bit, so adding it to the
  // exponent field minus one carries correctly into the exponent (and into
  // infinity). For a subnormal result q is the mantissa field, and rounding up
  // to 2^mantBits gives the smallest normal.
  uint64_t result =
      targetExp >= 1 ? (uint64_t(targetExp - 1) << mantBits) + q : q;
  if (result >= infBits)
    return sign | infBits;
  return sign | static_cast<uint32_t>(result);
}

/// The inverse of roundFromDouble: the exact double value of a narrow float.
static double widenToDouble(uint32_t bits, unsigned expBits,
                            unsigned mantBits) {
  uint64_t sign = uint64_t((bits >> (expBits + mantBits)) & 1) << 63;
  uint32_t expMax = (uint32_t(1) << expBits) - 1;
  uint32_t exp = (bits >> mantBits) & expMax;
  uint64_t mant = bits & ((uint32_t(1) << mantBits) - 1);
  int bias = (1 << (expBits - 1)) - 1;
  if (exp == expMax) {
    uint64_t result = sign | (uint64_t(0x7ff) << 52);
    if (mant != 0)
      result |= (uint64_t(1) << 51) | (mant << (52 - mantBits));
    return llvm::bit_cast<double>(result);
  }
  if (exp == 0) {
    double magnitude =
        std::ldexp(static_cast<double>(mant), 1 - bias - int(mantBits));
    return sign ? -magnitude : magnitude;
  }
  return llvm::bit_cast<double>(sign |
                                (uint64_t(int(exp) - bias + 1023) << 52) |
                                (mant << (52 - mantBits)));
}

static double loadFloat(DType dtype, const uint8_t *p) {
  using namespace llvm::support::endian;
  switch (dtype) {
  case DType::F32:
    return llvm::bit_cast<float>(read32le(p));
  case DType::F64:
    return llvm::bit_cast<double>(read64le(p));
  case DType::F16:
    return widenToDouble(read16le(p), 5, 10);
  case DType::BF16:
    return widenToDouble(read16le(p), 8, 7);
  default:
    llvm_unreachable("not a float dtype");
  }
}

static void storeFloat(DType dtype, double value, uint8_t *p) {
  using namespace llvm::support::endian;
  switch (dtype) {
  case DType::F32:
    // The C++ conversion rounds to nearest even (the default FP environment).
    write32le(p, llvm::bit_cast<uint32_t>(static_cast<float>(value)));
    return;
  case DType::F64:
    write64le(p, llvm::bit_cast<uint64_t>(value));
    return;
  case DType::F16:
    write16le(p, static_cast<uint16_t>(roundFromDouble(value, 5, 10)));
    return;
  case DType::BF16:
    write16le(p, static_cast<uint16_t>(roundFromDouble(value, 8, 7)));
    return;
  default:
    llvm_unreachable("not a float dtype");
  }
}

llvm::Expected<Array> larun::npy::convert(const Array &array, DType to) {
  if (llvm::Error err = checkArray(array))
    return std::move(err);

  Array result;
  result.dtype = to;
  result.shape = array.shape;
  if (array.dtype == to) {
    result.data = array.data;
    return result;
  }

  size_t n = static_cast<size_t>(array.numElements());
  size_t fromSize = array.elementSize(), toSize = dtypeSize(to);
  result.data.resize(n * toSize);
  const uint8_t *src = array.data.data();
  uint8_t *dst = result.data.data();

  if (isFloat(array.dtype) && isFloat(to)) {
    for (size_t i = 0; i < n; ++i)
      storeFloat(to, loadFloat(array.dtype, src + i * fromSize),
                 dst + i * toSize);
    return result;
  }

  using namespace llvm::support::endian;
  if (array.dtype == DType::I32 && to == DType::I64) {
    for (size_t i = 0; i < n; ++i)
      write64le(dst + 8 * i, static_cast<uint64_t>(static_cast<int64_t>(
                                 static_cast<int32_t>(read32le(src + 4 * i)))));
    return result;
  }
  if (array.dtype == DType::I64 && to == DType::I32) {
    for (size_t i = 0; i < n; ++i) {
      int64_t value = static_cast<int64_t>(read64le(src + 8 * i));
      if (value < INT32_MIN || value > INT32_MAX)
        return llvm::createStringError("cannot convert i64 to i32: element " +
                                       Twine(i) + " (" + Twine(value) +
                                       ") is out of range");
      write32le(dst + 4 * i,
                static_cast<uint32_t>(static_cast<int32_t>(value)));
    }
    return result;
  }
  return llvm::createStringError("unsupported conversion from " +
                                 dtypeName(array.dtype) + " to " +
                                 dtypeName(to));
}
