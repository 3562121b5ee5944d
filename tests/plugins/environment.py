"""PluginEnvironment: throwaway plugin distributions written as real dist-info folders.

Plugin modules and ``*.dist-info`` folders (METADATA and entry_points.txt) go into a temporary
directory on ``sys.path``, so discovery runs through the standard library exactly as for an
installed distribution. Each environment has its own entry-point group and module-name prefix,
so installed plugins and other tests can never leak in.
"""

from __future__ import annotations

import re
import sys
import textwrap
import uuid
from collections.abc import Mapping
from pathlib import Path

import pytest

from conveyor.plugins import PluginHost

__all__ = ["PluginEnvironment"]


def _dist_folder(distribution: str, version: str) -> str:
    return f"{re.sub(r'[-_.]+', '_', distribution)}-{version}.dist-info"


class PluginEnvironment:
    """Throwaway plugin distributions for one test.

    ``plugin(...)`` writes a plugin module and declares its entry point; ``host(...)`` builds a
    ``PluginHost`` on this test's private entry-point group. Each plugin module touches a marker
    file when imported, so a test can prove a module was never imported.
    """

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        token = uuid.uuid4().hex[:10]
        self.site = root / "site"
        self.markers = root / "markers"
        self.site.mkdir()
        self.markers.mkdir()
        self.group = f"conveyor_test_{token}"
        self.prefix = f"_cvt_{token}_"
        self._entry_points: dict[str, list[tuple[str, str]]] = {}
        self._versions: dict[str, str] = {}
        monkeypatch.syspath_prepend(str(self.site))

    def module_name(self, name: str) -> str:
        """The importable name of this test's module ``name``."""
        return f"{self.prefix}{name}"

    def write_module(self, name: str, source: str) -> str:
        """Write a module whose import touches the marker ``name``; returns its full name."""
        module = self.module_name(name)
        marker = self.markers / name
        header = f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n"
        (self.site / f"{module}.py").write_text(header + textwrap.dedent(source))
        return module

    def imported(self, name: str) -> bool:
        """Whether the module ``name`` was ever imported (marker file or ``sys.modules``)."""
        return (self.markers / name).exists() or self.module_name(name) in sys.modules

    def entry_point(
        self, distribution: str, name: str, value: str, *, version: str = "1.0"
    ) -> None:
        """Declare an entry point (duplicates are written as given) and rewrite the dist-info."""
        self._entry_points.setdefault(distribution, []).append((name, value))
        self._versions[distribution] = version
        folder = self.site / _dist_folder(distribution, version)
        folder.mkdir(exist_ok=True)
        (folder / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n"
        )
        lines = [f"{n} = {v}" for n, v in self._entry_points[distribution]]
        (folder / "entry_points.txt").write_text(f"[{self.group}]\n" + "\n".join(lines) + "\n")

    def plugin(
        self,
        name: str,
        source: str = "",
        *,
        distribution: str | None = None,
        version: str = "1.0",
        api: object = "1.0",
        carriers: Mapping[str, str] | None = None,
        attribute: str | None = None,
    ) -> str:
        """Write plugin module ``name`` and its entry point; returns the module's full name.

        Args:
            source: module body after the standard imports (``hookimpl``, ``Carrier``, ...).
            distribution: defaults to ``cvt-<name>``.
            api: the ``CONVEYOR_PLUGIN_API`` value written with ``repr``; ``None`` omits it.
            carriers: registered name -> class name; each class is an empty Carrier subclass
                returned by a generated ``conveyor_carriers`` hook.
            attribute: make the entry point ``module:attribute`` instead of ``module``.
        """
        parts = [
            "from conveyor.engine.carrier import Carrier, DependentCarrier",
            "from conveyor.plugins import PluginUnavailable, hookimpl",
        ]
        if api is not None:
            parts.append(f"CONVEYOR_PLUGIN_API = {api!r}")
        parts.append(textwrap.dedent(source))
        if carriers:
            for cls in dict.fromkeys(carriers.values()):
                parts.append(f"class {cls}(Carrier):\n    pass\n")
            mapping = ", ".join(f"{key!r}: {cls}" for key, cls in carriers.items())
            parts.append(f"@hookimpl\ndef conveyor_carriers():\n    return {{{mapping}}}\n")
        module = self.write_module(name, "\n".join(parts))
        value = module if attribute is None else f"{module}:{attribute}"
        self.entry_point(distribution or f"cvt-{name}", name, value, version=version)
        return module

    def host(self, **options: object) -> PluginHost:
        """A fresh host on this test's entry-point group."""
        return PluginHost(group=self.group, **options)  # type: ignore[arg-type]  # test passthrough
