//===- AggregatedOpInterfaceImpl.h - decompositions of la ops ---*- C++ -*-===//
//
// la.recurrence and la.sliding_window_hybrid implement linalg's
// AggregatedOpInterface through external models: their decompositions are
// built by the Transforms library (the dialect library cannot depend on it).
//
//===----------------------------------------------------------------------===//

#ifndef LA_DIALECT_LA_AGGREGATEDOPINTERFACEIMPL_H
#define LA_DIALECT_LA_AGGREGATEDOPINTERFACEIMPL_H

namespace mlir {
class DialectRegistry;
namespace la {

/// Attaches AggregatedOpInterface to la.recurrence: a recurrence decomposes
/// into the level-2 chunk program with one chunk spanning all its tokens
/// (a static T, or the constant upper bound of a dynamic one, the chunk
/// padded). Tile T first (`transform.structured.tile_using_for`) so that
/// the chunk is small; `transform.structured.decompose_interface` applies it.
/// la.sliding_window_hybrid's decomposition is attached there too.
void registerAggregatedOpInterfaceExternalModels(DialectRegistry &registry);

/// Attaches AggregatedOpInterface to la.sliding_window_hybrid (see
/// decomposeSlidingWindowHybrid).
void registerSlidingWindowHybridDecomposition(DialectRegistry &registry);

} // namespace la
} // namespace mlir

#endif // LA_DIALECT_LA_AGGREGATEDOPINTERFACEIMPL_H
