"""cv.random: seeded generators that draw NumPy's streams onto any carrier."""

from __future__ import annotations

import numpy as np
import pytest

import conveyor as cv


@pytest.mark.parametrize("carrier", ["cpu", "generic"])
class TestGenerator:
    def test_same_seed_gives_numpy_stream(self, carrier: str) -> None:
        """Each draw equals NumPy's default_rng with the same seed, on the requested carrier."""
        rng = cv.random.default_rng(42, carrier=carrier)
        ref = np.random.default_rng(42)

        draws = [
            (rng.random((2, 3), dtype=cv.float64), ref.random((2, 3))),
            (rng.normal(1.0, 2.0, (4,), dtype=cv.float64), ref.normal(1.0, 2.0, (4,))),
            (rng.uniform(-1, 1, 5, dtype=cv.float64), ref.uniform(-1, 1, 5)),
            (rng.integers(3, 9, (3,)), ref.integers(3, 9, (3,), dtype=np.int64)),
            (rng.permutation(6), ref.permutation(6)),
        ]

        for got, want in draws:
            assert type(got.carrier).__name__.lower() == carrier
            np.testing.assert_array_equal(got.numpy(), want)

    def test_default_dtypes_and_ranges(self, carrier: str) -> None:
        """random is float32 in [0, 1); integers int64 within the bounds, endpoint honoured."""
        rng = cv.random.default_rng(0, carrier=carrier)

        values = rng.random(1000)
        assert values.dtype is cv.float32
        assert values.numpy().min() >= 0 and values.numpy().max() < 1
        ints = rng.integers(0, 2, 200, endpoint=True)
        assert ints.dtype is cv.int64
        assert set(ints.numpy().tolist()) == {0, 1, 2}

    def test_permutation_of_a_tensor_shuffles_rows(self, carrier: str) -> None:
        """permutation(t) reorders t's first axis on t's carrier, keeping every row."""
        t = cv.tensor(np.arange(12).reshape(4, 3), carrier=carrier)

        shuffled = cv.random.default_rng(1).permutation(t)

        assert type(shuffled.carrier) is type(t.carrier)
        assert sorted(map(tuple, shuffled.numpy().tolist())) == sorted(
            map(tuple, t.numpy().tolist())
        )

    def test_refusals(self, carrier: str) -> None:
        """Wrong dtypes and negative scales are refused with the reason."""
        rng = cv.random.default_rng(0, carrier=carrier)

        with pytest.raises(TypeError, match="random: needs a floating dtype, got int32"):
            rng.random(2, dtype=cv.int32)
        with pytest.raises(TypeError, match="integers: needs an integer dtype, got float32"):
            rng.integers(5, dtype=cv.float32)
        with pytest.raises(ValueError, match="normal: scale must be non-negative, got -1"):
            rng.normal(0, -1)
        with pytest.raises(ValueError, match="permutation: a 0-d tensor has no axis to shuffle"):
            rng.permutation(cv.tensor(1.0))
