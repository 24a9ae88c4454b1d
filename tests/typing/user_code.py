"""User code as the official samples write it, for type checkers: CI checks this file with
``mypy --strict`` (tests/typing/mypy.ini) and with pyright (.ci/run). It is never run (it needs
a GPU); it states what a checker must see of cudnn's public API: the types of ``cudnn.pygraph()``, its tensors and op
methods, the enums, handles and ``cudnn.Graph``. The lines marked ``# type: ignore[...]`` are
mistakes a checker must report: with ``warn_unused_ignores`` (mypy) and
``reportUnnecessaryTypeIgnoreComment`` (pyright) the check fails when one stops being an error.
"""
# pyright: strict, reportUnnecessaryTypeIgnoreComment=true

from __future__ import annotations

from typing import Any

from typing_extensions import assert_type

import cudnn


def conv_graph(handle: cudnn.Handle, x_buffer: Any, w_buffer: Any, y_buffer: Any, workspace: Any) -> None:
    """The official convolution sample: declare, build, execute."""
    graph = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=handle)
    assert_type(graph, cudnn.pygraph)
    X = graph.tensor(name="X", dim=[8, 64, 56, 56], stride=[56 * 56 * 64, 1, 56 * 64, 64],
                     data_type=cudnn.data_type.HALF)
    W = graph.tensor(name="W", dim=[32, 64, 3, 3], stride=[3 * 3 * 64, 1, 3 * 64, 64])
    assert_type(X, cudnn.tensor)
    Y = graph.conv_fprop(image=X, weight=W, padding=[1, 1], stride=[1, 1], dilation=[1, 1],
                         compute_data_type=cudnn.data_type.FLOAT)
    assert_type(Y, cudnn.tensor)
    R = graph.relu(input=Y, name="relu")
    R.set_output(True).set_data_type(cudnn.data_type.HALF)
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans(cudnn.build_plan_policy.HEURISTICS_CHOICE)
    size: int = graph.get_workspace_size()
    assert size >= 0
    graph.execute({X: x_buffer, W: w_buffer, R: y_buffer}, workspace, handle=handle)


def matmul_graph(a: Any, b: Any, c: Any, workspace: Any) -> None:
    """The official matmul sample, with a graph built by build() and a bias added pointwise."""
    handle = cudnn.create_handle()
    assert_type(handle, cudnn.Handle)
    graph = cudnn.pygraph(handle=handle)
    A = graph.tensor_like(a)
    B = graph.tensor_like(b)
    C = graph.matmul(A, B, compute_data_type=cudnn.data_type.FLOAT, name="mm")
    D = graph.add(C, 1.0)
    D.set_output(True)
    graph.build([cudnn.heur_mode.A])
    graph.execute({A: a, B: b, D: c}, workspace, handle=handle)
    cudnn.destroy_handle(handle)


def sdpa_graph(q: Any, k: Any, v: Any, o: Any, stats: Any, workspace: Any) -> None:
    """The official attention sample: sdpa's outputs are a list of tensors."""
    graph = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT)
    Q, K, V = graph.tensor_like(q), graph.tensor_like(k), graph.tensor_like(v)
    O, Stats = graph.sdpa(q=Q, k=K, v=V, generate_stats=True, attn_scale=0.125, use_causal_mask=True,  # noqa: E741
                          diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT)
    assert_type(O, cudnn.tensor)
    O.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
    Stats.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    graph.build([cudnn.heur_mode.A])
    graph.execute({Q: q, K: k, V: v, O: o, Stats: stats}, workspace)


def enums_and_errors() -> None:
    """The enums are classes with members; the errors are exception classes."""
    half: cudnn.data_type = cudnn.data_type.HALF
    assert int(half) == 2
    mode: cudnn.heur_mode = cudnn.heur_mode.A
    assert mode.name == "A"
    try:
        cudnn.pygraph().validate()
    except cudnn.GraphError as exc:
        message: str = str(exc)
        assert message
    version: int = cudnn.backend_version()
    assert version > 0


def wrapper_graph(x: Any, w: Any) -> Any:
    """The official ``cudnn.Graph`` context manager."""
    with cudnn.Graph(inputs=["conv::image", "conv::weight"], outputs=["relu::Y"]) as graph:
        Y = graph.conv_fprop(x, w, padding=[1, 1], name="conv")
        graph.relu(Y, name="relu").set_output(True)
    return graph(x, w)


def mistakes(graph: cudnn.pygraph, X: cudnn.tensor) -> None:
    """What a checker reports (each line is an error, or the check fails)."""
    graph.conv_fprop(X, X, paddings=[1, 1])  # type: ignore[call-arg]
    graph.matmul(X, X, nmae="mm")  # type: ignore[call-arg]
    graph.sdpa(X, X, X, attn_scael=0.5)  # type: ignore[call-arg]
    graph.no_such_op(X)  # type: ignore[attr-defined]
    graph.tensor(dims=[1, 2])  # type: ignore[call-arg]
    cudnn.pygrap()  # type: ignore[attr-defined]
    cudnn.data_type.HALFF  # type: ignore[attr-defined]  # noqa: B018
