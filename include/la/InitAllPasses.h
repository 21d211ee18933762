//===- InitAllPasses.h - every pass and pipeline of la ----------*- C++ -*-===//

#ifndef LA_INITALLPASSES_H
#define LA_INITALLPASSES_H

namespace mlir {
namespace la {

/// Registers every `la` pass and pass pipeline with the global registry, so
/// that they can be named in textual pipelines and on the command line.
void registerPasses();

} // namespace la
} // namespace mlir

#endif // LA_INITALLPASSES_H
