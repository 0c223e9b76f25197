"""bench/kernelbench.py's shape cap keeps only shapes the module itself runs at: a module the
meta device cannot build (so its forward is not checked there while the constants are
halved) and that asserts on the image size it was built for (KernelBench level 3's Swin
transformers, 29 and 30) keeps the image size and is shrunk where it can be."""
import importlib.util
import os

import torch

from conftest import REPO, write

spec = importlib.util.spec_from_file_location("kernelbench_script", os.path.join(REPO, "bench", "kernelbench.py"))
KB = importlib.util.module_from_spec(spec)
spec.loader.exec_module(KB)

# built for a fixed image size (the default argument, as Swin's img_size=224); its init reads
# a tensor's value (.item(): impossible on the meta device)
FIXED_SIZE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, num_classes, img_size=64):
        super().__init__()
        self.img_size = img_size
        self.scale = float(torch.ones(1).sum().item())
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4, num_classes)

    def forward(self, x):
        assert x.shape[2] == self.img_size and x.shape[3] == self.img_size, "wrong image size"
        return self.head(self.conv(x).mean(dim=(2, 3))) * self.scale


batch_size = 10
image_size = 64
num_classes = 1000


def get_inputs():
    return [torch.rand(batch_size, 3, image_size, image_size)]


def get_init_inputs():
    return [num_classes]
'''


def run_copy(path):
    ns = {}
    exec(compile(open(path).read(), path, "exec"), ns)
    model = ns["Model"](*ns["get_init_inputs"]())
    with torch.no_grad():
        model(*ns["get_inputs"]())  # raises if the shapes do not fit the module
    return ns


def test_a_halving_the_module_refuses_for_real_is_undone(tmp_path):
    src = write(tmp_path / "29_like.py", FIXED_SIZE)
    dst = str(tmp_path / "out.py")
    note = KB.shrink(src, dst, 30_000)
    ns = run_copy(dst)
    assert ns["image_size"] == 64, note  # the module asserts on it: never halved
    assert ns["num_classes"] < 1000, note  # what could be halved was
    assert "num_classes 1000->" in note and "image_size" not in note, note


def test_no_smaller_shape_runs_then_the_official_ones(tmp_path):
    src = write(tmp_path / "30_like.py", FIXED_SIZE.replace("num_classes = 1000", "num_classes = 10"))
    dst = str(tmp_path / "out.py")
    note = KB.shrink(src, dst, 30_000)
    assert note.startswith("official shapes (the module refuses every smaller shape tried: AssertionError"), note
    assert open(dst).read() == open(src).read()
    run_copy(dst)
