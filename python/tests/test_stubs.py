"""The type stubs shipped beside the module (_conveyor.pyi, torch.pyi, py.typed) say what the module does.

Loader's keyword arguments in the stub are the binding's, in its order, with its defaults (read from the
signature pybind11 writes into Loader.__init__.__doc__); each class has the stub's public names and no
others; and, where mypy is installed (Debian: python3-mypy), mypy takes a correct use of the package and
flags a wrong keyword, a wrong type and a wrong choice.
"""
import ast
import inspect
import os
import re
import sys

import pytest

import conveyor
from conveyor import _conveyor

PACKAGE = os.path.dirname(conveyor.__file__)


def stub(name):
    with open(os.path.join(PACKAGE, name)) as f:
        return ast.parse(f.read(), name)


def stub_classes(tree):
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def test_the_stubs_and_py_typed_are_beside_the_module():
    assert os.path.isfile(os.path.join(PACKAGE, "py.typed"))
    for name in ("_conveyor.pyi", "torch.pyi"):
        stub(name)  # parses


def binding_keywords():
    """[(name, default)] of the Loader constructor that takes keywords (the first overload)."""
    doc = _conveyor.Loader.__init__.__doc__
    m = re.search(r"__init__\(self: [\w.]+, \*, (.*?)\) -> None", doc)
    assert m, doc
    out = []
    for param in m.group(1).split(", "):
        name, default = re.fullmatch(r"(\w+): object = (.*)", param).groups()
        out.append((name, ast.literal_eval(default)))
    return out


def test_loader_keywords_and_defaults_are_the_bindings():
    init = next(n for n in stub_classes(stub("_conveyor.pyi"))["Loader"].body
                if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    assert not init.args.args[1:] and not init.args.vararg and not init.args.kwarg  # keywords only
    in_stub = [(a.arg, ast.literal_eval(d)) for a, d in zip(init.args.kwonlyargs, init.args.kw_defaults)]
    assert in_stub == binding_keywords()


def public_names(node, classes):
    """The class's public methods, properties and attributes in the stub, its stub bases' included."""
    names = set()
    for n in node.body:
        if isinstance(n, ast.FunctionDef):
            names.add(n.name)
        elif isinstance(n, ast.AnnAssign):
            names.add(n.target.id)
    for base in node.bases:
        if isinstance(base, ast.Name) and base.id in classes:
            names |= public_names(classes[base.id], classes)
    return {n for n in names if not n.startswith("_")}


def test_each_class_has_the_stubs_names():
    tree = stub("_conveyor.pyi")
    classes = stub_classes(tree)
    module_names = {n for n in dir(_conveyor) if not n.startswith("_")}
    assert module_names == set(classes), "classes of the module and the stub differ"
    for name, node in classes.items():
        cls = getattr(_conveyor, name)
        if issubclass(cls, Exception):  # PipelineError: its fields are set on each instance
            assert {"stage", "epoch", "sample", "reason"} == public_names(node, classes)
            continue
        assert {n for n in dir(cls) if not n.startswith("_")} == public_names(node, classes), name


def test_conveyor_torch_loader_takes_conveyor_loaders_arguments():
    torch = pytest.importorskip("torch")  # noqa: F841  (conveyor.torch imports it)
    import conveyor.torch

    assert issubclass(conveyor.torch.Loader, conveyor.Loader)
    node = stub_classes(stub("torch.pyi"))["Loader"]
    assert [b.id for b in node.bases] == ["_Loader"]  # imported as conveyor.Loader in the stub
    assert not any(isinstance(n, ast.FunctionDef) and n.name == "__init__" for n in node.body)  # inherited
    assert inspect.signature(conveyor.torch.Loader.__init__).parameters.keys() == {"self", "kwargs"}


USE = '''\
import conveyor
loader = conveyor.Loader(folder="data", batch_size=8, device="cpu", normalize="float16")
n: int = len(loader)
for images, labels in loader:
    shape: tuple = images.shape
    epoch: int = labels.epoch
state = loader.state_dict()
with conveyor.Loader(arrays=(b"", [0])) as again:
    again.load_state_dict(state)
conveyor.Loader(folder="data", num_workers=4)
conveyor.Loader(folder="data", batch_size="8")
conveyor.Loader(folder="data", normalize="float64")
'''


def test_mypy_takes_a_correct_use_and_flags_wrong_arguments(tmp_path):
    api = pytest.importorskip("mypy.api")
    (tmp_path / "use.py").write_text(USE)
    # The interpreter's own search path (the build tree's PYTHONPATH, or the venv's site-packages).
    out, err, status = api.run([str(tmp_path / "use.py"), "--python-executable", sys.executable,
                                "--cache-dir", str(tmp_path / "cache"), "--no-error-summary",
                                "--hide-error-context", "--show-error-codes"])
    lines = sorted({int(m) for m in re.findall(r"^.*use\.py:(\d+): error", out, re.M)})
    assert lines == [10, 11, 12], out + err
    assert status == 1
