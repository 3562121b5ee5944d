"""Public API: what `conveyor` and `conveyor.plugins` export, and what importing costs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import conveyor as cv
from conveyor import plugins
from conveyor.engine.functional import VIEW_OPERATIONS

ROOT = Path(__file__).resolve().parents[2]
MODULES = {"conveyor": cv, "conveyor.plugins": plugins}


def natural_key(name: str) -> list[Any]:
    """Sort key that orders digit runs by value (int8 < int16), as the hand-sorted lists do."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def clean_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.upper().startswith("CONVEYOR_")}


_EXPORTS = [(module, name) for module, m in MODULES.items() for name in m.__all__]


class TestDunderAll:
    @pytest.mark.parametrize(("module", "name"), _EXPORTS, ids=[f"{m}.{n}" for m, n in _EXPORTS])
    def test_every_listed_name_exists(self, module: str, name: str) -> None:
        """Every name in __all__ is an attribute of the module."""
        assert hasattr(MODULES[module], name)

    @pytest.mark.parametrize("module", list(MODULES))
    def test_all_is_sorted_without_duplicates(self, module: str) -> None:
        """__all__ is kept sorted (digit runs by value) and lists each name once."""
        names = MODULES[module].__all__

        assert names == sorted(names, key=natural_key)
        assert len(set(names)) == len(names)

    @pytest.mark.parametrize("module", list(MODULES))
    def test_no_private_names(self, module: str) -> None:
        """__all__ lists no underscore-prefixed name (dunders such as __version__ aside)."""
        private = [
            n
            for n in MODULES[module].__all__
            if n.startswith("_") and not (n.startswith("__") and n.endswith("__"))
        ]

        assert private == []


# Names the public API fixes at the top level (dispatch functions are checked separately).
DESIGN_NAMES = [
    "Carrier",
    "DependentCarrier",
    "Operation",
    "Tensor",
    "Layout",
    "Subtensor",
    "OperationExecutionOptions",
    "OperationPlan",
    "OperandPlan",
    "OperationSpec",
    "resolve_plan",
    "registered_operations",
    "UnsupportedOperationPlan",
    "OperationCapability",
    "OperandCapability",
    "CapabilitySet",
    "register_operation_capabilities",
    "declared_capabilities",
    "CarrierDefinition",
    "register_carrier_definition",
    "closed_carrier",
    "is_closed_carrier",
    "execute_lowered",
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "is_grad_enabled",
    "profile",
    "add_observer",
    "Profiler",
    "OperationRecord",
    "ConveyorWarning",
    "DType",
    "dtype",
    "promote_types",
    "is_subtype_of",
    "broadcast_shapes",
    "tensor",
    "zeros",
    "ones",
    "full",
    "arange",
    "empty",
    "zeros_like",
    "ones_like",
    "plugins",
    "hookimpl",
    "__version__",
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "any_dtype",
    "numeric",
    "integer",
    "signed_integer",
    "unsigned_integer",
    "floating",
    "complex_floating",
]

PLUGIN_NAMES = [
    "PluginHost",
    "PluginRecord",
    "PluginState",
    "PluginError",
    "PluginUnavailable",
    "PluginConflictWarning",
    "PluginBrokenWarning",
    "ENVIRONMENT_VARIABLES",
    "PLUGIN_API_VERSION",
    "hookimpl",
    "hookspec",
    "host",
    "set_default_host",
]

_DISPATCH_NAMES = sorted(cv.registered_operations()) + sorted(VIEW_OPERATIONS)


class TestDesignNames:
    @pytest.mark.parametrize("name", DESIGN_NAMES)
    def test_design_name_is_exported(self, name: str) -> None:
        """Each name the public API fixes is in conveyor.__all__."""
        assert name in cv.__all__

    @pytest.mark.parametrize("name", PLUGIN_NAMES)
    def test_plugin_name_is_exported(self, name: str) -> None:
        """Each plugin-host name is in conveyor.plugins.__all__."""
        assert name in plugins.__all__

    @pytest.mark.parametrize("name", _DISPATCH_NAMES)
    def test_dispatch_function_is_exported(self, name: str) -> None:
        """Every planned dispatch name and view name has a public function of that name."""
        assert name in cv.__all__
        assert callable(getattr(cv, name)) and getattr(cv, name).__name__ == name

    def test_warning_base_reads_as_conveyor_name(self) -> None:
        """ConveyorWarning is a UserWarning shown as conveyor.ConveyorWarning."""
        assert issubclass(cv.ConveyorWarning, UserWarning)
        assert cv.ConveyorWarning.__module__ == "conveyor"


_IMPORT_PROBE = """
import json, sys
import conveyor
from conveyor.plugins import _host
print(json.dumps({
    "modules": sorted(m for m in sys.modules if m.split(".")[0] in ("numpy", "ml_dtypes")),
    "host_created": _host._default is not None,
}))
"""


class TestImportConveyor:
    def test_import_loads_no_numpy_and_no_plugin(self) -> None:
        """A fresh `import conveyor` imports neither NumPy nor ml_dtypes and scans no plugin."""
        done = subprocess.run(
            [sys.executable, "-c", _IMPORT_PROBE],
            capture_output=True,
            text=True,
            env=clean_environment(),
            check=True,
            timeout=60,
        )

        found = json.loads(done.stdout)
        assert found == {"modules": [], "host_created": False}


class TestSuiteEnvironmentGuard:
    def test_plugin_variables_are_conveyor_prefixed(self) -> None:
        """Every variable the plugin host reads is a CONVEYOR_* name, so the guard covers it."""
        assert all(name.startswith("CONVEYOR_") for name in plugins.ENVIRONMENT_VARIABLES)

    def test_suite_refuses_to_start_with_conveyor_variable(self) -> None:
        """pytest exits with a usage error naming each CONVEYOR_* variable that is set."""
        env = clean_environment()
        env["CONVEYOR_STRICT_PLUGINS"] = "1"
        env["CONVEYOR_SOMETHING_ELSE"] = "x"

        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "--co", "-p", "no:cacheprovider", "tests/core"],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=120,
        )

        assert done.returncode == pytest.ExitCode.USAGE_ERROR
        assert "CONVEYOR_SOMETHING_ELSE, CONVEYOR_STRICT_PLUGINS" in done.stderr
