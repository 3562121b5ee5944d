"""Start-up loads only what it needs: ``import conveyor`` and a first CPU tensor.

Checked in fresh processes with ``-X importtime`` (every module a child interpreter imports),
so a heavy import slipping into a module body fails here, not only in ``benchmarks/startup.py``.
"""

from __future__ import annotations

from tests.generic.test_lazy_startup import imported_modules, run

# Never needed to import conveyor or to compute on "cpu": a distributed stack, a GPU stack,
# ml_dtypes (its import alone costs ~0.5 s of CPU) and the array-API namespace.
HEAVY = ("dask", "distributed", "torch", "tilelang", "ml_dtypes", "conveyor.array_api")


def heavy_in(loaded: set[str]) -> set[str]:
    return {m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY)}


class TestStartupImports:
    def test_import_conveyor_loads_no_numpy_no_plugin_and_no_heavy_module(self) -> None:
        loaded = imported_modules("import conveyor")
        assert "conveyor" in loaded
        assert "numpy" not in loaded
        assert not heavy_in(loaded)
        assert not {m for m in loaded if m.startswith(("conveyor_", "conveyor.array_api"))}

    def test_import_conveyor_loads_neither_the_plugin_host_nor_entry_point_metadata(self) -> None:
        # pluggy, the host's modules and importlib.metadata (with the email package) cost about
        # 40 ms together; nothing needs them before the first scan or lookup by name.
        loaded = imported_modules("import conveyor")
        assert not {m for m in loaded if m.startswith(("conveyor.plugins", "pluggy"))}
        assert "importlib.metadata" not in loaded

    def test_the_plugin_host_loads_on_first_access_and_on_a_first_lookup(self) -> None:
        out = run(
            "import sys, conveyor as cv\n"
            "before = 'conveyor.plugins' in sys.modules\n"
            "marker = cv.hookimpl\n"
            "print(before, 'conveyor.plugins' in sys.modules, marker is cv.plugins.hookimpl,"
            " 'plugins' in dir(cv), 'hookimpl' in dir(cv))"
        )
        assert out == "False True True True True"

    def test_a_first_cpu_tensor_loads_no_heavy_module(self) -> None:
        loaded = imported_modules(
            "import conveyor as cv\nt = cv.tensor([1.0, 2.0], carrier='cpu')\n(t + t).numpy()"
        )
        assert "conveyor_generic.cpu" in loaded  # the lookup did run
        assert not heavy_in(loaded)

    def test_discovering_every_plugin_loads_no_cli_no_process_or_thread_pool_machinery(
        self,
    ) -> None:
        # A first lookup imports every installed plugin's carrier module. None of them needs
        # the CLI (argparse, json), multiprocessing (shared memory segments load it on first
        # allocate) or concurrent.futures with logging (thread pools start on first use).
        loaded = imported_modules(
            "import conveyor as cv\nt = cv.tensor([1.0, 2.0], carrier='cpu')\n(t + t).numpy()"
        )
        assert {"conveyor_shm.carrier", "conveyor_dask.carrier"} <= loaded  # they were scanned
        late = ("conveyor.cli", "argparse", "multiprocessing", "concurrent.futures", "logging")
        assert not {m for m in loaded if m in late or m.startswith(tuple(f"{x}." for x in late))}

    def test_plugin_carrier_modules_enumerate_no_plan_at_import(self) -> None:
        out = run(
            "import conveyor_dask.carrier, conveyor_shm.carrier, conveyor_storage\n"
            "import conveyor_metal.metal\n"
            "from conveyor.types import policy\n"
            "print(len(policy._ENUMERATED))"
        )
        assert out == "0"

    def test_array_api_loads_on_first_access_and_is_the_tensor_namespace(self) -> None:
        out = run(
            "import sys, conveyor as cv\n"
            "before = 'conveyor.array_api' in sys.modules\n"
            "ns = cv.tensor([1.0], carrier='cpu').__array_namespace__()\n"
            "print(before, ns is cv.array_api, ns.__name__, 'array_api' in dir(cv))"
        )
        assert out == "False True conveyor.array_api True"

    def test_an_unknown_attribute_still_raises_attribute_error(self) -> None:
        out = run(
            "import conveyor as cv\n"
            "try:\n"
            "    cv.no_such_name\n"
            "except AttributeError as e:\n"
            "    print(e)"
        )
        assert out == "module 'conveyor' has no attribute 'no_such_name'"


# The user library's modules: loaded by the first library name a program touches, or by the
# first call Tensor makes into it (printing, `//`, advanced indexing, the NumPy protocols).
LIBRARY = (
    "conveyor.lib.composed",
    "conveyor.lib.printing",
    "conveyor.lib.saving",
    "conveyor.lib.numpy_protocols",
    "conveyor.lib.tensor_methods",
    "conveyor.lib.einops_backend",
)


class TestLazyLibrary:
    def test_import_conveyor_and_an_engine_add_load_no_library_module(self) -> None:
        loaded = imported_modules(
            "import conveyor as cv\nt = cv.tensor([1.0, 2.0], carrier='cpu')\n(t + t).numpy()"
        )
        assert "conveyor.engine.tensor" in loaded
        assert not {m for m in loaded if m.startswith(LIBRARY)}

    def test_a_library_name_loads_the_library_and_is_the_library_function(self) -> None:
        out = run(
            "import sys, conveyor as cv\n"
            "from conveyor.lib import composed, printing, saving\n"
            "print(cv.mean is composed.mean, cv.save is saving.save,"
            " cv.set_printoptions is printing.set_printoptions, 'mean' in vars(cv),"
            " 'mean' in dir(cv), 'random' in dir(cv))"
        )
        assert out == "True True True True True True"

    def test_every_public_name_resolves_and_star_import_binds_them_all(self) -> None:
        out = run(
            "import conveyor as cv\n"
            "missing = [n for n in cv.__all__ if not hasattr(cv, n)]\n"
            "ns = {}\n"
            "exec('from conveyor import *', ns)\n"
            "unbound = sorted(set(cv.__all__) - ns.keys())\n"
            "print(missing, unbound, cv.random.default_rng(0) is not None)"
        )
        assert out == "[] [] True"

    def test_tensor_operators_load_the_library_on_their_first_use(self) -> None:
        out = run(
            "import sys, conveyor as cv\n"
            "t = cv.tensor([7.0, 8.0], carrier='cpu')\n"
            "before = 'conveyor.lib.tensor_methods' in sys.modules\n"
            "text = repr(t)\n"
            "print(before, 'conveyor.lib.tensor_methods' in sys.modules, text, (t // 2.0).tolist())"
        )
        assert out == "False True Tensor([7., 8.], dtype=float32, carrier=CPU) [3.0, 4.0]"

    def test_einops_finds_tensors_whichever_is_imported_first(self) -> None:
        code = (
            "import sys, conveyor as cv\n"
            "t = cv.tensor([1.0, 2.0, 3.0, 4.0], carrier='cpu')\n"
            "print('conveyor.lib.einops_backend' in sys.modules,"
            " einops.rearrange(t, '(a b) -> b a', a=2).tolist())"
        )
        assert run("import einops\n" + code) == "True [[1.0, 3.0], [2.0, 4.0]]"
        assert run(code.replace("import sys", "import sys, einops")) == (
            "True [[1.0, 3.0], [2.0, 4.0]]"
        )
        before = run("import sys, conveyor\nprint('conveyor.lib.einops_backend' in sys.modules)")
        assert before == "False"
