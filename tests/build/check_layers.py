#!/usr/bin/env python3
"""The layer check: which folder includes which, and whether that follows the layer order.

ferry's code is layered bottom up, each folder including only the ones below it:

    os, src/* utilities, integrity -> cuda, shim -> array -> backend/<name> -> io (and src/file.cpp) -> formats -> checkpoint, distributed -> doctor -> tools, python

with include/ferry (the public API) under everything. This script reads every `#include "..."` of
src/, include/ferry, tools/ and python/src, and every import between the modules of
python/ferry, and reports

  * circles: folders (or Python modules) that reach each other through their edges;
  * up-edges: a folder including one of a higher layer;
  * foreign backend includes: a file outside src/backend/<name>/ including that backend's own
    folder (backend/registry.hpp and backend/source.hpp are the backends' shared face; the
    registry's .cpp is the one place that names every backend);
  * API-only leaks: a file of python/src or tools/ including anything but include/ferry and its
    own folder (the extension and the CLI are users of the public API).

It exits non-zero when there is a circle, more than MAX_UP_EDGES up-edges, a foreign backend
include or an API-only leak. Violations that PENDING lists are printed as pending and not
counted unless --strict is given. Standard library only, so that ctest can run it anywhere.

Usage: check_layers.py [--strict] [--verbose] [SOURCE_DIR]
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import re
import sys
from collections import defaultdict
from pathlib import Path

MAX_UP_EDGES = 3

# Layer rank of each node; an edge from a lower rank to a higher one is an up-edge. Equal ranks
# may include each other (a circle between them is still reported).
RANKS = {
    "include/ferry": 0,
    "os": 1,
    "base": 1,           # src/*: logging, stop tokens, errors, settings, counters (os and API only)
    "integrity": 1,      # src/integrity/: CRC-32C and the integrity error (API and base only)
    "cuda": 2,
    "shim": 2,
    "array": 3,
    "backend": 4,        # backend/source.*: the interface every backend implements
    "backend/*": 5,      # backend/<name>/: one source each
    "backend/registry": 6,  # names every backend: above them, below their users
    "io": 7,
    "core": 7,           # src/file.cpp: ferry::file over io/
    "formats": 8,
    "checkpoint": 9,
    "distributed": 9,
    "doctor": 10,
    "tools": 11,
    "python/src": 11,
}

# The top-level files of src/ that stand on io/ (the public file types); the rest of src/*
# (log, stop, error, settings, stats, escape_text, trace) is used by every layer and stands on
# os/ and the public headers only.
CORE_FILES = {"file.cpp"}

# The files of src/backend/ that name every backend: the table of schemes and the table of the
# local file's alternatives. They sit above the backend folders and below their users.
TABLE_FILES = ("registry.", "alternatives.cpp")

# Backend folders built on another's: S3 is HTTP with signed requests, so its folder uses the
# HTTP client, source and XML reader. A declared edge, not a hidden one.
BUILDS_ON = {"backend/s3": {"backend/http"}}

# Folders whose files may include only include/ferry and their own folder.
API_ONLY = ("tools", "python/src")

# Known violations a change under way will remove, each (kind, file glob, what removes it):
# printed on every run, counted with --strict (as ctest runs it). None today.
PENDING: list[tuple[str, str, str]] = []


def classify(rel: str) -> str | None:
    """The node of a repository-relative path, or None when it is not checked."""
    parts = rel.split("/")
    if parts[0] == "include" and len(parts) > 1 and parts[1] == "ferry":
        return "include/ferry"
    if parts[0] == "tools":
        return "tools"
    if parts[0] == "python" and len(parts) > 1 and parts[1] == "src":
        return "python/src"
    if parts[0] != "src":
        return None
    if len(parts) == 2:
        return "core" if parts[1] in CORE_FILES else "base"
    if parts[1] == "backend":
        if len(parts) == 3:
            return "backend/registry" if parts[2].startswith(TABLE_FILES) else "backend"
        return "backend/" + parts[2]
    return parts[1]


def rank(node: str) -> int | None:
    if node in RANKS:
        return RANKS[node]
    if node.startswith("backend/"):
        return RANKS["backend/*"]
    return None


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE_SUFFIXES = {".cpp", ".hpp", ".cu", ".cuh", ".h", ".in"}


def resolve(root: Path, including: Path, target: str) -> str | None:
    """The repository-relative path an `#include "target"` names, as the build's include path
    (the file's folder, then src/ and include/) finds it; None when it is not ours."""
    for base in (including.parent, root / "src", root / "include"):
        candidate = base / target
        if candidate.is_file():
            return candidate.resolve().relative_to(root.resolve()).as_posix()
    return None


def include_edges(root: Path):
    """(file, included file) for every quoted include of the checked trees."""
    for top in ("src", "include/ferry", "tools", "python/src"):
        for path in sorted((root / top).rglob("*")):
            if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
                continue
            rel = path.relative_to(root).as_posix()
            for target in INCLUDE.findall(path.read_text(errors="replace")):
                resolved = resolve(root, path, target)
                if resolved is not None:
                    yield rel, resolved, target


def python_edges(root: Path):
    """(module, imported module) for the imports between modules of python/ferry."""
    pkg_root = root / "python"
    modules = {}
    for path in sorted((pkg_root / "ferry").rglob("*.py")):
        name = ".".join(path.relative_to(pkg_root).with_suffix("").parts)
        if name.endswith(".__init__"):
            name = name[: -len(".__init__")]
        modules[name] = path
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        package = name if is_pkg else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                targets = []
                for alias in node.names:
                    sub = f"{mod}.{alias.name}"
                    targets.append(sub if sub in modules else mod)
            else:
                continue
            for target in targets:
                # a package's __init__ importing its own modules is how a package is made
                if target in modules and target != name and not (is_pkg and target.startswith(name + ".")):
                    yield name, target


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan's algorithm)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    nodes = set(edges) | {w for ws in edges.values() for w in ws}
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def pending_reason(kind: str, rel: str) -> str | None:
    for k, pattern, reason in PENDING:
        if k == kind and fnmatch.fnmatch(rel, pattern):
            return reason
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", nargs="?", default=Path(__file__).resolve().parents[2], type=Path)
    parser.add_argument("--strict", action="store_true", help="count the pending violations too")
    parser.add_argument("--verbose", action="store_true", help="print every folder edge")
    args = parser.parse_args()
    root = args.root

    folder_edges: dict[str, set[str]] = defaultdict(set)
    up, foreign, leaks = [], [], []
    for rel, target, written in include_edges(root):
        src, dst = classify(rel), classify(target)
        if src is None or dst is None:
            continue
        if src in API_ONLY and dst not in ("include/ferry", src):
            leaks.append((rel, written))
        if dst.startswith("backend/") and dst != "backend/registry":
            own = rel.startswith(f"src/{dst}/") or dst in BUILDS_ON.get(src, ())
            if not own and classify(rel) != "backend/registry":
                foreign.append((rel, written))
        if src == dst:
            continue
        folder_edges[src].add(dst)
        rs, rd = rank(src), rank(dst)
        if rs is not None and rd is not None and rd > rs:
            up.append((rel, written, src, dst))

    loops = circles(folder_edges)
    py_edges: dict[str, set[str]] = defaultdict(set)
    for a, b in python_edges(root):
        py_edges[a].add(b)
    py_loops = circles(py_edges)

    failures = 0

    def report(title, items, kind, fmt):
        counted = [i for i in items if args.strict or not pending_reason(kind, i[0])]
        pending = [i for i in items if not args.strict and pending_reason(kind, i[0])]
        print(f"{title}: {len(counted)}" + (f" (+{len(pending)} pending)" if pending else ""))
        for i in counted:
            print("  " + fmt(i))
        for i in pending:
            print("  pending: " + fmt(i) + f"  [{pending_reason(kind, i[0])}]")
        return counted

    if args.verbose:
        for src in sorted(folder_edges):
            print(f"{src} -> {', '.join(sorted(folder_edges[src]))}")
    print(f"folder circles: {len(loops)}")
    for loop in loops:
        print("  " + " <-> ".join(loop))
    failures += len(loops)
    print(f"python module circles: {len(py_loops)}")
    for loop in py_loops:
        print("  " + " <-> ".join(loop))
    failures += len(py_loops)
    counted_up = report(f"up-edges (at most {MAX_UP_EDGES})", up, "up",
                        lambda i: f'{i[0]}: #include "{i[1]}" ({i[2]} -> {i[3]})')
    if len(counted_up) > MAX_UP_EDGES:
        failures += 1
    failures += len(report("foreign backend includes", foreign, "foreign",
                           lambda i: f'{i[0]}: #include "{i[1]}"'))
    failures += len(report("API-only leaks (python/src, tools)", leaks, "leak",
                           lambda i: f'{i[0]}: #include "{i[1]}"'))
    print("layers: " + ("FAILED" if failures else "ok"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
