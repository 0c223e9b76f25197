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


@pytest.fixture(scope="session", autouse=True)
def isolated_store(tmp_path_factory):
    """kforge synth records every run in a store (docs/store.md): the suite's runs go to a
    temporary one, never the user's, unless KFORGE_STORE is set already."""
    if not os.environ.get("KFORGE_STORE"):
        os.environ["KFORGE_STORE"] = str(tmp_path_factory.mktemp("store") / "kforge.db")
    yield


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return str(path)


def read(path):
    """A text file's contents."""
    with open(path) as f:
        return f.read()


def scripted_reply(kernel, lang="c"):
    """One response of the scripted endpoint (tests/llm_server.py's script format): the
    model's message holding kernel in a code fence tagged lang."""
    return {"body": {"choices": [{"message": {"role": "assistant", "content": f"The kernel.\n\n```{lang}\n{kernel}```\n"},
                                  "finish_reason": "stop"}], "usage": {"prompt_tokens": 10, "completion_tokens": 10}}}
