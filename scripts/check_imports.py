"""The import rules of docs/architecture.md, checked: no circle of imports between modules, and no import
pointing up the floors (module-level and deferred imports alike; a type named only in a comment is not an
import). Prints what breaks them and exits 1, else one line and exits 0. `python scripts/check_imports.py`."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
# The floors, bottom first: a room (a package, or a module directly under shardlab/) imports only rooms of
# lower floors. Kept in step with the table in docs/architecture.md.
FLOORS = [
    ("", "errors", "precision", "comm_record", "degrees", "lazy"),  # "": the package's face, shardlab/__init__.py (its version)
    ("data", "model", "comm_groups"),
    ("comm",),
    ("fp8",),
    ("observe", "doctor", "optim"),
    ("parallel",),
    ("config", "plan"),
    ("checkpoint",),
    ("launch",),
    ("train", "generate", "testing"),
    ("simulate", "bench", "run"),
    ("cli",),
    ("__main__",),
]
FLOOR = {room: i for i, rooms in enumerate(FLOORS) for room in rooms}


def modules() -> dict[str, Path]:
    out = {}
    for f in sorted((SRC / "shardlab").rglob("*.py")):
        name = ".".join(f.relative_to(SRC).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = f
    return out


def imports(mods: dict[str, Path]) -> dict[str, set[tuple[str, int]]]:
    """module -> {(imported shardlab module, line)}; `from pkg import name` counts pkg.name when it is a module."""
    out: dict[str, set] = {}
    for name, f in mods.items():
        found = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("shardlab") and not node.level:
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    found.add((sub if sub in mods else node.module, node.lineno))
            elif isinstance(node, ast.Import):
                found |= {(a.name, node.lineno) for a in node.names if a.name.startswith("shardlab")}
        out[name] = {(m, line) for m, line in found if m in mods and m != name}
    return out


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def circles(graph: dict[str, set]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    edges = {m: sorted({t for t, _ in ts}) for m, ts in graph.items()}
    for root in edges:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter[0]
                counter[0] += 1
                stack.append(v)
                on.add(v)
            if i < len(edges[v]):
                work.append((v, i + 1))
                w = edges[v][i]
                if w not in index:
                    work.append((w, 0))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            for w in edges[v]:
                if w in on:
                    low[v] = min(low[v], low[w])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def upward(graph: dict[str, set]) -> list[str]:
    out = []
    for m, targets in sorted(graph.items()):
        for t, line in sorted(targets):
            a, b = room(m), room(t)
            if a != b and (a not in FLOOR or b not in FLOOR or FLOOR[b] >= FLOOR[a]):
                out.append(f"{m}:{line} imports {t} ({a or 'shardlab'} -> {b}: "
                           + ("a room missing from FLOORS)" if a not in FLOOR or b not in FLOOR else "not below it)"))
    return out


def main() -> int:
    graph = imports(modules())
    found = [f"circle: {' -> '.join(c)}" for c in circles(graph)] + upward(graph)
    for line in found:
        print(line)
    if not found:
        print(f"{len(graph)} modules, {sum(len(v) for v in graph.values())} imports: no circle, none points up")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
