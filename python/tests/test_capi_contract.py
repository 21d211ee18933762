"""The C API's contract (include/la-c/La.h): null handles, null strings and
null callbacks fail or do nothing, with a message where there is a callback;
none crashes. Each call runs in a child process, so a crash is a failed test
instead of a dead pytest."""

import os
import subprocess
import sys
import textwrap

import pytest

from la import _capi

pytestmark = pytest.mark.skipif(_capi.library_path() is None, reason="libLaCAPI.so is not built")

_PRELUDE = textwrap.dedent("""
    import ctypes
    from la import _capi
    from la._capi import (MlirContext, MlirModule, MlirStringRef, LaExecutionEngine,
                          MlirDialectRegistry, STRING_CALLBACK, TextSink)
    lib = _capi.lib()
    lib.laRegisterAllDialects.restype = None
    lib.laRegisterAllDialects.argtypes = [MlirDialectRegistry]
    sink = TextSink()
    NULL_CALLBACK = ctypes.cast(None, STRING_CALLBACK)
    null_module, null_context, null_engine = MlirModule(None), MlirContext(None), LaExecutionEngine(None)
    null_text = MlirStringRef(None, 0)
    text = MlirStringRef.of
""")

# (call, what the child prints on success)
_CASES = {
    "parse_null_context": """
        m = lib.laModuleParse(null_context, text("module {}"), sink.callback, None)
        assert lib.laModuleIsNull(m)
        assert "laModuleParse: the context is null" in sink.text(), sink.text()
    """,
    "parse_null_source": """
        ctx = lib.laContextCreate()
        m = lib.laModuleParse(ctx, MlirStringRef(None, 5), sink.callback, None)
        assert lib.laModuleIsNull(m)
        assert "the source text is null" in sink.text(), sink.text()
        lib.laContextDestroy(ctx)
    """,
    "parse_error_null_callback": """
        ctx = lib.laContextCreate()
        m = lib.laModuleParse(ctx, text("func.func @f( {"), NULL_CALLBACK, None)
        assert lib.laModuleIsNull(m)
        lib.laContextDestroy(ctx)
    """,
    "print_null_module": """
        lib.laModulePrint(null_module, False, sink.callback, None)
        lib.laModulePrint(null_module, False, NULL_CALLBACK, None)
        assert "laModulePrint: the module is null" in sink.text(), sink.text()
    """,
    "run_pipeline_null_module": """
        r = lib.laModuleRunPipeline(null_module, text("builtin.module(canonicalize)"), False,
                                    sink.callback, None)
        assert not r.succeeded()
        assert "laModuleRunPipeline: the module is null" in sink.text(), sink.text()
    """,
    "run_pipeline_null_text_and_callback": """
        ctx = lib.laContextCreate()
        m = lib.laModuleParse(ctx, text("module {}"), NULL_CALLBACK, None)
        assert not lib.laModuleRunPipeline(m, null_text, False, NULL_CALLBACK, None).succeeded()
        # A bad pipeline and a failing pass with a null callback.
        assert not lib.laModuleRunPipeline(m, text("builtin.module(nope)"), False,
                                           NULL_CALLBACK, None).succeeded()
        lib.laModuleDestroy(m)
        lib.laContextDestroy(ctx)
    """,
    "emit_c_interface_null": """
        assert not lib.laModuleEmitCInterface(null_module, text("f")).succeeded()
        ctx = lib.laContextCreate()
        m = lib.laModuleParse(ctx, text("module {}"), NULL_CALLBACK, None)
        assert not lib.laModuleEmitCInterface(m, null_text).succeeded()
        assert not lib.laModuleEmitCInterface(m, text("missing")).succeeded()
        lib.laModuleDestroy(m)
        lib.laContextDestroy(ctx)
    """,
    "translate_null_module": """
        assert not lib.laModuleTranslateToLLVMIR(null_module, sink.callback, None).succeeded()
        assert not lib.laModuleTranslateToLLVMIR(null_module, NULL_CALLBACK, None).succeeded()
        assert "laModuleTranslateToLLVMIR: the module is null" in sink.text(), sink.text()
    """,
    "engine_null_module": """
        e = lib.laExecutionEngineCreate(null_module, 2, 0, None, sink.callback, None)
        assert lib.laExecutionEngineIsNull(e)
        assert "laExecutionEngineCreate: the module is null" in sink.text(), sink.text()
    """,
    "engine_null_library_list": """
        ctx = lib.laContextCreate()
        m = lib.laModuleParse(ctx, text("module {}"), NULL_CALLBACK, None)
        e = lib.laExecutionEngineCreate(m, 2, 3, None, sink.callback, None)
        assert lib.laExecutionEngineIsNull(e)
        assert "the shared library list is null" in sink.text(), sink.text()
        paths = (MlirStringRef * 1)(MlirStringRef(None, 0))
        e = lib.laExecutionEngineCreate(m, 2, 1, paths, NULL_CALLBACK, None)
        assert lib.laExecutionEngineIsNull(e)
        lib.laModuleDestroy(m)
        lib.laContextDestroy(ctx)
    """,
    "invoke_null_engine": """
        assert not lib.laExecutionEngineInvokePacked(null_engine, text("f"), None).succeeded()
    """,
    "destroy_and_register_null": """
        lib.laModuleDestroy(null_module)
        lib.laExecutionEngineDestroy(null_engine)
        lib.laContextDestroy(null_context)
        lib.laRegisterAllDialects(MlirDialectRegistry(None))
    """,
}


def _run_python(code):
    """Runs ``code`` in a child process and checks that it printed "ok" last."""
    python_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([python_dir, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), \
        f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr[-3000:]}"


@pytest.mark.parametrize("case", sorted(_CASES))
def test_null_arguments(case):
    _run_python(_PRELUDE + textwrap.dedent(_CASES[case]) + "\nprint('ok')\n")


def test_garbage_collected_cycles_destroy_the_context_last():
    # A module and its context in one reference cycle (as in a traceback that
    # holds a compile's frame): the garbage collector may finalise the
    # context first, and the module must still be destroyed before it (this
    # crashed when la.gpu's failed compiles were collected).
    code = textwrap.dedent("""
        import gc
        from la import ir

        class Holder:
            pass

        for _ in range(20):
            holder = Holder()
            module = ir.Module.parse("module {}")
            holder.context, holder.module, holder.cycle = module.context, module, holder
            module.context.holder = holder
            del holder, module
        gc.collect()
        print("ok")
    """)
    _run_python(code)


def test_large_texts_arrive_whole():
    # Printing, translation and --print-ir-after-all go through a buffered
    # stream (one callback per 64 KiB, not per token): a module of several
    # buffers prints and translates to the whole text, in few callbacks, and
    # prints the same after a round trip.
    code = textwrap.dedent("""
        import ctypes
        from la import ir
        from la._capi import LaPipelineRunOptions, MlirStringRef, TextSink, lib

        names = ["g%05d_" % i + "x" * (i % 7) for i in range(6000)]
        body = "\\n".join("llvm.mlir.global internal constant @%s(%d.0 : f32) "
                           "{addr_space = 0 : i32} : f32" % (n, i) for i, n in enumerate(names))
        module = ir.Module.parse("module {\\n" + body + "\\n}")
        text = module.to_text()
        assert len(text) > 4 * 65536, len(text)
        assert text.count("llvm.mlir.global") == len(names)
        for i in (0, 1, 2999, 5999):
            assert "@%s(" % names[i] in text, names[i]
        assert ir.Module.parse(text).to_text() == text
        sink = TextSink()
        lib().laModulePrint(module._handle, False, sink.callback, None)
        assert sink.text() == text and len(sink.parts) < 64, len(sink.parts)
        llvm = module.to_llvm_ir()
        assert llvm.count(" = internal constant float ") == len(names)
        assert llvm.rstrip().endswith('!{i32 2, !"Debug Info Version", i32 3}'), llvm[-200:]
        # --print-ir-after-all: the module after each of two passes that
        # change it (a dump is printed on a change only).
        function = ("func.func @f() -> i32 { %a = arith.constant 1 : i32\\n"
                    "%b = arith.constant 1 : i32\\n%c = arith.addi %a, %b : i32\\n"
                    "return %c : i32 }")
        module = ir.Module.parse("module {\\n" + body + "\\n" + function + "\\n}")
        options = LaPipelineRunOptions()
        options.printIRAfterAll = True
        sink = TextSink()
        assert lib().laModuleRunPipelineWithOptions(
            module._handle, MlirStringRef.of("builtin.module(cse,canonicalize)"),
            ctypes.byref(options), sink.callback, None).succeeded()
        dumps = sink.text()
        assert dumps.count("IR Dump After") == 2 and dumps.count("llvm.mlir.global") == 2 * len(names)
        assert len(sink.parts) < 128, len(sink.parts)
        print("ok")
    """)
    _run_python(code)


def test_text_sink_joins_bytes_before_decoding():
    # The C side may cut its text anywhere, inside a UTF-8 character too.
    sink = _capi.TextSink()
    data = "\u00e9t\u00e9 \u4e2d\u6587".encode()
    for i in range(len(data)):
        sink.callback(_capi.MlirStringRef.of(data[i:i + 1]), None)
    assert sink.text() == "\u00e9t\u00e9 \u4e2d\u6587"
