"""The core's parts and the carrier SDK: true layers, one public surface, no private writes."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import tomllib
import warnings
from collections import defaultdict
from pathlib import Path

import grimp
import numpy as np
import pytest

import conveyor as cv
import conveyor.sdk as sdk

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "core" / "src" / "conveyor"
TOOL = ROOT / "tools" / "private_writes.py"
# The parts, top to bottom, as the import-linter contract lists them.
PARTS = ("cli", "array_api", "lib", "plugins", "sdk", "engine", "types")


def _part(module: str) -> str | None:
    bits = module.split(".")
    return bits[1] if len(bits) > 1 and bits[1] in PARTS else None


def _config() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]  # type: ignore[no-any-return]


class TestLayers:
    def test_no_cycle_between_parts_even_counting_type_checking_imports(self) -> None:
        """Squashing each part to one node, the import graph (TYPE_CHECKING too) is acyclic."""
        graph = grimp.build_graph("conveyor", exclude_type_checking_imports=False)
        edges: dict[str, set[str]] = defaultdict(set)
        for module in graph.modules:
            for imported in graph.find_modules_directly_imported_by(module):
                a, b = _part(module), _part(imported)
                if a and b and a != b:
                    edges[a].add(b)

        def reaches(start: str, goal: str) -> bool:
            stack, seen = [start], set()
            while stack:
                for nxt in edges[stack.pop()]:
                    if nxt == goal:
                        return True
                    if nxt not in seen:
                        seen.add(nxt)
                        stack.append(nxt)
            return False

        assert edges["engine"] == {"types"}  # the engine reads the layers above by protocol
        assert not edges["types"]
        assert [(a, b) for a in PARTS for b in edges[a] if reaches(b, a)] == []

    def test_the_contract_counts_type_checking_imports_and_ignores_nothing(self) -> None:
        config = _config()
        assert config["exclude_type_checking_imports"] is False
        (layers,) = [c for c in config["contracts"] if c["type"] == "layers"]  # type: ignore[attr-defined, index]
        assert "ignore_imports" not in layers
        assert [p.replace(" ", "") for p in layers["layers"]] == [
            "cli",
            "array_api",
            "lib",
            "plugins|sdk",
            "engine",
            "types",
        ]

    def test_no_late_binding_module_and_no_composed_table(self) -> None:
        """``conveyor._binding`` and Tensor's string-keyed ``_COMPOSED`` table are gone."""
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module("conveyor._binding")
        source = "\n".join(p.read_text() for p in CORE.rglob("*.py"))
        assert "_COMPOSED" not in source
        assert "binder(" not in source

    def test_the_core_names_no_carrier_package(self) -> None:
        """The core never imports a carrier distribution (the demo is a plugin of its own)."""
        for path in CORE.rglob("*.py"):
            text = path.read_text()
            assert not re.search(r"^\s*(from|import) conveyor_", text, re.M), path


class TestCarrierBoundary:
    def test_carriers_import_only_the_public_surface(self) -> None:
        """Every carrier distribution's direct core imports are conveyor, .sdk and .plugins."""
        graph = grimp.build_graph(
            "conveyor",
            "conveyor_generic",
            "conveyor_storage",
            "conveyor_metal",
            "conveyor_shm",
            "conveyor_dask",
            "conveyor_testkit",
            "conveyor_demo",
            exclude_type_checking_imports=False,
        )
        allowed = {"conveyor", "conveyor.sdk", "conveyor.plugins"}
        outside = [
            (module, imported)
            for module in graph.modules
            if not module.startswith("conveyor.") and module != "conveyor"
            for imported in graph.find_modules_directly_imported_by(module)
            if imported.startswith("conveyor.") and imported not in allowed
        ]
        assert outside == []

    def test_no_carrier_writes_core_private_state(self) -> None:
        done = subprocess.run([sys.executable, str(TOOL)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout
        assert "no core private state written" in done.stdout

    @pytest.mark.parametrize(
        "line",
        [
            "tensor._carrier = carrier",
            "op._operation_name, op._dispatched = 'x', True",
            "op.__class__ = Other",
            "carrier._version += 1",
            "setattr(op, '_dispatch_carrier_class', cls)",
        ],
    )
    def test_the_checker_finds_each_kind_of_write(self, tmp_path: Path, line: str) -> None:
        """The lint fails a module that writes core state in any of these ways."""
        bad = tmp_path / "bad.py"
        bad.write_text(f"def f(tensor, op, carrier, cls, Other):\n    {line}\n")
        done = subprocess.run([sys.executable, str(TOOL), str(bad)], capture_output=True, text=True)
        assert done.returncode == 1
        assert "which the core owns" in done.stdout

    def test_overriding_a_documented_hook_is_not_a_write(self, tmp_path: Path) -> None:
        ok = tmp_path / "ok.py"
        ok.write_text(
            "class C:\n"
            "    _dispatch_classes = {}\n"
            "    @property\n"
            "    def _version(self):\n"
            "        return 0\n"
            "    def _dispatch_op(self, name):\n"
            "        return None\n"
        )
        done = subprocess.run([sys.executable, str(TOOL), str(ok)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout


class TestSdkSurface:
    def test_every_listed_name_exists_once_sorted(self) -> None:
        names = sdk.__all__
        assert all(hasattr(sdk, name) for name in names)
        assert len(set(names)) == len(names)
        key = [[int(p) if p.isdigit() else p for p in re.split(r"(\d+)", n)] for n in names]
        assert key == sorted(key)

    def test_publish_builds_a_result_over_a_new_carrier(self) -> None:
        """``publish`` gives the attributes to a new carrier instance and wraps it, unchecked."""
        from conveyor_generic import CPU

        flat = np.arange(6, dtype=np.float32)
        t = sdk.publish(CPU, {"_array": flat, "_dt": cv.float32}, cv.Layout((2, 3)), cv.float32)
        assert type(t.carrier) is CPU and t.carrier.size == 6
        assert t.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
        assert t.grad_fn is None and not t.requires_grad

    def test_wrap_views_an_existing_carrier(self) -> None:
        x = cv.tensor([1.0, 2.0, 3.0])
        view = sdk.wrap(x.carrier, cv.Layout((2,), (1,), 1), cv.float32)
        assert view.carrier is x.carrier and view.tolist() == [2.0, 3.0]

    def test_as_dispatched_stamps_a_node_like_dispatch_op(self) -> None:
        """A node no dispatch made gets the name, the exact carrier class and the carrier."""
        carrier = cv.tensor([1.0]).carrier
        op = sdk.as_dispatched(sdk.Operation(), "project", carrier)
        assert (op._operation_name, op._dispatch_carrier_class) == ("project", type(carrier))
        assert op._dispatch_carrier is carrier
        with pytest.raises(TypeError, match="as_dispatched needs a fresh Operation"):
            sdk.as_dispatched(op, "again", carrier)  # already stamped: nothing replaced
        assert op._operation_name == "project"

    def test_storage_only_refusal_has_one_wording(self) -> None:
        refusal = sdk.storage_only_refusal("add", sdk.Carrier)
        assert isinstance(refusal, NotImplementedError)
        assert str(refusal) == (
            "add on Carrier: the carrier's definition is storage-only (no kernel or composite "
            "provider), so it executes no computational operation; move the tensor to a compute "
            "carrier with cv.move"
        )
        named = sdk.storage_only_refusal("add", sdk.Carrier, why="it stores", move_to="cpu")
        assert str(named).endswith(
            "it stores, so it executes no computational operation; move "
            "the tensor to a compute carrier with cv.move(tensor, 'cpu')"
        )

    def test_the_declarative_table_dispatches_fresh_operations(self) -> None:
        """A class naming ``_dispatch_classes`` needs no ``_dispatch_op`` of its own."""

        class Tabled(sdk.Carrier):
            pass

        class Twice(sdk.Operation):
            pass

        Tabled._dispatch_classes = {"testing.twice": Twice}
        carrier = Tabled()
        first, second = carrier.dispatch_op("testing.twice"), carrier.dispatch_op("testing.twice")
        assert type(first) is Twice and first is not second
        with pytest.raises(NotImplementedError, match="add on Tabled: the carrier does not"):
            carrier.dispatch_op("add")

    def test_shipped_carriers_share_the_one_view_implementation(self, tmp_path: Path) -> None:
        """Generic, CPU and FileBacked views are classes made by the SDK's ``view_operations``."""
        from conveyor_generic import CPU, Generic
        from conveyor_storage import FileBacked

        carriers = [
            CPU.allocate(1, cv.float32),
            Generic.allocate(1, cv.float32),
            FileBacked.allocate(1, cv.float32, directory=tmp_path),
        ]
        for carrier in carriers:
            kind = type(carrier.dispatch_op("reshape"))
            assert kind.backward is sdk.VIEW_VJPS["reshape"], carrier
            carrier.release()


# Old deep paths the docs once used, and where their names live now.
_ALIASES = {
    "conveyor.policy": "conveyor.types.policy",
    "conveyor.options": "conveyor.types.options",
    "conveyor.capabilities": "conveyor.types.capabilities",
    "conveyor.gradients": "conveyor.engine.gradients",
    "conveyor.move": "conveyor.engine.move",
    "conveyor.profiling": "conveyor.engine.profiling",
    "conveyor.doctor": "conveyor.plugins._doctor",
}


class TestDeprecatedPaths:
    @pytest.mark.parametrize(("old", "new"), sorted(_ALIASES.items()))
    def test_old_path_warns_and_reexports_the_same_objects(self, old: str, new: str) -> None:
        """Each alias warns once, naming the replacement, and exports the very same objects."""
        code = (
            "import warnings, importlib, json\n"
            "import conveyor\n"
            "with warnings.catch_warnings(record=True) as seen:\n"
            "    warnings.simplefilter('always')\n"
            f"    old = importlib.import_module({old!r})\n"
            f"new = importlib.import_module({new!r})\n"
            "same = all(getattr(old, n) is getattr(new, n) for n in new.__all__)\n"
            "texts = [str(w.message) for w in seen if w.category is DeprecationWarning]\n"
            "print(json.dumps([same, sorted(old.__all__) == sorted(new.__all__), texts]))\n"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        same, listed, texts = __import__("json").loads(done.stdout)
        assert same and listed
        assert len(texts) == 1 and f"{old} " in texts[0] + " " and "removed in 0.2" in texts[0]

    def test_cv_move_stays_callable_after_the_old_module_is_imported(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            importlib.import_module("conveyor.move")
        moved = cv.move(cv.tensor([1.0, 2.0]), "generic")
        assert moved.tolist() == [1.0, 2.0]
