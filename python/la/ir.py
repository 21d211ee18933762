"""Compiler IR from Python, with upstream MLIR's Python names.

    from la import ir
    ctx = ir.Context()
    module = ir.Module.parse(text, ctx)
    ir.PassManager.parse("builtin.module(la-lower-to-recurrence)").run(module)
    print(module)
    pm = ir.PassManager.parse("builtin.module(la-lower-to-cpu{chunk-size=64})")
    pm.run(module, print_ir_after_all=True)      # returns the printed stages
    print(module.to_llvm_ir())
    engine = ir.ExecutionEngine(module, opt_level=3)
    engine.invoke_packed("_mlir_ciface_f", [ctypes pointers...])
"""

import ctypes
import os

from ._capi import STRING_CALLBACK, LaError, LaPipelineRunOptions, MlirStringRef, TextSink, lib

__all__ = ["Context", "Module", "PassManager", "ExecutionEngine", "LaError"]

#: MLIR's C runner utils (memrefCopy and friends), needed by lowered code.
C_RUNNER_UTILS = "/usr/lib/llvm-22/lib/libmlir_c_runner_utils.so"


class Context:
    """An MLIR context with every upstream dialect and la's."""

    def __init__(self):
        self._lib = lib()
        self._handle = self._lib.laContextCreate()
        self._modules = 0
        self._finalized = False

    def _destroy_when_unused(self):
        handle = getattr(self, "_handle", None)
        if self._finalized and self._modules == 0 and handle is not None and handle.ptr:
            self._lib.laContextDestroy(handle)
            self._handle = None

    def __del__(self):
        # A module keeps its context alive; but when both are in a reference
        # cycle (e.g. a traceback's frame), the garbage collector may finalise
        # the context first: then the last module destroys it.
        self._finalized = True
        self._destroy_when_unused()


class Module:
    """A builtin.module owned by Python."""

    def __init__(self, handle, context):
        self._handle = handle
        self.context = context  # keeps the context alive
        context._modules += 1

    @staticmethod
    def parse(text, context=None):
        """Parses and verifies ``text``; raises LaError with the diagnostics."""
        context = context or Context()
        sink = TextSink()
        handle = lib().laModuleParse(context._handle, MlirStringRef.of(text), sink.callback,
                                     None)
        if lib().laModuleIsNull(handle):
            raise LaError(sink.text().strip() or "failed to parse the module")
        return Module(handle, context)

    def __str__(self):
        return self.to_text()

    def to_text(self, generic=False):
        sink = TextSink()
        lib().laModulePrint(self._handle, generic, sink.callback, None)
        return sink.text()

    def emit_c_interface(self, function):
        """Adds llvm.emit_c_interface to ``function`` (before lowering)."""
        if not lib().laModuleEmitCInterface(self._handle,
                                            MlirStringRef.of(function)).succeeded():
            raise LaError(f"no function named {function!r}")

    def to_llvm_ir(self):
        """LLVM IR text of a module already lowered to the LLVM dialect."""
        sink = TextSink()
        if not lib().laModuleTranslateToLLVMIR(self._handle, sink.callback, None).succeeded():
            raise LaError("translation to LLVM IR failed (lower the module to the LLVM "
                          "dialect first, e.g. la-lower-to-cpu):\n" + sink.text().strip())
        return sink.text()

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle is not None and handle.ptr:
            lib().laModuleDestroy(handle)
            self._handle = None
            self.context._modules -= 1
            self.context._destroy_when_unused()


class PassManager:
    """A textual pass pipeline, run with :meth:`run`."""

    def __init__(self, pipeline):
        self.pipeline = pipeline

    @staticmethod
    def parse(pipeline):
        return PassManager(pipeline)

    def run(self, module, print_ir_after_all=False, ir_tree_dir=None, crash_reproducer=None,
            capture_after=None, capture_before=None):
        """Runs the pipeline on ``module`` in place. Raises LaError with the
        diagnostics (and the pipeline's option errors) on failure.

        * ``print_ir_after_all``: returns the IR printed after each pass;
        * ``ir_tree_dir``: writes the IR after each pass into a tree of
          files under that directory (as ``la-opt --mlir-print-ir-tree-dir``);
        * ``crash_reproducer``: a failing pass writes a reproducer (the input
          module and the pipeline) to that file;
        * ``capture_after`` / ``capture_before``: a pass argument (e.g.
          ``"convert-la-to-linalg"``); returns the list of modules (text)
          after (before) each run of that pass.
        """
        if capture_after is not None and capture_before is not None:
            raise ValueError("give capture_after or capture_before, not both")
        sink = TextSink()
        captured_parts = []

        def keep(ref, _):
            captured_parts.append(ctypes.string_at(ref.data, ref.length).decode("utf-8",
                                                                               "replace"))

        options = LaPipelineRunOptions()
        options.printIRAfterAll = bool(print_ir_after_all)
        keep_alive = []
        for field, value in (("irTreeDir", ir_tree_dir), ("crashReproducer", crash_reproducer),
                             ("capturePass", capture_after or capture_before)):
            if value is not None:
                ref = MlirStringRef.of(os.fspath(value))
                keep_alive.append(ref)
                setattr(options, field, ref)
        if capture_after is not None or capture_before is not None:
            capture = STRING_CALLBACK(keep)  # alive until the call returns
            options.capture = capture
            options.captureBefore = capture_before is not None
        result = lib().laModuleRunPipelineWithOptions(
            module._handle, MlirStringRef.of(self.pipeline), ctypes.byref(options),
            sink.callback, None)
        del keep_alive
        if not result.succeeded():
            raise LaError(sink.text().strip() or f"pipeline {self.pipeline!r} failed")
        if capture_after is not None or capture_before is not None:
            return captured_parts
        return sink.text() if print_ir_after_all else None


class ExecutionEngine:
    """JIT compilation of a module in the LLVM dialect (MLIR's ExecutionEngine)."""

    def __init__(self, module, opt_level=3, shared_libs=None):
        libs = list(shared_libs) if shared_libs is not None else (
            [C_RUNNER_UTILS] if os.path.exists(C_RUNNER_UTILS) else [])
        refs = (MlirStringRef * max(len(libs), 1))(*[MlirStringRef.of(p) for p in libs])
        sink = TextSink()
        self._module = module
        self._handle = lib().laExecutionEngineCreate(module._handle, opt_level, len(libs), refs,
                                                     sink.callback, None)
        if lib().laExecutionEngineIsNull(self._handle):
            raise LaError(sink.text().strip() or "JIT compilation failed")

    def invoke_packed(self, name, args):
        """Calls the packed wrapper of ``name``: ``args`` are pointers to the
        arguments (for memrefs: pointers to pointers to descriptors)."""
        array = (ctypes.c_void_p * max(len(args), 1))(
            *[ctypes.cast(a, ctypes.c_void_p) for a in args])
        if not lib().laExecutionEngineInvokePacked(self._handle, MlirStringRef.of(name),
                                                   array).succeeded():
            raise LaError(f"no compiled function {name!r}")

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle is not None and handle.ptr:
            lib().laExecutionEngineDestroy(handle)
            self._handle = None
