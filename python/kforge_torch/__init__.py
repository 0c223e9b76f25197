"""kforge's PyTorch front end.

- kforge_torch.importer: a KernelBench-format module (class Model, get_inputs(),
  get_init_inputs()) -> a task bundle (graph.json, params.safetensors, ref.safetensors),
  which `kforge import` lowers to kforge's graph IR.
- kforge_torch.bench: `kforge bench SUITE`: every task of a folder synthesized by kforge
  and timed against PyTorch eager and torch.compile in one process.
- kforge_torch.export: `kforge export RUN --as torch`: the kernel as a torch custom op and a
  ModelNew that uses it.
"""
__version__ = "0.1.0"
