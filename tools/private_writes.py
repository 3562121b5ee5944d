"""Refuse writes of the core's private state from outside the core (``make lint`` runs it).

The carrier distributions (and every other distribution of this repository but the core) build
on exactly the surface a vendor gets: ``conveyor``, ``conveyor.sdk`` and ``conveyor.plugins``
(import-linter checks the imports). This checks the other half: no code outside the core
assigns an attribute the core keeps as private state on its objects (a Tensor's slots, an
Operation's dispatch metadata and saved state, a Carrier's write counter and capability
snapshot, the storage handle of a definition-backed carrier), and none assigns ``__class__`` or
``__dict__`` of an object. Overriding a documented hook (defining ``_dispatch_op``, or
``_version`` as a property) is not a write and is allowed.

The private names are read from the core's own source, so a new piece of core state is covered
without editing this file.

Usage: ``python tools/private_writes.py [PATH ...]`` (default: every ``src`` tree of the
repository outside ``core``); exit status 1 when a write is found.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENGINE = ROOT / "core" / "src" / "conveyor" / "engine"
# The core classes whose instances carriers create, receive or subclass.
CORE_CLASSES = {
    "tensor.py": ("Tensor",),
    "operation.py": ("Operation",),
    "carrier.py": ("Carrier", "DependentCarrier"),
    "definition_dispatch.py": ("DefinitionOperation",),
}
# Class-level hooks a carrier sets on its own class (documented in conveyor.sdk).
HOOKS = frozenset({"_dispatch_classes"})
# Never assigned on any object from outside the core.
ALWAYS = frozenset({"__class__", "__dict__"})


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _class_state(node: ast.ClassDef) -> Iterator[str]:
    """Private names a core class declares, defaults or assigns on ``self``."""
    for item in ast.walk(node):
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            yield item.target.id
        elif isinstance(item, ast.Assign):
            for target in item.targets:
                if isinstance(target, ast.Name):
                    yield target.id
        elif (
            isinstance(item, ast.Attribute)
            and isinstance(item.ctx, ast.Store)
            and isinstance(item.value, ast.Name)
            and item.value.id in ("self", "cls")
        ):
            yield item.attr
        if isinstance(item, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in item.targets
        ):
            value = item.value
            if isinstance(value, ast.Tuple | ast.List):
                yield from (e.value for e in value.elts if isinstance(e, ast.Constant))


def core_state() -> frozenset[str]:
    """Every private attribute name the core keeps as state on its objects."""
    names: set[str] = set()
    for module, classes in CORE_CLASSES.items():
        tree = ast.parse((ENGINE / module).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name in classes:
                names.update(n for n in _class_state(node) if _private(n))
    # The storage handle a definition-backed carrier gets from the registry.
    registry = ast.parse((ENGINE / "carrier_registry.py").read_text())
    for node in ast.walk(registry):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and node.attr.startswith("_cv_")
        ):
            names.add(node.attr)
    return frozenset(names - HOOKS)


def _targets(node: ast.AST) -> Iterable[ast.expr]:
    if isinstance(node, ast.Assign):
        return node.targets
    if isinstance(node, ast.AugAssign | ast.AnnAssign):
        return (node.target,)
    if isinstance(node, ast.Delete):
        return node.targets
    return ()


def _attributes(target: ast.expr) -> Iterator[ast.Attribute]:
    if isinstance(target, ast.Attribute):
        yield target
    elif isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _attributes(element)


def violations(path: Path, state: frozenset[str]) -> Iterator[str]:
    """``path:line: ...`` for every write of core state (or ``__class__`` / ``__dict__``)."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        for target in _targets(node):
            for attribute in _attributes(target):
                if attribute.attr in state or attribute.attr in ALWAYS:
                    yield (
                        f"{path}:{attribute.lineno}: writes {attribute.attr!r}, which the core "
                        f"owns; use the conveyor.sdk function that does it (publish, wrap, "
                        f"as_dispatched, _mark_written, CarrierDefinition(operation_class=...))"
                    )
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and len(node.args) >= 2
        ):
            name = node.args[1]
            if isinstance(name, ast.Constant) and name.value in state | ALWAYS:
                yield f"{path}:{node.lineno}: {node.func.id}s {name.value!r}, which the core owns"


def _default_paths() -> list[Path]:
    trees = [*ROOT.glob("carriers_*/src"), *ROOT.glob("plugins/*/src")]
    return sorted(p for tree in trees for p in tree.rglob("*.py"))


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or _default_paths()
    files = [f for p in paths for f in (sorted(p.rglob("*.py")) if p.is_dir() else [p])]
    state = core_state()
    found = [line for f in files for line in violations(f, state)]
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} write(s) of core private state outside the core")
        return 1
    print(f"no core private state written in {len(files)} file(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
