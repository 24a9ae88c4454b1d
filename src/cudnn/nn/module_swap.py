"""``cudnn.nn.convert(model)``: swap the modules cudnn-py has a fused graph for, leave the rest.

- ``nn.LayerNorm`` -> `LayerNorm`, ``nn.RMSNorm`` -> `RMSNorm` (same parameters, in place);
- ``nn.MultiheadAttention`` -> `RoutedMultiheadAttention` (the same module, whose calls
  without attention weights run cuDNN's attention, or torch's SDPA after a warning where
  cuDNN does not cover them), unless ``attention=False``;
- in eval mode, Conv2d -> BatchNorm2d [-> ReLU] chains found by tracing the model with
  ``torch.fx`` become one `Conv2dBiasAct` with the batch norm folded into its weight and bias
  (inference only: folding freezes the running statistics). The model is then returned as
  the traced ``GraphModule``; a model fx cannot trace keeps its structure and only its
  ``nn.Sequential`` runs are folded;
- the model's calls of ``torch.nn.functional.scaled_dot_product_attention`` run through
  `cudnn.ops.scaled_dot_product_attention`: its forward runs in `sdpa_kernel`
  ``(fallback=True)``, so a call cuDNN does not cover runs torch's SDPA after a warning. By
  default this is done when tracing the model with ``torch.fx`` finds such a call;
  ``attention=True`` / ``False`` decides instead (a model fx cannot trace needs ``True``).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import fx, nn

from .modules import Conv2dBiasAct, LayerNorm, RMSNorm, RoutedMultiheadAttention
from .sdpa import route_attention

_RELU_FUNCTIONS = (F.relu, torch.relu, torch.relu_)


def convert(model: nn.Module, inplace: bool = False, attention: bool | None = None) -> nn.Module:
    """``model`` with its eligible modules swapped for cudnn.nn ones and, per ``attention``
    (None: when it has SDPA call sites), its attention routed to cuDNN (see the module's note).
    Unless ``inplace``, the model is copied first."""
    if not inplace:
        model = copy.deepcopy(model)
    _swap_modules(model, attention is not False)
    if type(model) is nn.MultiheadAttention and attention is not False:
        model.__class__ = RoutedMultiheadAttention
    graph = _trace(model)
    if not model.training:
        if graph is None:
            _fold_sequentials(model)
        else:
            model = fx.GraphModule(model, graph)
            _fold_traced(model)
    if attention or (attention is None and _calls_attention(graph)):
        route_attention(model)
    return model


def _trace(model: nn.Module) -> fx.Graph | None:
    """The model's fx graph, or None when fx cannot trace it (data-dependent control flow)."""
    try:
        return _Tracer().trace(model)
    except Exception:  # noqa: BLE001 - untraceable: the caller does what needs no graph
        return None


def _calls_attention(graph: fx.Graph | None) -> bool:
    """Whether the model's traced graph calls torch's SDPA."""
    return graph is not None and any(n.op == "call_function" and n.target is F.scaled_dot_product_attention
                                     for n in graph.nodes)


class _Tracer(fx.Tracer):
    """Keeps cudnn.nn modules whole (their forward checks tensor attributes fx cannot trace)."""

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return type(m).__module__ == "cudnn.nn.modules" or super().is_leaf_module(m, qualname)


def _swap_modules(module: nn.Module, attention: bool) -> None:
    """Swap the norms of ``module``'s tree for cudnn.nn ones and, with ``attention``, turn its
    multi-head attention modules into `RoutedMultiheadAttention`."""
    for name, child in module.named_children():
        new: nn.Module | None = None
        if type(child) is nn.MultiheadAttention and attention:
            child.__class__ = RoutedMultiheadAttention  # a subclass adding no state: hooks and parameters stay
            continue
        if type(child) is nn.LayerNorm:
            new = LayerNorm(child.normalized_shape, child.eps, child.elementwise_affine,
                            bias=child.bias is not None)
        elif type(child) is nn.RMSNorm:
            new = RMSNorm(child.normalized_shape, child.eps, child.elementwise_affine)
        if new is None:
            _swap_modules(child, attention)
            continue
        new.load_state_dict(child.state_dict())
        ref = next(iter(child.parameters()), None)
        if ref is not None:
            new.to(device=ref.device, dtype=ref.dtype)
        new.train(child.training)
        setattr(module, name, new)


def _foldable(conv: nn.Module, bn: nn.Module) -> bool:
    return (type(conv) is nn.Conv2d and type(bn) is nn.BatchNorm2d and bn.running_mean is not None
            and bn.running_var is not None and bn.num_features == conv.out_channels)


def fold(conv: nn.Conv2d, bn: nn.BatchNorm2d, act: str) -> Conv2dBiasAct:
    """One Conv2dBiasAct computing ``act(bn(conv(x)))`` with bn's running statistics."""
    w = conv.weight.detach().float()
    scale = (bn.running_var.float() + bn.eps).rsqrt()
    if bn.weight is not None:
        scale = scale * bn.weight.detach().float()
    bias = -bn.running_mean.float() * scale
    if conv.bias is not None:
        bias = bias + conv.bias.detach().float() * scale
    if bn.bias is not None:
        bias = bias + bn.bias.detach().float()
    fused = Conv2dBiasAct(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                          conv.dilation, conv.groups, True, conv.padding_mode, device=w.device,
                          dtype=conv.weight.dtype, act=act)
    with torch.no_grad():
        fused.weight.copy_(w * scale.reshape(-1, 1, 1, 1))
        fused.bias.copy_(bias)
    return fused.eval()


def _is_relu(node: fx.Node, modules: dict[str, nn.Module]) -> bool:
    if node.op == "call_module":
        return type(modules.get(node.target)) is nn.ReLU
    if node.op == "call_function":
        return node.target in _RELU_FUNCTIONS
    return node.op == "call_method" and node.target in ("relu", "relu_")


def _fold_traced(gm: fx.GraphModule) -> None:
    modules = dict(gm.named_modules())
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op != "call_module" or len(node.users) != 1:
            continue
        bn_node = next(iter(node.users))
        if bn_node.op != "call_module" or not _foldable(modules[node.target], modules.get(bn_node.target)):
            continue
        last, act = bn_node, "none"
        if len(bn_node.users) == 1 and _is_relu(next(iter(bn_node.users)), modules):
            last, act = next(iter(bn_node.users)), "relu"
        name = f"{node.target.replace('.', '_')}_cudnn"
        gm.add_submodule(name, fold(modules[node.target], modules[bn_node.target], act))
        with graph.inserting_after(last):
            new = graph.call_module(name, node.args, node.kwargs)
        last.replace_all_uses_with(new)
        for dead in ([last] if last is not bn_node else []) + [bn_node, node]:
            graph.erase_node(dead)
    graph.lint()
    gm.delete_all_unused_submodules()
    gm.recompile()


def _fold_sequentials(module: nn.Module) -> None:
    for child in module.children():
        _fold_sequentials(child)
    if not isinstance(module, nn.Sequential):
        return
    names = list(module._modules)
    i = 0
    while i + 1 < len(names):
        conv, bn = module._modules[names[i]], module._modules[names[i + 1]]
        if conv is not None and bn is not None and _foldable(conv, bn):
            nxt = module._modules[names[i + 2]] if i + 2 < len(names) else None
            act = "relu" if type(nxt) is nn.ReLU else "none"
            module._modules[names[i]] = fold(conv, bn, act)
            module._modules[names[i + 1]] = nn.Identity()
            if act == "relu":
                module._modules[names[i + 2]] = nn.Identity()
            i += 3 if act == "relu" else 2
        else:
            i += 1
