"""The kit's input builders: every planned name has one, and every case resolves to its plan."""

from __future__ import annotations

import numpy as np
import pytest

import conveyor as cv
from conveyor.types.policy import enumerate_plans, registered_operations
from conveyor_testkit._inputs import BUILDERS, cases_for, options_for, plan_text
from conveyor_testkit._views import (
    LAYOUT_KINDS,
    VIEW_OP,
    ViewKind,
    applies,
    view_tensor,
    view_values,
)


class TestBuilders:
    def test_every_planned_name_has_a_builder(self) -> None:
        """The builder table covers exactly the registry's planned names."""
        assert set(BUILDERS) == set(registered_operations())

    @pytest.mark.parametrize("name", registered_operations())
    def test_cases_resolve_to_their_plan(self, name: str) -> None:
        """For every plan of the name, each generated case's operands and options resolve back
        to that exact plan, so the kit runs the plan it claims to check."""
        for plan in enumerate_plans(name):
            cases = cases_for(plan)
            assert cases, plan_text(plan)
            for case in cases:
                keys = [
                    cv.dtype(v.dtype) if isinstance(v, np.ndarray) else v for v in case.operands
                ]
                resolved = cv.resolve_plan(name, *keys, options=options_for(plan, case))
                assert resolved == plan, f"{plan_text(plan)} [{case.label}]"

    def test_cases_are_deterministic_per_seed(self) -> None:
        """The same plan and seed give the same values; another seed gives others."""
        plan = cv.resolve_plan("add", cv.float32, cv.float32)
        first, again, other = cases_for(plan, 0), cases_for(plan, 0), cases_for(plan, 1)
        np.testing.assert_array_equal(first[0].operands[0], again[0].operands[0])
        assert not np.array_equal(first[0].operands[0], other[0].operands[0], equal_nan=True)

    def test_float_inputs_include_special_values(self) -> None:
        """General float inputs mix in NaN, infinities and signed zeros."""
        values = cases_for(cv.resolve_plan("exp", cv.float64))[0].operands[0]
        assert np.isnan(values).any() and np.isinf(values).any()

    def test_cases_cover_empty_and_broadcast_shapes(self) -> None:
        """Elementwise cases include a 0-sized and a broadcasting call."""
        labels = [c.label for c in cases_for(cv.resolve_plan("add", cv.int8, cv.int8))]
        assert "0-sized" in labels and "broadcast" in labels


class TestViewOperands:
    @pytest.mark.parametrize(
        ("kind", "shape"),
        [
            (kind, shape)
            for kind in (*LAYOUT_KINDS, VIEW_OP)
            for shape in [(), (5,), (3, 4), (2, 3, 4), (0, 3)]
            if applies(kind, [np.zeros(shape)])
        ],
        ids=lambda v: v.name if isinstance(v, ViewKind) else str(v),
    )
    def test_views_hold_the_logical_values(self, kind: ViewKind, shape: tuple[int, ...]) -> None:
        """Every view kind gives a tensor whose values are those the kind promises."""
        values = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)

        def make(v: np.ndarray, dtype: cv.DType) -> cv.Tensor:
            return cv.tensor(v, dtype=dtype, carrier="cpu")

        x = view_tensor(kind, True, values, cv.float32, make)
        np.testing.assert_array_equal(x.numpy(), view_values(kind, True, values))
        if kind.name in ("offset", "negative-step") and values.size > 1:
            assert x.layout.offset > 0

    def test_broadcast_view_has_a_zero_stride(self) -> None:
        """The broadcast kind reads the first operand with stride 0 along its first long axis."""
        values = np.arange(12, dtype=np.float32).reshape(3, 4)
        make = lambda v, d: cv.tensor(v, dtype=d, carrier="cpu")  # noqa: E731
        x = view_tensor(LAYOUT_KINDS[3], True, values, cv.float32, make)
        assert x.layout.strides[0] == 0
        np.testing.assert_array_equal(x.numpy(), np.broadcast_to(values[:1], (3, 4)))
