"""Names a package provides lazily: a table ``name -> "module:attribute"`` made into the package's
PEP 562 ``__getattr__`` and ``__dir__``.

Every package of cudnn that imports what a name needs only when the name is first read
(``cudnn``, ``cudnn.experimental``, ``cudnn.gemm`` and their ``ops``) declares its names here and
nowhere else::

    __getattr__, __dir__ = lazy_exports(__name__, {"pygraph": "._graph.pygraph",
                                                   "tensor": "._graph.model.tensor:Tensor"},
                                        submodules=("backend",), otherwise="._unavailable:missing")

A target is ``"module:attribute"``, or ``"module"`` when the module's name for it is the same;
a module name starting with a dot is relative to the package. The first read imports the
module, binds the value in the package (later reads are plain lookups) and returns it. A name
of ``submodules`` is the subpackage itself, imported on first read; when it needs PyTorch and
PyTorch is not installed it is absent (an AttributeError that says so: ``hasattr`` is False).
A name whose module needs an absent PyTorch raises ``torch_error`` where one is given (the
official ops packages raise ImportError), else the ModuleNotFoundError itself. A name whose
module is not there at all is absent. A name outside the tables raises ``otherwise(package,
name)``, where ``otherwise`` is a target as above imported on the first such read
(`cudnn._unavailable.missing` says what an official name cudnn-py lacks needs), or a plain
AttributeError.

This module imports nothing of cudnn, so ``import cudnn`` stays small.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

Getattr = Callable[[str], Any]
Dir = Callable[[], list[str]]


def _resolve(package: str, target: str, name: str) -> Any:
    """The value ``target`` ("module:attribute" or "module", then named ``name``) names, imported."""
    module_name, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module_name, package), attribute or name)


def _full_name(package: str, module: str) -> str:
    """``module`` (maybe relative to ``package``) as an absolute name."""
    import importlib.util  # only on the error path: `import cudnn` stays small

    return importlib.util.resolve_name(module, package)


def lazy_exports(package: str, names: Mapping[str, str], *, submodules: Iterable[str] = (),
                 otherwise: str | None = None,
                 torch_error: type[Exception] | None = None) -> tuple[Getattr, Dir]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` (its ``__name__``) that serve ``names``
    and ``submodules`` on first read, as the module docstring says."""
    subs = tuple(submodules)

    def __getattr__(name: str) -> Any:
        if name in subs:
            try:
                return importlib.import_module(f".{name}", package)  # the import binds it in the package
            except ModuleNotFoundError as exc:  # ops / nn without torch: absent as attributes (help, hasattr)
                if exc.name != "torch":
                    raise
                raise AttributeError(f"module {package!r} has no attribute {name!r}: {package}.{name} needs "
                                     "PyTorch, which is not installed") from exc
        target = names.get(name)
        if target is None:
            if otherwise is not None:
                error_of = _resolve(package, otherwise, "")
                raise error_of(package, name)
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            value = _resolve(package, target, name)
        except ModuleNotFoundError as exc:
            full = _full_name(package, target.partition(":")[0])
            if exc.name == full:
                raise AttributeError(f"module {package!r} has no attribute {name!r} ({full} is absent)") from exc
            if exc.name != "torch" or torch_error is None:
                raise
            raise torch_error(f"{package}.{name} needs PyTorch, which is not installed") from exc
        vars(sys.modules[package])[name] = value
        return value

    def __dir__() -> list[str]:
        """Every name the package provides, imported yet or not."""
        return sorted({*vars(sys.modules[package]), *names, *subs})

    return __getattr__, __dir__
