"""The parts of a module task that kforge can lower (a mixed task: docs/task-format.md,
"Mixed tasks: the parts kforge lowers").

A module task is written where some nodes of the exported graph have no lowering. The other
nodes still do: split into connected pieces (two nodes are in one piece when one reads the
other's value), each piece is a graph of its own whose inputs are what it reads from outside
(the module's inputs and params, and the values of nodes outside it) and whose outputs are
what is read outside it (or is the module's output). Each is lowered by kforge itself
(`kforge import --lower DIR --graph-only`); one that lowers is written beside the module
task as NAME.partK.kf (K = 0, 1, ... in graph order). `kforge synth TASK --agent both` has
the builtin write a kernel for each part, and hands the verified kernels to the model as
reference implementations of those parts of the forward (docs/design-notes.md says why the
model still writes the whole forward). A piece of shape ops only (views, reshapes,
permutes: nothing to compute) is no part.
"""
import json
import os
import re
import shutil
import subprocess
import tempfile

# ops that move no value through arithmetic: a piece made of them alone is no part
SHAPE_ONLY = {"view", "reshape", "_unsafe_view", "unsqueeze", "squeeze", "flatten", "permute", "transpose", "t",
              "expand", "contiguous", "clone", "alias", "detach", "slice", "select", "unflatten", "split",
              "chunk", "getitem", "to", "_to_copy"}


def failing_nodes(why):
    """The node names kforge import said it cannot lower ("node 'NAME' (aten...)")."""
    return set(re.findall(r"node '([^']+)'", why or ""))


def refs(x, out):
    """The value names x (a node argument, as graph.json encodes it) refers to, into out."""
    if isinstance(x, dict):
        if "ref" in x and isinstance(x["ref"], str):
            out.append(x["ref"])
        for v in x.values():
            if isinstance(v, (list, dict)):
                refs(v, out)
    elif isinstance(x, list):
        for v in x:
            refs(v, out)
    return out


def node_refs(n):
    return refs(n.get("args", []), []) + refs(n.get("kwargs", {}), [])


def short_target(t):
    """aten.conv2d.default -> conv2d"""
    parts = t.split(".")
    return parts[1] if len(parts) >= 2 and parts[0] == "aten" else t


def with_their_items(graph, bad):
    """bad and the getitem nodes that take an element of a bad node's tuple (an LSTM cell's
    h and c): the remainder's, since the tuple has no type a part could take as its input;
    the element has one, so a part after it reads the getitem's value."""
    bad = set(bad)
    for n in graph["nodes"]:
        if short_target(n["target"]) == "getitem" and any(r in bad for r in node_refs(n)):
            bad.add(n["name"])
    return bad


def pieces(graph, bad):
    """The connected pieces of graph's nodes that are not in bad: lists of nodes, in graph
    order, the pieces ordered by their first node."""
    nodes = [n for n in graph["nodes"] if n["name"] not in bad]
    names = {n["name"] for n in nodes}
    parent = {n["name"]: n["name"] for n in nodes}

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a
    for n in nodes:
        for r in node_refs(n):
            if r in names:
                parent[find(r)] = find(n["name"])
    groups = {}
    for n in nodes:
        groups.setdefault(find(n["name"]), []).append(n)
    return sorted(groups.values(), key=lambda ns: graph["nodes"].index(ns[0]))


def part_graph(graph, piece, k):
    """graph.json of one piece: its inputs (the module's inputs and params it reads, then
    the outside values it reads as new inputs), its nodes, its outputs (values read outside
    it, or the module's outputs)."""
    inside = {n["name"] for n in piece}
    by_name = {n["name"]: n for n in graph["nodes"]}
    g_inputs = {i["name"]: i for i in graph["inputs"]}
    read = []
    for n in piece:
        for r in node_refs(n):
            if r not in inside and r not in read:
                read.append(r)
    inputs, index = [], 0
    for i in graph["inputs"]:  # the module's own, in the module's order
        if i["name"] in read:
            e = dict(i)
            if e.get("kind") == "input":
                e["index"] = index
                index += 1
            inputs.append(e)
    for r in read:
        if r in g_inputs:
            continue
        src = by_name.get(r)
        if src is None:
            raise ValueError(f"part {k} reads '{r}', which no node or input gives")
        inputs.append({"name": r, "kind": "input", "dtype": src["dtype"], "shape": src["shape"], "index": index})
        index += 1
    module_outs = refs(graph["outputs"], [])
    outputs = []
    for n in piece:
        used_outside = n["name"] in module_outs or any(
            n["name"] in node_refs(m) for m in graph["nodes"] if m["name"] not in inside)
        if used_outside:
            outputs.append({"ref": n["name"]})
    g = dict(graph)
    g.update({"name": f"{graph['name']}_part{k}", "inputs": inputs, "nodes": piece, "outputs": outputs})
    return g


def write_parts(graph, why, out_dir, name, kforge):
    """Lowers each piece of graph (the nodes not named in why) with kforge and writes those
    that lower as out_dir/NAME.partK.kf; returns [{"file", "nodes", "inputs", "outputs"}]
    for the parts written, and [(piece's node names, why not)] for the pieces that did not
    lower."""
    bad = failing_nodes(why)
    if not bad or not kforge:
        return [], []
    bad = with_their_items(graph, bad)
    written, skipped = [], []
    tmp = tempfile.mkdtemp(prefix="kf-parts-", dir=out_dir)
    try:
        for piece in pieces(graph, bad):
            if all(short_target(n["target"]) in SHAPE_ONLY for n in piece):
                continue
            k = len(written)
            pg = part_graph(graph, piece, k)
            if not pg["outputs"]:
                continue
            d = os.path.join(tmp, str(len(written) + len(skipped)))
            os.makedirs(d)
            with open(os.path.join(d, "graph.json"), "w") as f:
                json.dump(pg, f)
            p = subprocess.run([kforge, "import", "--lower", d, "--graph-only"], capture_output=True, text=True)
            nodes = [n["name"] for n in piece]
            if p.returncode != 0:
                skipped.append((nodes, (p.stderr or p.stdout).strip().splitlines()[-1:] or ["?"]))
                continue
            with open(os.path.join(d, "task.kf")) as f:
                text = f.read()
            fname = f"{name}.part{k}.kf"
            ins = [i["name"] for i in pg["inputs"]]
            outs = [o["ref"] for o in pg["outputs"]]
            head = [f"# part {k} of module task {name} (written by kforge import): the nodes "
                    + ", ".join(f"{n['name']} ({short_target(n['target'])})" for n in piece),
                    f"# of the module's forward, which kforge lowers; it reads {', '.join(ins)} and gives "
                    f"{', '.join(outs)}",
                    "# (values of the module's forward of the same names). kforge synth on the module task",
                    "# with --agent both has the builtin write this part's kernel for the model to reuse."]
            with open(os.path.join(out_dir, fname), "w") as f:
                f.write("\n".join(head) + "\n" + text)
            written.append({"file": fname, "nodes": nodes, "inputs": ins, "outputs": outs})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return written, skipped
