# -*- Python -*-
import os

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "LA"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test", ".py"]
config.excludes = ["Inputs", "lib", "corpus", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.la_obj_root, "test")

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%la_src_root", config.la_src_root))
config.substitutions.append(("%la_obj_root", config.la_obj_root))
config.substitutions.append(("%la_lib_dir", config.la_lib_dir))
config.substitutions.append(("%mlir_dir", config.mlir_dir))
config.substitutions.append(("%cmake", config.cmake_executable))
config.substitutions.append(("%cxx", config.cxx_compiler))
config.substitutions.append(("%c_compiler", config.c_compiler))
config.substitutions.append(("%python", config.python_executable))

# Sanitizer builds: stock mlir-opt cannot load an instrumented plugin, and the
# consumer project would need the same flags.
if config.la_sanitize:
    config.available_features.add("sanitizers")

# The CUDA toolkit's ptxas (format=bin and the ptxas -v checks); the same
# lookup as la-lower-to-nvvm's cuda-toolkit default.
_cuda = next((os.environ[v] for v in ("CUDA_ROOT", "CUDA_HOME", "CUDA_PATH")
              if os.environ.get(v)), "/usr/local/cuda")
_ptxas = os.path.join(_cuda, "bin", "ptxas")
if os.access(_ptxas, os.X_OK):
    config.available_features.add("ptxas")
    config.substitutions.append(("%ptxas", _ptxas))
config.substitutions.append(
    ("%extract_gpu_objects",
     config.python_executable + " " + os.path.join(config.la_src_root, "scripts",
                                                   "extract-gpu-objects.py")))

llvm_config.with_system_environment(["HOME", "INCLUDE", "LIB", "TMP", "TEMP", "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"])
llvm_config.use_default_substitutions()

llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PYTHONPATH", os.path.join(config.la_src_root, "python"),
                             append_path=True)

tools = [
    "la-opt",
    "la-run",
    "la-pipeline-doc",
    "la-cuda-info",
    ToolSubst("mlir-opt", os.path.join(config.llvm_tools_dir, "mlir-opt")),
    ToolSubst("mlir-translate", os.path.join(config.llvm_tools_dir, "mlir-translate")),
    ToolSubst("llvm-nm", os.path.join(config.llvm_tools_dir, "llvm-nm")),
    ToolSubst("mlir-runner", os.path.join(config.llvm_tools_dir, "mlir-runner")),
]
llvm_config.add_tool_substitutions(tools, [config.la_tools_dir, config.llvm_tools_dir])
