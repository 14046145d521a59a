"""The house stands: every import points down the layers, and no modules import each other in a circle.

    reckon    the Django project (settings, urls, celery app, wsgi/asgi, env helpers)
    api  console  cli  demo
              the three front ends (the HTTP API, the operator screens, the commands that print
              the log for a person; none imports another) and the demo's data and scripted agent
    evidence  chain checkpoints, signing, evidence bundles and the report
    access    roles, tokens, tenancy and masking rules the front ends use
    notify    notification channels, routes, the outbox and its delivery (driven by recovery's events)
    recovery  projection, policies, adapters, reconciliation, decisions
    runs      event registry, store, fold, leases, snapshots, importer
    bench     benchmarks: may import anything; nothing imports them
    reckon_client  the agent client (clients/python), below them all: the server imports its
              identity formula, pairing rule and run; it imports no module of the server, nor Django

Imports are read with ``ast`` from every module of the project (migrations and management
commands included, and imports inside functions too: a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {"runs": 0, "recovery": 1, "notify": 2, "access": 3, "evidence": 4, "api": 5, "console": 5, "cli": 5, "demo": 5, "reckon": 6}
APPS = (*LAYERS, "bench")


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    found = {}
    for app in APPS:
        for path in sorted((root / app).rglob("*.py")):
            found[module_name(path, root)] = path
    return found


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports (a package when the name is not a module of its own)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    modules = project_modules(root)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for src, targets in graph.items():
        src_app = src.split(".")[0]
        for dst in sorted(targets):
            dst_app = dst.split(".")[0]
            if dst_app == src_app:
                continue
            if dst_app == "bench":
                bad.append(f"{src} imports {dst}: nothing imports the benchmarks")
            elif src_app == "bench":
                continue
            elif LAYERS[dst_app] > LAYERS[src_app]:
                bad.append(f"{src} imports {dst}: {src_app} is below {dst_app}")
            elif LAYERS[dst_app] == LAYERS[src_app]:
                bad.append(f"{src} imports {dst}: {src_app} and {dst_app} are two front ends; share through a layer below")
    return bad


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
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
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_every_import_points_down_the_layers():
    bad = upward_imports(import_graph())
    assert not bad, "imports that point up the layers:\n" + "\n".join(bad)


def test_no_modules_import_each_other_in_a_circle():
    cycles = import_cycles(import_graph())
    assert not cycles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def server_imports_of_the_client(root: Path = ROOT) -> list[str]:
    """Imports of a server app or of Django by the agent client's modules."""
    client, bad = root / "clients" / "python" / "reckon_client", []
    for path in sorted(client.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                targets = [node.module or ""]
            else:
                continue
            bad += [f"{path.relative_to(root)} imports {t}" for t in targets if t.split(".")[0] in {*APPS, "django"}]
    return bad


def test_the_agent_client_imports_nothing_of_the_server():
    assert (ROOT / "clients" / "python" / "reckon_client" / "run.py").exists()
    bad = server_imports_of_the_client()
    assert not bad, "the agent client must not depend on the server:\n" + "\n".join(bad)


def test_a_client_module_importing_the_server_is_caught(tmp_path):
    (tmp_path / "clients" / "python" / "reckon_client").mkdir(parents=True)
    (tmp_path / "clients" / "python" / "reckon_client" / "run.py").write_text("import json\ndef f():\n    from runs.store import x\n")
    assert server_imports_of_the_client(tmp_path) == ["clients/python/reckon_client/run.py imports runs.store"]


def test_the_project_has_every_layer_and_reads_their_imports():
    graph = import_graph()
    assert {m.split(".")[0] for m in graph} == set(APPS)
    assert "runs.store" in graph["runs.selectors"]  # an edge this test must see to mean anything


# The checks themselves, on a small house written for each case.


def _house(tmp_path: Path, files: dict[str, str]) -> dict[str, set[str]]:
    for app in APPS:
        (tmp_path / app).mkdir()
        (tmp_path / app / "__init__.py").write_text("")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return import_graph(tmp_path)


@pytest.mark.parametrize(
    "files, expected",
    [
        ({"runs/store.py": "def f():\n    from recovery.models import X\n", "recovery/models.py": ""}, "runs.store imports recovery.models: runs is below recovery"),
        ({"recovery/x.py": "from access import roles\n", "access/roles.py": ""}, "recovery.x imports access.roles: recovery is below access"),
        ({"api/x.py": "import console.views\n", "console/views.py": ""}, "api.x imports console.views: api and console are two front ends; share through a layer below"),
        ({"console/x.py": "from bench import store\n", "bench/store.py": ""}, "console.x imports bench.store: nothing imports the benchmarks"),
    ],
)
def test_a_single_upward_import_is_caught(tmp_path, files, expected):
    assert upward_imports(_house(tmp_path, files)) == [expected]


def test_a_downward_import_and_a_benchmark_importing_anything_pass(tmp_path):
    graph = _house(
        tmp_path, {"recovery/a.py": "from runs import b\n", "runs/b.py": "", "bench/c.py": "import reckon\nfrom console import d\n", "console/d.py": "from . import e\n", "console/e.py": ""}
    )
    assert upward_imports(graph) == []
    assert graph["console.d"] == {"console.e"}


def test_a_circle_of_two_modules_is_caught(tmp_path):
    graph = _house(tmp_path, {"recovery/a.py": "from recovery.b import x\n", "recovery/b.py": "def f():\n    from recovery import a\n"})
    assert import_cycles(graph) == [["recovery.a", "recovery.b"]]


# The suite's own modules: a test module or a conftest.py is imported by pytest alone. What tests
# share lives in a conftest.py (fixtures, found by pytest without an import) or in a helper module
# that is neither (tests/*/helpers.py, tests/console/browser.py, tests/api/live.py).


def _names_imported(node: ast.AST, package: str) -> list[str]:
    """The modules (or module members) an import statement in ``package`` names, made absolute."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    return [base, *(f"{base}.{a.name}" for a in node.names)]


def imports_of_test_modules(root: Path = ROOT) -> list[str]:
    """``path:line imports module`` for every import, by a module under tests/, of a test module
    (``test_*``) or of a conftest module (imports inside functions too)."""
    bad = []
    for path in sorted((root / "tests").rglob("*.py")):
        name = module_name(path, root)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            for target in _names_imported(node, package):
                if target.split(".")[0] == "tests" and any(part.startswith("test_") or part == "conftest" for part in target.split(".")[1:]):
                    found.append((node.lineno, f"{path.relative_to(root)}:{node.lineno} imports {target}"))
                    break
        bad += [line for _, line in sorted(found)]
    return bad


def test_no_module_of_the_suite_imports_a_test_module_or_a_conftest():
    assert (ROOT / "tests" / "conftest.py").exists() and (ROOT / "tests" / "recovery" / "helpers.py").exists()
    bad = imports_of_test_modules()
    assert not bad, "share fixtures through a conftest.py and helpers through a module that is neither:\n" + "\n".join(bad)


def test_a_suite_module_importing_a_test_module_or_a_conftest_is_caught(tmp_path):
    (tmp_path / "tests" / "runs").mkdir(parents=True)
    files = {
        "tests/__init__.py": "",
        "tests/conftest.py": "",
        "tests/helpers.py": "import json\nfrom tests.runs.helpers import more\n",
        "tests/runs/__init__.py": "",
        "tests/runs/helpers.py": "def more():\n    pass\n",
        "tests/runs/test_a.py": "from tests.runs.helpers import more\nfrom .helpers import more\nfrom unittest import TestCase\n",
        "tests/runs/test_b.py": "import pytest\nfrom tests.runs.test_a import more\n\ndef test_x():\n    from . import conftest\n",
        "tests/runs/test_c.py": "from tests import conftest\nimport tests.runs.test_b\nfrom tests.runs import test_a\nfrom .test_b import x\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert imports_of_test_modules(tmp_path) == [
        "tests/runs/test_b.py:2 imports tests.runs.test_a",
        "tests/runs/test_b.py:5 imports tests.runs.conftest",
        "tests/runs/test_c.py:1 imports tests.conftest",
        "tests/runs/test_c.py:2 imports tests.runs.test_b",
        "tests/runs/test_c.py:3 imports tests.runs.test_a",
        "tests/runs/test_c.py:4 imports tests.runs.test_b",
    ]
