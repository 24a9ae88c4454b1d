"""The op methods of ``pygraph`` that 1.32 added and that need more than cuDNN 9.19 on Hopper:
``rope`` / ``rope_backward`` (cuDNN >= 9.24 / 9.25) and the linear-attention families (``gdn``,
``gdn2``, ``gdp``, ``kda``, ``mamba2`` and their ``_bwd``, ``_summary``, ``_summary_bwd``),
which the official serves with Python engines for Blackwell GPUs.

Signatures follow 1.32's positional order (tensor inputs, then attributes); ``name``,
``compute_data_type`` and ``out_dims`` are keyword-only. The graph validates them and infers
their outputs on any machine; the build refuses what the loaded cuDNN cannot run.
"""

from __future__ import annotations

import inspect
from typing import Any

from ..families.gated_nodes import LA_SPECS, LASpec, LinearAttention, Rope
from ..model.tensor import NOT_SET, Tensor
from .method_table import op, register


def _out_dims(outputs: list[Tensor], ports: list[str], out_dims: Any, at: str) -> None:
    """``out_dims``: dims for a single output, or {port: dims}."""
    if out_dims is None:
        return
    chosen = out_dims if isinstance(out_dims, dict) else {ports[0]: out_dims}
    if not isinstance(out_dims, dict) and len(ports) != 1:
        raise TypeError(f"{at}: out_dims for an op of several outputs must be a dict {{port: dims}}, got {out_dims!r}")
    for port, dims in chosen.items():
        if port not in ports:
            raise TypeError(f"{at}: out_dims names {port!r}, not an output of this call (outputs: {ports})")
        outputs[ports.index(port)].set_dim(list(dims))


def _rope(self: Any, op_name: str, x: Any, x_arg: str, freqs: Any, output_scale: Any, rope_dim: Any,
          name: str, compute_data_type: Any, out_dims: Any) -> Tensor:
    name = self.node_name(name)
    at = f"{op_name} {name!r}"
    node = Rope(name, self.input_tensor(x, at, x_arg), self.input_tensor(freqs, at, "freqs"), output_scale,
                rope_dim, compute_data_type, backward=op_name == "rope_backward")
    out = self.add_node(node, [node.out_port])
    _out_dims(out, [node.out_port], out_dims, at)
    return out[0]


@op
def rope(self: Any, input: Any, freqs: Any, output_scale: float = 1.0, rope_dim: int | None = None, *,
         name: str = "", compute_data_type: Any = NOT_SET, out_dims: Any = None) -> Tensor:
    """Rotary position embedding of ``input`` [B, H, S, D] by the angles ``freqs`` [S, 1, 1, D];
    ``rope_dim`` trailing slots rotate (default D), all are scaled by ``output_scale``. Needs
    cuDNN >= 9.24 to build."""
    return _rope(self, "rope", input, "input", freqs, output_scale, rope_dim, name, compute_data_type, out_dims)


@op
def rope_backward(self: Any, dY: Any, freqs: Any, output_scale: float = 1.0, rope_dim: int | None = None, *,
                  name: str = "", compute_data_type: Any = NOT_SET, out_dims: Any = None) -> Tensor:
    """The gradient of ``rope``: DX from ``dY`` and the same ``freqs``. Needs cuDNN >= 9.25."""
    return _rope(self, "rope_backward", dY, "dY", freqs, output_scale, rope_dim, name, compute_data_type, out_dims)


def _linear_attention_method(spec: LASpec) -> Any:
    P = inspect.Parameter
    params = [P("self", P.POSITIONAL_OR_KEYWORD)]
    params += [P(p, P.POSITIONAL_OR_KEYWORD, **({} if i < spec.required else {"default": None}))
               for i, p in enumerate(spec.inputs)]
    params += [P(a, P.POSITIONAL_OR_KEYWORD, default=d) for a, d in spec.attrs]
    params += [P("name", P.KEYWORD_ONLY, default=""), P("compute_data_type", P.KEYWORD_ONLY, default=NOT_SET),
               P("out_dims", P.KEYWORD_ONLY, default=None)]
    signature = inspect.Signature(params, return_annotation=list)

    def method(*args: Any, **kwargs: Any) -> list[Tensor | None]:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{spec.op}(): {exc}") from None
        bound.apply_defaults()
        a = bound.arguments
        self = a["self"]
        name = self.node_name(a["name"])
        at = f"{spec.op} {name!r}"
        inputs = {p: self.input_tensor(a[p], at, p) for p in spec.inputs if a[p] is not None}
        node = LinearAttention(name, spec, inputs, {k: a[k] for k, _ in spec.attrs}, a["compute_data_type"])
        ports = node.output_ports()
        made = self.add_node(node, ports)
        _out_dims(made, ports, a["out_dims"], at)
        by_port = dict(zip(ports, made))
        return [by_port.get(port) for port, _ in spec.outputs]

    outs = ", ".join(port for port, _ in spec.outputs)
    method.__name__ = method.__qualname__ = spec.op
    method.__signature__ = signature  # type: ignore[attr-defined]
    method.__doc__ = (f"Linear attention {spec.op}; returns [{outs}] (None where the call makes no such output). "
                      "Validated and shape-inferred here; the build refuses it (the official serves it with "
                      "Python engines for Blackwell GPUs).")
    return method


for _spec in LA_SPECS.values():
    register(_spec.op, _linear_attention_method(_spec))
