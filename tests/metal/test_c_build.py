"""``_c_build``: many C kernels in one translation unit per CPU, kept apart by namespaces."""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import pytest

from conveyor_metal._c_build import build_library, unit

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

# Two kernels with the same file-level helper names, as separately lowered sources may have.
_KERNEL = """#include <cstdint>
struct args_t { int32_t k; };
static int32_t helper(int32_t x) { return x + K; }
extern "C" int32_t NAME_kernel(int32_t* Y) { args_t a{K}; Y[0] = helper(a.k); return 0; }
"""


def _source(name: str, k: int) -> str:
    return _KERNEL.replace("NAME", name).replace("K", str(k))


class TestUnit:
    """``unit`` hoists each include once and gives every source a namespace of its own."""

    def test_includes_hoisted_once_and_bodies_namespaced(self) -> None:
        text = unit([_source("a", 1), _source("b", 2)])
        assert text.count("#include <cstdint>") == 1
        assert text.index("#include") < text.index("namespace cv_unit_0")
        assert "namespace cv_unit_1 {" in text

    def test_sources_sharing_file_level_names_build_and_run_apart(self, tmp_path: Path) -> None:
        library = tmp_path / "lib.so"
        build_library([_source("a", 1), _source("b", 20), _source("c", 300)], library, tmp_path)
        handle = ctypes.CDLL(str(library))
        for name, want in [("a", 2), ("b", 40), ("c", 600)]:
            out = (ctypes.c_int32 * 1)()
            assert getattr(handle, f"{name}_kernel")(out) == 0
            assert out[0] == want


class TestBuildErrors:
    """A source the compiler rejects is reported, and no library is left behind."""

    def test_compile_error_raises_and_writes_no_library(self, tmp_path: Path) -> None:
        library = tmp_path / "lib.so"
        failed = "CLauncher: g\\+\\+ failed on the lowered C sources"
        with pytest.raises(RuntimeError, match=failed):
            build_library([_source("a", 1), "int32_t broken("], library, tmp_path)
        assert not library.exists()
        assert list(tmp_path.iterdir()) == []
