"""Printing: NumPy-style tensor text, summarised, dtype-exact, with carrier and grad state."""

from __future__ import annotations

import numpy as np
import pytest

import conveyor as cv


class TestRepr:
    def test_large_tensor_is_summarised(self) -> None:
        """A 1000 x 1000 tensor prints its corners (a few hundred bytes, not megabytes)."""
        t = cv.zeros((1000, 1000))

        text = repr(t)

        assert len(text) < 1000
        assert "..." in text

    def test_threshold_and_edgeitems_control_summarisation(self) -> None:
        """set_printoptions(threshold, edgeitems) has NumPy's meaning."""
        t = cv.arange(10)
        with cv.printoptions(threshold=5, edgeitems=2):
            assert repr(t) == "Tensor([0, 1, ..., 8, 9], dtype=int64, carrier=CPU)"
        assert repr(t) == "Tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], dtype=int64, carrier=CPU)"

    def test_float32_prints_float32_precision(self) -> None:
        """float32 values print the digits that round-trip in float32, not float64's."""
        value = np.float32(0.1)

        assert repr(cv.tensor([value])) == "Tensor([0.1], dtype=float32, carrier=CPU)"
        assert repr(cv.tensor([0.1], cv.float64)) == "Tensor([0.1], dtype=float64, carrier=CPU)"
        assert "0.33333334" in repr(cv.tensor([1 / 3]))

    def test_precision_option(self) -> None:
        """precision= limits the digits as in NumPy."""
        with cv.printoptions(precision=2):
            assert repr(cv.tensor([1 / 3])) == "Tensor([0.33], dtype=float32, carrier=CPU)"

    def test_empty_tensor_shows_its_shape(self) -> None:
        """An empty tensor prints [] and its shape."""
        assert repr(cv.zeros((0, 3))) == "Tensor([], shape=(0, 3), dtype=float32, carrier=CPU)"

    def test_grad_state_is_shown(self) -> None:
        """requires_grad on leaves, grad_fn (the operation name) on recorded results."""
        x = cv.tensor([1.0], requires_grad=True)

        assert repr(x).endswith("carrier=CPU, requires_grad=True)")
        assert repr(x * 2).endswith("carrier=CPU, grad_fn=<mul>)")

    def test_nested_rows_align_under_the_prefix(self) -> None:
        """Rows of a 2-D tensor line up under the first row, as NumPy's repr does."""
        assert repr(cv.tensor([[1, 2], [3, 4]], carrier="generic")) == (
            "Tensor([[1, 2],\n        [3, 4]], dtype=int64, carrier=Generic)"
        )

    def test_bfloat16_prints_through_float32(self) -> None:
        """Extension dtypes NumPy cannot format print their float32 values."""
        assert repr(cv.tensor([1.5], cv.bfloat16)) == "Tensor([1.5], dtype=bfloat16, carrier=CPU)"


class TestOptions:
    def test_set_printoptions_changes_only_given_fields(self) -> None:
        """Fields not given keep their values; get_printoptions reports the record."""
        before = cv.get_printoptions()
        try:
            cv.set_printoptions(edgeitems=1)
            assert cv.get_printoptions().edgeitems == 1
            assert cv.get_printoptions().threshold == before.threshold
        finally:
            cv.set_printoptions(edgeitems=before.edgeitems)

    def test_printoptions_restores_after_an_error(self) -> None:
        """The context manager restores the options even when its block raises."""
        before = cv.get_printoptions()
        with pytest.raises(KeyError), cv.printoptions(threshold=3):
            raise KeyError

        assert cv.get_printoptions() == before

    def test_negative_counts_are_refused(self) -> None:
        """A negative threshold raises ValueError and changes nothing."""
        before = cv.get_printoptions()

        with pytest.raises(ValueError, match="threshold must be a non-negative int, got -1"):
            cv.set_printoptions(threshold=-1)

        assert cv.get_printoptions() == before

    def test_numpy_options_are_untouched(self) -> None:
        """Conveyor's options do not leak into NumPy's global print state."""
        before = np.get_printoptions()
        with cv.printoptions(threshold=2, precision=1):
            repr(cv.arange(10))
            assert np.get_printoptions() == before
