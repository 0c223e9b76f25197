"""Shared fixtures: the kforge binary (env KFORGE, else the checkout's build/kforge)."""
import os
import shutil

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def kforge_binary():
    k = os.environ.get("KFORGE") or os.path.join(REPO, "build", "kforge")
    return k if os.path.exists(k) else shutil.which("kforge")


@pytest.fixture(scope="session")
def kforge():
    k = kforge_binary()
    if not k:
        pytest.skip("no kforge binary: build it first (make) or set KFORGE=/path/to/kforge")
    return k


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return str(path)
