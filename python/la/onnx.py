"""ONNX's LinearAttention (opset 27) on la: import into la's MLIR, and run.

* :func:`to_mlir`: the MLIR of a model whose graph is LinearAttention nodes
  (one ``func.func @main`` with the graph's inputs and outputs: each node
  one ``la.attention`` between ``tensor.expand_shape`` /
  ``collapse_shape`` of ONNX's packed ``[B, T, H * D]`` layout);
* :func:`run`: runs such a model on NumPy inputs with la's kernels;
* ``python -m la.onnx MODEL.onnx [-o OUT.mlir]``: the import as a tool.

ONNX's update rules map onto la's variants: ``linear`` -> ``linear``,
``gated`` -> ``mamba2`` (decay ``[B, T, Hkv]``) or ``gla``
(``[B, T, Hkv * dk]``), ``delta`` -> ``deltanet``, ``gated_delta`` ->
``gated_deltanet`` or ``kda``; ``beta`` ``[B, T, 1]`` is broadcast over the
heads; ``past_state``/``present_state`` are the initial and final state;
``scale = 0`` is ``dk ** -0.5``. Grouped query heads (``q_num_heads`` a
multiple of ``kv_num_heads``, ONNX's direction of head sharing) are
``la.attention``'s grouped query heads (q with more heads than k and v).
Other ops in the graph raise :class:`la.LaError`.
"""

import argparse
import os
import sys

import numpy as np

from . import ops
from ._capi import LaError

__all__ = ["to_mlir", "run", "main"]

_RULES = {"linear": ("additive", False), "gated": ("additive", True),
          "delta": ("delta", False), "gated_delta": ("delta", True)}


def _onnx():
    try:
        import onnx
    except ImportError:
        raise LaError("la.onnx needs the onnx package (pip install onnx)") from None
    return onnx


def _load(model):
    onnx = _onnx()
    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        model = onnx.load(model)
    return model


class _Node:
    """One LinearAttention node: its inputs by role, attributes and shapes."""

    def __init__(self, node, shapes):
        onnx = _onnx()
        if node.op_type != "LinearAttention" or node.domain not in ("", "ai.onnx"):
            raise LaError(f"node {node.name or node.op_type!r}: la imports LinearAttention "
                          f"nodes only, not {node.domain + '.' if node.domain else ''}"
                          f"{node.op_type}")
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        rule = attrs.get("update_rule", b"gated_delta")
        self.rule = rule.decode() if isinstance(rule, bytes) else rule
        if self.rule not in _RULES:
            raise LaError(f"node {node.name!r}: unknown update_rule {self.rule!r}")
        if "q_num_heads" not in attrs or "kv_num_heads" not in attrs:
            raise LaError(f"node {node.name!r}: q_num_heads and kv_num_heads are required")
        self.hq, self.hkv = int(attrs["q_num_heads"]), int(attrs["kv_num_heads"])
        if self.hq <= 0 or self.hkv <= 0 or self.hq % self.hkv:
            raise LaError(f"node {node.name!r}: q_num_heads ({self.hq}) must be a positive "
                          f"multiple of kv_num_heads ({self.hkv})")
        self.scale = float(attrs.get("scale", 0.0))
        names = list(node.input) + [""] * (6 - len(node.input))
        self.query, self.key, self.value, self.past, self.decay, self.beta = names[:6]
        self.output = node.output[0]
        self.present = node.output[1] if len(node.output) > 1 else ""
        self.name = node.name
        q, v = shapes[self.query], shapes[self.value]
        if len(q) != 3 or len(v) != 3 or None in q or None in v:
            raise LaError(f"node {node.name!r}: query and value need static 3-D shapes, "
                          f"got {q} and {v}")
        self.B, self.T = q[0], q[1]
        self.dk, self.dv = q[2] // self.hq, v[2] // self.hkv
        update, gated = _RULES[self.rule]
        if gated != bool(self.decay):
            raise LaError(f"node {node.name!r}: update_rule {self.rule!r} "
                          f"{'requires' if gated else 'forbids'} the decay input")
        if (update == "delta") != bool(self.beta):
            raise LaError(f"node {node.name!r}: update_rule {self.rule!r} "
                          f"{'requires' if update == 'delta' else 'forbids'} the beta input")
        self.channel = bool(self.decay) and shapes[self.decay][2] == self.hkv * self.dk
        gate = "none" if not gated else ("channel" if self.channel else "scalar")
        self.variant = {("additive", "none"): "linear", ("additive", "scalar"): "mamba2",
                        ("additive", "channel"): "gla", ("delta", "none"): "deltanet",
                        ("delta", "scalar"): "gated_deltanet",
                        ("delta", "channel"): "kda"}[(update, gate)]

    def effective_scale(self):
        return self.scale if self.scale != 0.0 else self.dk ** -0.5


def _shapes(graph):
    onnx = _onnx()
    shapes = {}
    for value in list(graph.input) + list(graph.value_info) + list(graph.output):
        t = value.type.tensor_type
        if t.HasField("shape"):
            shapes[value.name] = [d.dim_value if d.HasField("dim_value") else None
                                  for d in t.shape.dim]
    for init in graph.initializer:
        shapes[init.name] = list(init.dims)
    del onnx
    return shapes


def _nodes(model):
    graph = model.graph
    shapes = _shapes(graph)
    return [_Node(node, shapes) for node in graph.node], shapes


# --------------------------------------------------------------------------
# running
# --------------------------------------------------------------------------

def run(model, feeds):
    """Runs ``model`` (an ONNX ModelProto or path) on ``feeds`` (a dict from
    input name to NumPy array) with la's kernels; returns the graph's
    outputs as a list, like ``onnx.reference.ReferenceEvaluator.run(None,
    feeds)``."""
    onnx = _onnx()
    model = _load(model)
    nodes, _ = _nodes(model)
    values = dict(feeds)
    for init in model.graph.initializer:
        values[init.name] = onnx.numpy_helper.to_array(init)
    for n in nodes:
        q, k, v = values[n.query], values[n.key], values[n.value]
        B, T = q.shape[0], q.shape[1]
        dtype = q.dtype
        qa = q.reshape(B, T, n.hq, n.dk).astype(np.float32)
        ka = k.reshape(B, T, n.hkv, n.dk).astype(np.float32)
        va = v.reshape(B, T, n.hkv, n.dv).astype(np.float32)
        g = beta = None
        if n.decay:
            d = values[n.decay].astype(np.float32)
            g = d.reshape(B, T, n.hkv, n.dk) if n.channel else d
        if n.beta:
            beta = np.broadcast_to(values[n.beta].astype(np.float32), (B, T, n.hkv)).copy()
        past = values[n.past].astype(np.float32) if n.past else None
        o, state = ops.attention(n.variant, qa, ka, va, g, beta, scale=n.effective_scale(),
                                 initial_state=past, output_final_state=bool(n.present))
        values[n.output] = o.reshape(B, T, n.hq * n.dv).astype(dtype)
        if n.present:
            state_dtype = values[n.past].dtype if n.past else dtype
            values[n.present] = state.astype(state_dtype)
    return [values[o.name] for o in model.graph.output]


# --------------------------------------------------------------------------
# importing into MLIR
# --------------------------------------------------------------------------

_ELEMENT = {1: "f32", 10: "f16", 16: "bf16"}


def _type(shape, element):
    return "tensor<" + "x".join(str(d) for d in shape) + "x" + element + ">"


def to_mlir(model):
    """The MLIR of ``model`` (a ModelProto or path) in la's dialect: one
    ``func.func @main`` whose arguments are the graph's inputs and whose
    results are its outputs, one ``la.attention`` per LinearAttention node."""
    model = _load(model)
    graph = model.graph
    nodes, shapes = _nodes(model)
    elements = {}
    for value in list(graph.input) + list(graph.output):
        elem = value.type.tensor_type.elem_type
        if value.name in [i.name for i in graph.input] and elem not in _ELEMENT:
            raise LaError(f"input {value.name!r}: element type {elem} is not f32, f16 or bf16")
        elements[value.name] = _ELEMENT.get(elem, "f32")
    lines, ssa = [], {}
    args = []
    for i, value in enumerate(graph.input):
        shape = shapes.get(value.name)
        if shape is None or None in shape:
            raise LaError(f"input {value.name!r} needs a static shape")
        ssa[value.name] = f"%arg{i}"
        args.append(f"%arg{i}: {_type(shape, elements[value.name])}")
    counter = [0]

    def fresh():
        counter[0] += 1
        return f"%v{counter[0]}"

    result_types = {}
    for n in nodes:
        elem = elements[n.query]
        if elements[n.key] != elem or elements[n.value] != elem:
            raise LaError(f"node {n.name!r}: query, key and value must have one element type")
        B, T = n.B, n.T

        def expand(name, heads, dim, element):
            out = fresh()
            lines.append(f"  {out} = tensor.expand_shape {ssa[name]} [[0], [1], [2, 3]] "
                         f"output_shape [{B}, {T}, {heads}, {dim}] : "
                         f"{_type([B, T, heads * dim], element)} into "
                         f"{_type([B, T, heads, dim], element)}")
            return out, _type([B, T, heads, dim], element)

        q, qt = expand(n.query, n.hq, n.dk, elem)
        k, _ = expand(n.key, n.hkv, n.dk, elem)
        v, vt = expand(n.value, n.hkv, n.dv, elem)
        groups = []
        if n.decay:
            if elements.get(n.decay, "f32") != "f32":
                raise LaError(f"node {n.name!r}: decay must be f32")
            if n.channel:
                g, gt = expand(n.decay, n.hkv, n.dk, "f32")
            else:
                g, gt = ssa[n.decay], _type([B, T, n.hkv], "f32")
            groups.append(f"g({g} : {gt})")
        if n.beta:
            bt = _type([B, T, n.hkv], "f32")
            if shapes[n.beta][2] == n.hkv:
                beta = ssa[n.beta]
            else:
                flat, empty, beta = fresh(), fresh(), fresh()
                lines.append(f"  {flat} = tensor.collapse_shape {ssa[n.beta]} [[0], [1, 2]] : "
                             f"{_type([B, T, 1], 'f32')} into {_type([B, T], 'f32')}")
                lines.append(f"  {empty} = tensor.empty() : {bt}")
                lines.append(f"  {beta} = linalg.broadcast ins({flat} : {_type([B, T], 'f32')}) "
                             f"outs({empty} : {bt}) dimensions = [2]")
            groups.append(f"beta({beta} : {bt})")
        st = _type([B, n.hkv, n.dk, n.dv], "f32")
        if n.past:
            if elements.get(n.past, "f32") != "f32":
                raise LaError(f"node {n.name!r}: past_state must be f32")
            groups.append(f"initial_state({ssa[n.past]} : {st})")
        o4 = fresh()
        o4t = _type([B, T, n.hq, n.dv], elem)
        results = [o4]
        types = [o4t]
        if n.present:
            state = fresh()
            results.append(state)
            types.append(st)
        attrs = "{scale = %s : f32}" % repr(float(np.float32(n.effective_scale())))
        lines.append(f"  {', '.join(results)} = la.attention {n.variant} {q}, {k}, {v} "
                     f"{' '.join(groups)} {attrs} : {qt}, {_type([B, T, n.hkv, n.dk], elem)}, "
                     f"{vt} -> {', '.join(types)}")
        out = fresh()
        ot = _type([B, T, n.hq * n.dv], elem)
        lines.append(f"  {out} = tensor.collapse_shape {o4} [[0], [1], [2, 3]] : {o4t} into {ot}")
        ssa[n.output], result_types[n.output] = out, ot
        if n.present:
            ssa[n.present], result_types[n.present] = state, st
    outputs = [o.name for o in graph.output]
    for name in outputs:
        if name not in result_types:
            raise LaError(f"output {name!r} is not computed by a LinearAttention node")
    ret_types = ", ".join(result_types[name] for name in outputs)
    header = (f"func.func @main({', '.join(args)}) -> ({ret_types}) "
              "attributes {llvm.emit_c_interface} {")
    body = "\n".join(lines)
    ret = f"  return {', '.join(ssa[name] for name in outputs)} : {ret_types}"
    return f"{header}\n{body}\n{ret}\n}}\n"


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m la.onnx",
        description="Import an ONNX model of LinearAttention nodes into la's MLIR.")
    parser.add_argument("model", help="the .onnx file")
    parser.add_argument("-o", "--output", help="write the MLIR here (default: stdout)")
    args = parser.parse_args(argv)
    try:
        text = to_mlir(args.model)
    except (LaError, OSError) as error:
        print(f"la.onnx: {error}", file=sys.stderr)
        return 1
    if args.output:
        # Written whole or not at all: a temporary file renamed into place.
        temporary = f"{args.output}.tmp-{os.getpid()}"
        try:
            with open(temporary, "w") as f:
                f.write(text)
            os.replace(temporary, args.output)
        except OSError as error:
            if os.path.exists(temporary):
                os.remove(temporary)
            print(f"la.onnx: cannot write {args.output!r}: {error}", file=sys.stderr)
            return 1
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
