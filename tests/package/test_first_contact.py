"""What a newcomer meets first: the README's commands on a machine without a GPU, with or
without PyTorch, and the messages of the first mistakes.

- GPU test modules never touch the GPU at import (a static check of every test_*_gpu.py, and the
  collection guard of tests/conftest.py run on a module that does);
- the line after collection says what became of the GPU tests, at every verbosity;
- an unknown enum member names the closest valid ones; a cudnn.Graph io name that resolves
  to the wrong port says which port and what to write instead;
- ``demo --json | show -`` composes; the CUDA extras bound cuda-bindings to their major; the
  gen extra pins the headers of the committed tables; every example says what it needs.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import cudnn
from cudnn import GraphError
from cudnn._lib import cuda, enums

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
HAVE_TORCH = importlib.util.find_spec("torch") is not None
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")


# -- GPU test modules at import ------------------------------------------------------------------

# torch.cuda calls that only ask whether CUDA is there, without starting it
_QUERIES = {"is_available", "device_count", "is_initialized"}


def _import_time_nodes(tree: ast.Module) -> list[ast.AST]:
    """The nodes a module runs when imported: top-level statements, decorators, default
    arguments and class bodies; never a function's body."""
    todo: list[ast.AST] = list(tree.body)
    run: list[ast.AST] = []
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            todo += [*node.decorator_list, *node.args.defaults, *(d for d in node.args.kw_defaults if d)]
        elif isinstance(node, ast.ClassDef):
            todo += [*node.decorator_list, *node.bases, *node.body]
        elif isinstance(node, ast.Lambda):
            continue
        else:
            run.append(node)
            todo += list(ast.iter_child_nodes(node))
    return run


def _gpu_calls(source: str) -> list[str]:
    """Calls made at import that start CUDA: torch.cuda.* (other than the queries), .cuda(),
    cudnn.create_handle(), and a device= argument that is, or names a constant that is, "cuda..."."""
    tree = ast.parse(source)
    cuda_names = {t.id for node in tree.body if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                  and str(node.value.value).startswith("cuda") for t in node.targets if isinstance(t, ast.Name)}
    found = []
    for node in _import_time_nodes(tree):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func)
        if (name.startswith("torch.cuda.") and name.split(".")[-1] not in _QUERIES) or name.endswith(
                (".cuda", "create_handle")):
            found.append(f"line {node.lineno}: {name}()")
        for kw in node.keywords:
            value = kw.value
            if kw.arg == "device" and ((isinstance(value, ast.Constant) and str(value.value).startswith("cuda"))
                                       or (isinstance(value, ast.Name) and value.id in cuda_names)):
                found.append(f"line {node.lineno}: {name}(device={ast.unparse(value)})")
    return found


def test_the_static_check_finds_gpu_calls_at_import() -> None:
    source = ("import torch\nSM = torch.cuda.get_device_capability()[0]\n"
              "@pytest.mark.skipif(torch.cuda.get_device_properties(0).major < 9, reason='')\ndef test_a(): pass\n"
              "X = torch.ones(2, device='cuda')\nOK = torch.cuda.is_available()\n"
              "def test_b():\n    torch.cuda.synchronize()\nDEV = 'cuda:0'\nY = torch.zeros(1, device=DEV)\n")
    assert sorted(_gpu_calls(source), key=lambda c: int(c.split()[1][:-1])) == [
        "line 2: torch.cuda.get_device_capability()", "line 3: torch.cuda.get_device_properties()",
        "line 5: torch.ones(device='cuda')", "line 10: torch.zeros(device=DEV)"]


@pytest.mark.parametrize("path", sorted((ROOT / "tests").glob("*/test_*_gpu.py")), ids=lambda p: p.name)
def test_gpu_test_modules_do_not_touch_the_gpu_at_import(path: Path) -> None:
    calls = _gpu_calls(path.read_text())
    assert not calls, (f"{path.name} touches the GPU when pytest imports it, which stops the whole run on a "
                       f"machine without one; move these into a test or a fixture: {calls}")


_FAKE_TORCH = {
    "torch/__init__.py": "from . import cuda\n__version__ = '0.0+fake'\n",
    "torch/cuda/__init__.py": ("def _lazy_init():\n    raise AssertionError('Torch not compiled with CUDA enabled')\n\n"
                               "def get_device_capability(device=None):\n    _lazy_init()\n    return (9, 0)\n\n"
                               "def is_available():\n    return False\n"),
}


def _mini_project(tmp_path: Path, gpu_tests: dict[str, str], fake_torch: bool) -> tuple[Path, dict[str, str]]:
    """A project with this one's tests/conftest.py and the given GPU test modules, in
    tests/gpu; ``fake_torch``: a CPU-only torch of a few lines on the path."""
    (tmp_path / "tests" / "gpu").mkdir(parents=True)
    for conftest in ("conftest.py",):
        shutil.copy(ROOT / "tests" / conftest, tmp_path / "tests" / conftest)
    (tmp_path / "pytest.ini").write_text("[pytest]\ntestpaths = tests\naddopts = -ra -p no:cacheprovider\n"
                                         "markers = gpu: needs a GPU\n")
    for name, text in gpu_tests.items():
        (tmp_path / "tests" / "gpu" / name).write_text(text)
    paths = [str(ROOT / "src")]
    if fake_torch:
        for name, text in _FAKE_TORCH.items():
            (tmp_path / "site" / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / "site" / name).write_text(text)
        paths.insert(0, str(tmp_path / "site"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "CUDNN_PY_TEST_INSTALLED": "1"}
    return tmp_path, env


def _pytest_q(cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-q"], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


TOUCHES = "import torch\nSM = torch.cuda.get_device_capability()\n\ndef test_touch():\n    pass\n"
ASKS_LATER = "import torch\n\ndef test_later():\n    assert torch.cuda.get_device_capability()\n"


@pytest.mark.skipif(cuda.device_count() > 0, reason="the guard's message is checked where no GPU is")
def test_a_gpu_module_touching_the_gpu_at_import_is_an_error_naming_it(tmp_path: Path) -> None:
    cwd, env = _mini_project(tmp_path, {"test_touch_gpu.py": TOUCHES, "test_later_gpu.py": ASKS_LATER}, fake_torch=True)
    out = _pytest_q(cwd, env)
    assert out.returncode != 0
    assert "tests/gpu/test_touch_gpu.py touches the GPU at import" in out.stdout, out.stdout
    assert "Torch not compiled with CUDA" not in out.stdout  # the guard speaks before torch does


@pytest.mark.skipif(cuda.device_count() > 0, reason="checks the line where no GPU is")
def test_without_a_gpu_the_gpu_tests_are_collected_and_skipped_with_the_reason(tmp_path: Path) -> None:
    cwd, env = _mini_project(tmp_path, {"test_later_gpu.py": ASKS_LATER}, fake_torch=True)
    out = _pytest_q(cwd, env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"^GPU tests: 1 collected, all skipped here: \S", out.stdout, re.MULTILINE), out.stdout
    assert re.search(r"SKIPPED \[1\] .*GPU test: \S", out.stdout), out.stdout


@pytest.mark.skipif(HAVE_TORCH, reason="PyTorch is installed here: the GPU tests are collected")
def test_without_torch_the_line_says_the_gpu_tests_are_not_collected(tmp_path: Path) -> None:
    cwd, env = _mini_project(tmp_path, {"test_later_gpu.py": ASKS_LATER}, fake_torch=False)
    out = _pytest_q(cwd, env)
    assert out.returncode == 5, out.stdout + out.stderr  # no tests: none collected
    assert "GPU tests: not collected (PyTorch is not installed" in out.stdout, out.stdout


# -- messages ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("expr", "message"), [
    (lambda: cudnn.data_type.HALFF, r"^data_type has no member 'HALFF'; did you mean HALF\?$"),
    (lambda: cudnn.data_type.bfloat16, r"did you mean BFLOAT16"),
    (lambda: cudnn.heur_mode.Z, r"^heur_mode has no member 'Z'; its members: .*\bFALLBACK, A\b"),
    (lambda: cudnn.diagonal_alignment.TOP_LEFFT, r"did you mean TOP_LEFT"),
    (lambda: enums.cudnnDataType_t.CUDNN_DATA_HALFF, r"did you mean CUDNN_DATA_HALF\b"),
])
def test_an_unknown_enum_member_names_the_closest_ones(expr: object, message: str) -> None:
    with pytest.raises(AttributeError, match=message):
        expr()  # type: ignore[operator]


def test_enum_lookup_by_name_says_the_same_and_members_still_work() -> None:
    with pytest.raises(KeyError, match="did you mean FLOAT"):
        cudnn.data_type["FLAOT"]
    assert cudnn.data_type["HALF"] is cudnn.data_type.HALF and int(cudnn.data_type.FLOAT) == 0
    assert not hasattr(cudnn.data_type, "NOPE") and not hasattr(cudnn.data_type, "__nope__")


def _relu_graph(inputs: list[str], outputs: list[str]) -> None:
    x = np.zeros((1, 4, 8, 8), np.float16)
    with cudnn.Graph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT,
                     inputs=inputs, outputs=outputs) as graph:
        graph.relu(x).set_output(True)


def test_an_output_named_by_a_positional_argument_says_which_port_and_what_to_write() -> None:
    with pytest.raises(GraphError) as info:
        _relu_graph(["relu.0::0"], ["relu.0::0"])
    text = str(info.value)
    assert "outputs[0] ('relu.0::0') names the same tensor as inputs[0] ('relu.0::0')" in text
    assert "relu.0's input IN_0 ('relu.0::0' names its positional argument 0)" in text
    assert text.endswith("relu.0's output is 'relu.0::OUT_0': write that in outputs"), text


def test_an_input_named_by_an_output_says_which_port_and_what_to_write() -> None:
    with pytest.raises(GraphError, match=r"inputs\[0\] \('relu.0::OUT_0'\) is a graph output, not a graph input: "
                                         r"relu.0's output OUT_0; relu.0's input is 'relu.0::0': write that in inputs"):
        _relu_graph(["relu.0::OUT_0"], ["relu.0::OUT_0"])


# -- commands, extras, examples ------------------------------------------------------------------

def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cudnn", *args], input=stdin, capture_output=True, text=True,
                          env=ENV, timeout=120, check=False)


def test_demo_json_composes_with_show() -> None:
    demo = _cli("demo", "--json")
    assert demo.returncode == 0 and demo.stdout.lstrip().startswith("{"), demo.stdout + demo.stderr
    shown = _cli("show", "-", stdin=demo.stdout)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith('digraph "conv_bias_relu"') and "conv" in shown.stdout


def test_show_given_more_than_json_says_what_to_give() -> None:
    shown = _cli("show", "-", stdin="cudnn-py 0.1.0: fused conv\n{}\n")
    assert shown.returncode == 2
    assert "the input starts with 'cudnn-py 0.1.0: fused conv', not '{'" in shown.stderr
    assert "python -m cudnn demo --json" in shown.stderr


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_cuda_bindings_comes_from_the_cuda_extras_only_bounded_to_their_major() -> None:
    from packaging.requirements import Requirement

    project = _project()
    assert all(Requirement(r).name != "cuda-bindings" for r in project["dependencies"])
    for extra, major in (("cu12", 12), ("cu13", 13)):
        (spec,) = [Requirement(r).specifier for r in project["optional-dependencies"][extra]
                   if Requirement(r).name == "cuda-bindings"]
        assert spec.contains(f"{major}.9") and not spec.contains(f"{major + 1}.0") and not spec.contains(
            f"{major - 1}.9"), (extra, str(spec))


def test_the_gen_extra_pins_the_headers_of_the_committed_tables() -> None:
    from packaging.requirements import Requirement

    (req,) = [Requirement(r) for r in _project()["optional-dependencies"]["gen"]]
    (pin,) = list(req.specifier)
    assert req.name == "nvidia-cudnn-cu13" and pin.operator == "=="
    major, minor, patch = (int(p) for p in pin.version.split(".")[:3])
    assert major * 10000 + minor * 100 + patch == enums.HEADER_VERSION
    assert "install the gen extra" in (ROOT / "tests" / "support" / "generated_tables.py").read_text()


SCRIPTS = sorted(p.name for p in EXAMPLES.glob("*.py") if not p.name.startswith("_"))


def _torch_with_cuda() -> bool:
    if not HAVE_TORCH:
        return False
    import torch

    return bool(torch.cuda.is_available())


@pytest.mark.skipif(_torch_with_cuda(), reason="checks the message given where the examples cannot run")
@pytest.mark.parametrize("script", SCRIPTS)
def test_every_example_says_in_one_line_what_it_needs(script: str) -> None:
    source = (EXAMPLES / script).read_text()
    assert "\nNeeds: " in source.split('"""')[1], "the docstring states what the example needs"
    out = subprocess.run([sys.executable, str(EXAMPLES / script)], capture_output=True, text=True, timeout=120,
                         env=ENV, cwd=ROOT, check=False)
    assert out.returncode == 1, out.stdout + out.stderr
    message = out.stderr.strip()
    assert "Traceback" not in message and len(message.splitlines()) == 1, message
    assert message.startswith(f"{script} needs ") and ("PyTorch" in message or "NVIDIA GPU" in message), message


@pytest.mark.skipif(_torch_with_cuda(), reason="checks the picture drawn where the example cannot run")
def test_the_picture_example_draws_without_a_gpu(tmp_path: Path) -> None:
    picture = tmp_path / "graph.svg"
    out = subprocess.run([sys.executable, str(EXAMPLES / "pygraph_conv_bias_relu.py"), "--picture", str(picture)],
                         capture_output=True, text=True, timeout=120, env=ENV, cwd=ROOT, check=False)
    assert out.returncode == 1 and out.stderr.startswith("pygraph_conv_bias_relu.py needs "), out.stderr
    svg = picture.read_text()
    assert svg.startswith("<svg") and all(f">{op}<" in svg or op in svg for op in ("conv", "bias", "relu"))
