//===- la-pipeline-doc.cpp - the la pipelines' Markdown reference ---------===//
//
// Prints docs/reference/LaPipelines.md: the registered pipelines with their
// options, defaults and help. The pipelines' options are C++ PassOptions
// structs, not TableGen, so mlir-tblgen's pass docs do not cover them.
//
//===----------------------------------------------------------------------===//

#include "la/Pipelines/Pipelines.h"

#include "llvm/Support/raw_ostream.h"

int main() {
  mlir::la::printPipelineReference(llvm::outs());
  return 0;
}
