#!/usr/bin/env python3
"""Write the kernels that `gpu-module-to-binary` embedded in an MLIR file.

Reads MLIR text (a file or stdin) holding `gpu.binary` ops and writes each
`#gpu.object`'s payload, unescaped, to OUTDIR/<binary>.<n>.{ptx,cubin,bin}
(PTX for `format=isa`, cubin for `format=bin`), printing the paths. With
`--print`, PTX is written to stdout instead. Used by the lit tests (to run
ptxas -v on the PTX) and by hand to inspect a kernel.
"""

import argparse
import os
import re
import sys

_BINARY = re.compile(r"gpu\.binary @([\w$.]+)")
_OBJECT = re.compile(
    r'#gpu\.object<#nvvm\.target<[^>]*>(?:, properties = \{[^}]*\})?,\s*'
    r'(?:(assembly|bin|offload|fatbin) = )?"((?:[^"\\]|\\.)*)"'
)


def unescape(text):
    """MLIR string escapes (\\XX hex, \\\\, \\") to bytes."""
    out = bytearray()
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\":
            out += c.encode()
            i += 1
        elif text[i + 1] in '\\"nt':
            out += {"\\": b"\\", '"': b'"', "n": b"\n", "t": b"\t"}[text[i + 1]]
            i += 2
        else:
            out.append(int(text[i + 1 : i + 3], 16))
            i += 3
    return bytes(out)


def objects(mlir):
    """(binary name, kind, payload bytes) for every object in `mlir`."""
    found = []
    for binary in _BINARY.finditer(mlir):
        end = mlir.find("\n", binary.end())
        line = mlir[binary.end() : end if end >= 0 else len(mlir)]
        for obj in _OBJECT.finditer(line):
            kind = obj.group(1) or "bin"
            found.append((binary.group(1), kind, unescape(obj.group(2))))
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("input", nargs="?", default="-")
    parser.add_argument("-o", "--outdir", default=".")
    parser.add_argument("--print", action="store_true", help="PTX to stdout")
    args = parser.parse_args()
    text = sys.stdin.read() if args.input == "-" else open(args.input).read()
    found = objects(text)
    if not found:
        print("extract-gpu-objects: no gpu.binary object found", file=sys.stderr)
        return 1
    for n, (name, kind, payload) in enumerate(found):
        if args.print:
            if kind != "assembly":
                print(f"extract-gpu-objects: {name} is {kind}, not PTX", file=sys.stderr)
                return 1
            sys.stdout.write(payload.decode())
            continue
        suffix = {"assembly": "ptx", "bin": "cubin"}.get(kind, "bin")
        path = os.path.join(args.outdir, f"{name}.{n}.{suffix}")
        with open(path, "wb") as f:
            f.write(payload)
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
