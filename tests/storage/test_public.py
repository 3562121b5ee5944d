"""The public surface of conveyor-storage and conveyor.engine.move, and the plugin declaration."""

from __future__ import annotations

import importlib
import importlib.metadata

import pytest

import conveyor as cv
import conveyor_storage
from conveyor_storage import plugin

# The module, not the function ``cv.move`` that shadows its name on the package.
move_module = importlib.import_module("conveyor.engine.move")

NAMES = ["BlockDevice", "BlockDeviceCarrier", "Evictable", "EvictableOperation", "FileBacked"]


@pytest.mark.parametrize("name", NAMES)
def test_storage_name_is_public(name: str) -> None:
    """Every public class is importable from the top level and listed in __all__."""
    assert name in conveyor_storage.__all__
    assert getattr(conveyor_storage, name).__module__.startswith("conveyor_storage")


@pytest.mark.parametrize(
    "name", ["MoveRoute", "move", "move_route", "move_routes", "register_move_route"]
)
def test_move_name_is_public(name: str) -> None:
    """conveyor.engine.move lists its public names."""
    assert name in move_module.__all__


def test_all_is_sorted() -> None:
    """__all__ is kept sorted."""
    assert conveyor_storage.__all__ == sorted(conveyor_storage.__all__)
    assert move_module.__all__ == sorted(move_module.__all__)


def test_entry_point_and_api_declaration() -> None:
    """The distribution registers its plugin module in the conveyor.plugins group."""
    found = [
        ep
        for ep in importlib.metadata.entry_points(group="conveyor.plugins")
        if ep.name == "storage"
    ]
    assert [ep.value for ep in found] == ["conveyor_storage.plugin"]
    assert plugin.CONVEYOR_PLUGIN_API == "1.0"


def test_plugin_loads_and_registers_lower_case_names() -> None:
    """The host loads the plugin and resolves its carrier names."""
    host = cv.plugins.host()
    record = next(r for r in host.plugins() if r.name == "storage")
    assert record.state is cv.plugins.PluginState.LOADED
    assert host.carrier("file") is conveyor_storage.FileBacked
    assert host.carrier("block") is conveyor_storage.BlockDeviceCarrier
    assert host.carrier("evictable") is conveyor_storage.Evictable


@pytest.mark.parametrize("name", ["FileBacked", "BlockDeviceCarrier", "Evictable"])
def test_shipped_carriers_are_closed(name: str) -> None:
    """Every shipped carrier class is closed and final."""
    cls = getattr(conveyor_storage, name)
    assert cv.is_closed_carrier(cls) and getattr(cls, "__final__", False)


def test_block_device_is_final_and_slotted() -> None:
    """BlockDevice is a public, final, slotted resource class."""
    assert getattr(conveyor_storage.BlockDevice, "__final__", False)
    assert "__slots__" in vars(conveyor_storage.BlockDevice)
