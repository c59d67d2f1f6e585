"""The package's shape: no import cycle among gprl's modules, no private name used outside its module."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {"gprl": ROOT / "gprl", "gprl.envs": ROOT / "envs"}


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in SOURCES.items():
        for path in folder.rglob("*.py"):
            if "envs" in path.relative_to(folder).parts[:1] and package == "gprl":
                continue  # a checkout may link gprl/envs to envs/
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[str, list[str]]]:
    """(imported module, names taken from it) for every import statement, at any depth."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.append((sub, []) if sub in known else (base, [a.name]))
    return [(m, n) for m, n in out if m in known]


def test_no_import_cycles():
    known = modules()
    graph = {m: {i for i, _ in imports(m, p, known)} - {m} for m, p in known.items()}
    # a package's __init__ may import its own modules; what counts is modules importing each other
    graph = {m: {i for i in deps if not m.startswith(i + ".")} for m, deps in graph.items()}
    cycles, state = [], {}

    def visit(m, stack):
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n, stack + [n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_no_private_names_across_modules():
    known = modules()
    crossings = []
    for m, p in known.items():
        for target, names in imports(m, p, known):
            crossings += [f"{m} imports {target}.{n}" for n in names if n.startswith("_") and target != m]
        # a gprl module bound to a name in this file (``from gprl import envs``), then ``envs._name``
        bound = {a.asname or a.name for node in ast.walk(ast.parse(p.read_text()))
                 if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gprl")
                 for a in node.names if f"{node.module}.{a.name}" in known}
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                    and not node.attr.startswith("__") \
                    and isinstance(node.value, ast.Name) and node.value.id in bound:
                crossings.append(f"{m} uses {node.value.id}.{node.attr}")
    assert not crossings, "\n".join(crossings)


def test_public_api_and_moved_module_paths():
    import warnings

    import gprl

    for name in ("Population", "GeneticProgramming", "Dataset", "SymbolicRegressor", "SymbolicClassifier"):
        assert isinstance(getattr(gprl, name), type), name
    assert callable(gprl.envs.make) and callable(gprl.datasets.load)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import gprl.population as old
    assert old.Population is gprl.Population
    assert any("gprl.population moved to gprl.core.population" in str(w.message) for w in caught)
