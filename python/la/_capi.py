"""ctypes bindings of la's C API (include/la-c/La.h, libLaCAPI.so).

The library is looked up in this order: ``$LA_CAPI_LIB``; next to this file
(an installed wheel); ``$LA_BUILD_DIR/lib``; ``<repo>/build/lib``.
"""

import ctypes
import glob
import os

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(_HERE))
_NAME = "libLaCAPI.so"


class LaError(RuntimeError):
    """An error reported by the compiler (parse, verify, pass or JIT)."""


def find_library(name, env_var, here=_HERE, repo=_REPO):
    """Path of the shared library ``name`` of la's build, or None: ``$env_var``,
    next to the package ``here`` (an installed wheel; also a versioned
    ``name.<version>``), ``$LA_BUILD_DIR/lib``, ``<repo>/build/lib``."""
    candidates = [os.environ.get(env_var), os.path.join(here, name)]
    candidates += sorted(glob.glob(os.path.join(here, name + ".*")))
    if os.environ.get("LA_BUILD_DIR"):
        candidates.append(os.path.join(os.environ["LA_BUILD_DIR"], "lib", name))
    candidates.append(os.path.join(repo, "build", "lib", name))
    for path in candidates:
        if path and os.path.isfile(path):
            return path
    return None


def library_path():
    """Path of libLaCAPI.so, or None when it cannot be found."""
    return find_library(_NAME, "LA_CAPI_LIB", _HERE, _REPO)


class MlirStringRef(ctypes.Structure):
    _fields_ = [("data", ctypes.c_char_p), ("length", ctypes.c_size_t)]

    @classmethod
    def of(cls, text):
        data = text.encode() if isinstance(text, str) else bytes(text)
        ref = cls(data, len(data))
        ref._keep = data  # the bytes must outlive the call
        return ref


class _Handle(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p)]


class MlirContext(_Handle):
    pass


class MlirModule(_Handle):
    pass


class MlirDialectRegistry(_Handle):
    pass


class LaExecutionEngine(_Handle):
    pass


class MlirLogicalResult(ctypes.Structure):
    _fields_ = [("value", ctypes.c_int8)]

    def succeeded(self):
        return self.value != 0


STRING_CALLBACK = ctypes.CFUNCTYPE(None, MlirStringRef, ctypes.c_void_p)


class LaPipelineRunOptions(ctypes.Structure):
    """La.h's LaPipelineRunOptions."""
    _fields_ = [("printIRAfterAll", ctypes.c_bool), ("irTreeDir", MlirStringRef),
                ("crashReproducer", MlirStringRef), ("capturePass", MlirStringRef),
                ("captureBefore", ctypes.c_bool), ("capture", STRING_CALLBACK),
                ("captureUserData", ctypes.c_void_p)]


class LaVariantInfo(ctypes.Structure):
    """La.h's LaVariantInfo (static strings owned by the library)."""
    _fields_ = [("keyword", ctypes.c_char_p), ("update", ctypes.c_char_p),
                ("gate", ctypes.c_char_p), ("summary", ctypes.c_char_p)]


class TextSink:
    """Collects the text a C API call sends to an MlirStringCallback."""

    def __init__(self):
        self.parts = []
        self.callback = STRING_CALLBACK(self._append)

    def _append(self, ref, _):
        # Bytes: a buffered C stream may split a UTF-8 character between calls.
        self.parts.append(ctypes.string_at(ref.data, ref.length))

    def text(self):
        return b"".join(self.parts).decode("utf-8", "replace")


_lib = None


def lib():
    """The loaded C API library (raises LaError when it is not built)."""
    global _lib
    if _lib is not None:
        return _lib
    path = library_path()
    if path is None:
        raise LaError(
            "libLaCAPI.so not found: build the project (scripts/build.sh), "
            "pip install the package, or set LA_CAPI_LIB"
        )
    # RTLD_LOCAL: la's LLVM (libLLVM.so, a dependency) must not serve other
    # libraries' symbol lookups; libtriton.so, which exports its own LLVM,
    # crashed in its static initialisers when bound to ours.
    handle = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
    sigs = {
        "laRegisterAllPasses": (None, []),
        "laGetNumVariants": (ctypes.c_ssize_t, []),
        "laHostVectorBits": (ctypes.c_ssize_t, []),
        "laGetVariant": (ctypes.c_bool, [ctypes.c_ssize_t, ctypes.POINTER(LaVariantInfo)]),
        "laContextCreate": (MlirContext, []),
        "laContextDestroy": (None, [MlirContext]),
        "laModuleParse": (MlirModule, [MlirContext, MlirStringRef, STRING_CALLBACK,
                                       ctypes.c_void_p]),
        "laModuleDestroy": (None, [MlirModule]),
        "laModuleIsNull": (ctypes.c_bool, [MlirModule]),
        "laModulePrint": (None, [MlirModule, ctypes.c_bool, STRING_CALLBACK, ctypes.c_void_p]),
        "laModuleRunPipeline": (MlirLogicalResult, [MlirModule, MlirStringRef, ctypes.c_bool,
                                                    STRING_CALLBACK, ctypes.c_void_p]),
        "laModuleRunPipelineWithOptions": (MlirLogicalResult,
                                           [MlirModule, MlirStringRef,
                                            ctypes.POINTER(LaPipelineRunOptions),
                                            STRING_CALLBACK, ctypes.c_void_p]),
        "laRegisterAllDialects": (None, [MlirDialectRegistry]),
        "laModuleEmitCInterface": (MlirLogicalResult, [MlirModule, MlirStringRef]),
        "laModuleTranslateToLLVMIR": (MlirLogicalResult, [MlirModule, STRING_CALLBACK,
                                                          ctypes.c_void_p]),
        "laExecutionEngineCreate": (LaExecutionEngine,
                                    [MlirModule, ctypes.c_int, ctypes.c_int,
                                     ctypes.POINTER(MlirStringRef), STRING_CALLBACK,
                                     ctypes.c_void_p]),
        "laExecutionEngineIsNull": (ctypes.c_bool, [LaExecutionEngine]),
        "laExecutionEngineDestroy": (None, [LaExecutionEngine]),
        "laExecutionEngineInvokePacked": (MlirLogicalResult,
                                          [LaExecutionEngine, MlirStringRef,
                                           ctypes.POINTER(ctypes.c_void_p)]),
    }
    for name, (restype, argtypes) in sigs.items():
        function = getattr(handle, name)
        function.restype = restype
        function.argtypes = argtypes
    _lib = handle
    return _lib
