"""Every public function, class, method and property of ``import cudnn`` has a docstring
(the API reference of the documentation site is generated from them)."""

from __future__ import annotations

import inspect

import cudnn


def undocumented() -> list[str]:
    missing = []
    for name in dir(cudnn):
        if name.startswith("_"):
            continue
        try:
            obj = getattr(cudnn, name)
        except (AttributeError, ImportError):  # torch-backed submodules where torch is absent
            continue
        if inspect.ismodule(obj):
            continue
        if (inspect.isfunction(obj) or inspect.isclass(obj)) and not inspect.getdoc(obj):
            missing.append(name)
        if inspect.isclass(obj) and not issubclass(obj, BaseException) and not hasattr(obj, "__members__"):
            for member, value in vars(obj).items():
                fn = value.fget if isinstance(value, property) else value
                if not member.startswith("_") and (callable(fn) or isinstance(value, property)) \
                        and not getattr(fn, "__doc__", None):
                    missing.append(f"{name}.{member}")
    return missing


def test_the_public_api_is_documented() -> None:
    assert undocumented() == []
