"""What NumPy and PyTorch users write first, as they write it: each habit against NumPy.

The Dask script, the progress bar and the carrier matrix have their tests beside their code
(``tests/dask/test_docs.py``, ``tests/core/test_progress.py``, ``tests/plugins/test_cli.py``).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import conveyor as cv

VALUES = np.arange(24.0, dtype=np.float32).reshape(2, 3, 4)


def t(values: Any = VALUES) -> cv.Tensor:
    return cv.tensor(values)


class TestPositionalForms:
    @pytest.mark.parametrize(
        ("call", "numpy"),
        [
            (lambda x: cv.reshape(x, (6, 4)), lambda a: np.reshape(a, (6, 4))),
            (lambda x: cv.permute(x, (2, 0, 1)), lambda a: np.transpose(a, (2, 0, 1))),
            (lambda x: cv.unsqueeze(x, 0), lambda a: np.expand_dims(a, 0)),
            (
                lambda x: cv.broadcast_to(x[0, 0], (2, 4)),
                lambda a: np.broadcast_to(a[0, 0], (2, 4)),
            ),
            (lambda x: cv.sort(-x, -1)[0], lambda a: np.sort(-a, -1)),
            (lambda x: cv.reduce_sum(x, 1), lambda a: np.sum(a, 1)),
        ],
    )
    def test_numpy_positional_form_matches_numpy(self, call: Any, numpy: Any) -> None:
        """Values after the operands fill the options in order, as NumPy's arguments do."""
        np.testing.assert_array_equal(call(t()).numpy(), numpy(VALUES))

    def test_positional_option_is_validated_like_a_keyword(self) -> None:
        """A bad positional value gets the keyword's own refusal."""
        with pytest.raises(TypeError) as positional:
            cv.reshape(t(), (2, "a"))
        with pytest.raises(TypeError) as keyword:
            cv.reshape(t(), shape=(2, "a"))
        assert str(positional.value) == str(keyword.value)

    def test_too_many_positionals_name_the_keywords(self) -> None:
        with pytest.raises(TypeError) as info:
            cv.reshape(t(), (24,), 1)
        assert str(info.value) == (
            "reshape() takes 1 operand(s) (input) then its options (shape=), got 3 positional "
            "argument(s); pass the options by keyword"
        )
        with pytest.raises(TypeError, match=r"add\(\) takes 2 operand\(s\) \(input, other\) and"):
            cv.add(t(), t(), 1)

    def test_option_given_both_ways_is_refused(self) -> None:
        with pytest.raises(TypeError, match="got option 'axis' both by position and by keyword"):
            cv.sort(t(), -1, axis=0)


class TestMissingNames:
    def test_transpose_forms_match_numpy(self) -> None:
        x = t()
        np.testing.assert_array_equal(x.transpose().numpy(), VALUES.transpose())
        np.testing.assert_array_equal(x.transpose(1, 0, 2).numpy(), VALUES.transpose(1, 0, 2))
        np.testing.assert_array_equal(cv.transpose(x).numpy(), np.transpose(VALUES))
        np.testing.assert_array_equal(x.swapaxes(0, 2).numpy(), VALUES.swapaxes(0, 2))

    def test_flatten_copies_ravel_and_view_alias(self) -> None:
        x = t()
        flat = x.flatten()
        assert flat.carrier is not x.carrier
        np.testing.assert_array_equal(flat.numpy(), VALUES.flatten())
        assert x.ravel().carrier is x.carrier and x.view(4, 6).carrier is x.carrier
        np.testing.assert_array_equal(x.view(4, 6).numpy(), VALUES.reshape(4, 6))

    def test_view_of_an_inexpressible_layout_is_refused(self) -> None:
        x = t()[0].mT
        with pytest.raises(RuntimeError) as info:
            x.view(12)
        assert str(info.value) == (
            "view on CPU: shape (12,) cannot be a view of this layout (shape (4, 3), strides "
            "(1, 4)); use reshape(), which copies"
        )

    @pytest.mark.parametrize(
        ("method", "numpy"),
        [
            (lambda x: x.std(), lambda a: a.std()),
            (lambda x: x.var(axis=1, correction=1), lambda a: a.var(axis=1, ddof=1)),
            (lambda x: x.any(axis=0), lambda a: a.any(axis=0)),
            (lambda x: x.all(), lambda a: a.all()),
            (lambda x: (-x).abs(), lambda a: np.abs(-a)),
            (lambda x: x.clip(3, 9), lambda a: a.clip(3, 9)),
            (lambda x: x.clamp(3, 9), lambda a: a.clip(3, 9)),
        ],
    )
    def test_method_matches_numpy(self, method: Any, numpy: Any) -> None:
        np.testing.assert_allclose(method(t()).numpy(), numpy(VALUES), rtol=1e-6)

    def test_clamp_in_place_writes_the_tensor(self) -> None:
        x = t()
        before = x.version
        assert x.clamp_(3, 9) is x
        np.testing.assert_array_equal(x.numpy(), VALUES.clip(3, 9))
        assert x.version > before

    def test_conversions_sizes_and_requires_grad(self) -> None:
        x = t()
        assert (x.float().dtype, x.double().dtype, x.int().dtype) == (
            cv.float32,
            cv.float64,
            cv.int32,
        )
        assert (x.numel(), x.nbytes, x.itemsize) == (24, VALUES.nbytes, 4)
        assert x.requires_grad_() is x and x.requires_grad
        assert x.requires_grad_(False) is x and not x.requires_grad

    @pytest.mark.parametrize(
        ("call", "numpy"),
        [
            (lambda x: cv.sum(x, 0), lambda a: np.sum(a, 0)),
            (lambda x: cv.sum(x, dtype=cv.float64), lambda a: np.sum(a, dtype=np.float64)),
            (lambda x: cv.max(x, axis=2), lambda a: np.max(a, axis=2)),
            (lambda x: cv.min(x), lambda a: np.min(a)),
            (lambda x: cv.clip(x, 2, 5), lambda a: np.clip(a, 2, 5)),
            (lambda x: cv.dot(x[0], x[1].mT), lambda a: np.dot(a[0], a[1].T)),
            (lambda x: cv.dot(x, x[0, 0]), lambda a: np.dot(a, a[0, 0])),
            (lambda x: cv.dot(x[0, 0], x[1, 1]), lambda a: np.dot(a[0, 0], a[1, 1])),
            (lambda x: cv.hstack([x, x]), lambda a: np.hstack([a, a])),
            (lambda x: cv.hstack([x[0, 0], x[1, 1]]), lambda a: np.hstack([a[0, 0], a[1, 1]])),
            (lambda x: cv.unique(x % 5), lambda a: np.unique(a % 5)),
        ],
    )
    def test_numpy_named_function_matches_numpy(self, call: Any, numpy: Any) -> None:
        got = call(t())
        np.testing.assert_allclose(got.numpy(), numpy(VALUES), rtol=1e-6)

    def test_unique_returns_inverse_and_counts_like_numpy(self) -> None:
        values = np.array([3, 1, 3, 2, 1])
        got = cv.unique(cv.tensor(values), return_inverse=True, return_counts=True)
        want = np.unique(values, return_inverse=True, return_counts=True)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g.numpy(), w)

    def test_dtype_compares_equal_to_numpy_spellings(self) -> None:
        dtype = t().dtype
        assert dtype == np.float32 and np.float32 == dtype
        assert dtype == np.dtype("float32") and dtype == "float32"
        assert dtype != np.float64 and dtype != "int32" and dtype != 3
        assert cv.int64 == np.int64 and hash(cv.int64) == hash(cv.int64)


class TestRandom:
    def test_size_keyword_and_new_draws_follow_numpy_streams(self) -> None:
        ours, numpy = cv.random.default_rng(5), np.random.default_rng(5)
        np.testing.assert_allclose(ours.normal(size=4).numpy(), numpy.normal(size=4), rtol=1e-6)
        np.testing.assert_allclose(
            ours.standard_normal(size=(2, 2)).numpy(), numpy.standard_normal(size=(2, 2)), 1e-6
        )
        np.testing.assert_allclose(ours.random(size=3).numpy(), numpy.random(size=3), rtol=1e-6)
        assert ours.integers(0, 9, size=5).tolist() == numpy.integers(0, 9, size=5).tolist()
        assert ours.choice(7, size=3).tolist() == numpy.choice(7, size=3).tolist()
        pool = np.array([10.0, 20.0, 30.0, 40.0])
        got = ours.choice(cv.tensor(pool), size=3, replace=False, p=[0.1, 0.2, 0.3, 0.4])
        want = numpy.choice(pool, size=3, replace=False, p=[0.1, 0.2, 0.3, 0.4])
        np.testing.assert_array_equal(got.numpy(), want.astype(np.float32))

    def test_shape_and_size_together_are_refused(self) -> None:
        with pytest.raises(TypeError, match=r"shape=3 and size=3 both given; pass one of them"):
            cv.random.default_rng(0).random(3, size=3)


class TestSaveAndLoad:
    def test_save_writes_npy_that_numpy_reads(self, tmp_path: Path) -> None:
        cv.save(tmp_path / "x", t())
        np.testing.assert_array_equal(np.load(tmp_path / "x.npy"), VALUES)

    def test_load_reads_numpy_npy_onto_a_carrier(self, tmp_path: Path) -> None:
        np.save(tmp_path / "y.npy", np.arange(5, dtype=np.int16))
        loaded = cv.load(tmp_path / "y.npy", carrier="file")
        assert loaded.dtype is cv.int16 and type(loaded.carrier).__name__ == "FileBacked"
        assert loaded.tolist() == [0, 1, 2, 3, 4]

    def test_np_save_accepts_a_tensor_without_a_warning(self, tmp_path: Path) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            np.save(tmp_path / "z.npy", t())
        np.testing.assert_array_equal(cv.load(tmp_path / "z.npy").numpy(), VALUES)

    def test_file_backed_tensor_persists_through_save(self, tmp_path: Path) -> None:
        on_disk = cv.move(t(), "file")
        cv.save(tmp_path / "f.npy", on_disk)
        np.testing.assert_array_equal(cv.load(tmp_path / "f.npy", carrier="file").numpy(), VALUES)

    def test_bfloat16_is_refused_with_the_cast_to_use(self, tmp_path: Path) -> None:
        with pytest.raises(TypeError) as info:
            cv.save(tmp_path / "b.npy", t().astype(cv.bfloat16))
        assert str(info.value) == (
            "save on CPU: the .npy format has no bfloat16; save tensor.astype(cv.float32), "
            "which holds every bfloat16 value exactly"
        )
        assert not (tmp_path / "b.npy").exists()


class TestNumPyFallback:
    @pytest.mark.parametrize(
        ("call", "name"),
        [
            (lambda a: np.median(a), "np.median"),
            (lambda a: np.percentile(a, 30), "np.percentile"),
            (lambda a: np.linalg.norm(a), "np.linalg.norm"),
            (lambda a: np.add.reduce(a, axis=1), "np.add.reduce"),
            (lambda a: np.histogram(a, bins=3)[0], "np.histogram"),
        ],
    )
    def test_missing_function_runs_in_numpy_with_a_warning(self, call: Any, name: str) -> None:
        with pytest.warns(cv.NumPyFallbackWarning, match=f"^{name} on CPU: Conveyor has no"):
            got = call(t())
        np.testing.assert_allclose(np.asarray(got), call(VALUES), rtol=1e-6)
        if isinstance(got, cv.Tensor):
            assert type(got.carrier).__name__ == "CPU"

    def test_warning_is_a_conveyor_warning(self) -> None:
        assert issubclass(cv.NumPyFallbackWarning, cv.ConveyorWarning)
        assert cv.NumPyFallbackWarning.__module__ == "conveyor"


class TestNumpyExport:
    def test_numpy_is_a_read_only_view(self) -> None:
        x = t()
        view = x.numpy()
        assert not view.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            view[0, 0, 0] = 5

    def test_copy_is_writable_and_independent(self) -> None:
        x = t()
        scratch = x.numpy(copy=True)
        scratch[0, 0, 0] = 99
        assert scratch.flags.writeable and float(x[0, 0, 0]) == 0.0
