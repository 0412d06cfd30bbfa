"""docs/python.md's two LeNet loops (DataLoader, then conveyor.torch.Loader) run as written.

The blocks after `<!-- example: dataloader -->` and `<!-- example: conveyor -->` are
executed one after the other in one namespace (the second reuses the first's LeNet),
with DATA a folder of generated class images, EPOCHS and CHECKPOINT given.
"""
import io
import contextlib
import pathlib
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
pytest.importorskip("PIL")

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "python.md"


def block(name):
    m = re.search(r"<!-- example: " + name + r" -->\n```python\n(.*?)```", DOC.read_text(), re.S)
    assert m, f"docs/python.md has no '{name}' example"
    return m.group(1)


def make_classes(root, per_class=96):
    """Two classes a LeNet tells apart at once: dark and bright noise, 40x40 PPM."""
    rng = np.random.default_rng(0)
    for c, (lo, hi) in enumerate([(0, 100), (155, 256)]):
        d = root / f"class{c}"
        d.mkdir(parents=True)
        for i in range(per_class):
            px = rng.integers(lo, hi, (40, 40, 3), dtype=np.uint8)
            (d / f"{i}.ppm").write_bytes(b"P6\n40 40\n255\n" + px.tobytes())


def test_the_lenet_examples_run_and_learn(tmp_path):
    make_classes(tmp_path / "data")
    torch.manual_seed(0)
    ns = {"DATA": str(tmp_path / "data"), "EPOCHS": 3, "CHECKPOINT": str(tmp_path / "ckpt.pt")}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block("dataloader"), "docs/python.md (dataloader)", "exec"), ns)
        assert ns["loss"].item() < 0.69, out.getvalue()
        exec(compile(block("conveyor"), "docs/python.md (conveyor)", "exec"), ns)
    text = out.getvalue()
    assert text.count("epoch 2: loss") == 2 and "bottleneck:" in text, text
    assert ns["loss"].item() < 0.69, text  # better than chance on two classes
    saved = torch.load(ns["CHECKPOINT"])
    import conveyor
    again = conveyor.Loader(folder=ns["DATA"], batch_size=32, workers=1, crop=32, augment="crop", normalize="float32",
                            device=ns["device"], seed=0)
    again.load_state_dict(saved["loader"])  # the checkpoint's loader state resumes a new loader
    assert again.current_epoch == 3
