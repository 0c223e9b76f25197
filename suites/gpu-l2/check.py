#!/usr/bin/env python3
"""Size and import-check the gpu-l2 suite: suites/gpu-l1/check.py's checks (meta-device export,
bytes, FLOPs, the H200 eager estimate, `--lower` through `kforge import --lower`, `--shrink DIR`
for CPU copies) run on this folder, with this suite's size rule: inputs plus output at most
2 GiB. Same options as suites/gpu-l1/check.py."""
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_BYTES = 2 * 2 ** 30


def load_l1_check():
    path = os.path.join(os.path.dirname(HERE), "gpu-l1", "check.py")
    spec = importlib.util.spec_from_file_location("gpu_l1_check", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.HERE = HERE            # the default --dir
    mod.MAX_BYTES = MAX_BYTES  # the size flag
    return mod


if __name__ == "__main__":
    sys.exit(load_l1_check().main())
