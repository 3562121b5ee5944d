"""Central definitions: every planned and view name has one, and it behaves exactly like Generic.

``ReferenceVendor`` (``reference_vendor.py``) runs Generic's reference kernels behind the central
definitions, so any difference from Generic here — a result shape, a dtype, a refusal, a
gradient, a view — is a difference in the central definitions themselves.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor.engine.functional import VIEW_OPERATIONS
from conveyor.engine.gradients import differentiable_operations
from conveyor.types.policy import enumerate_plans, operation_spec, registered_operations
from conveyor_generic import Generic
from conveyor_testkit._inputs import Case, cases_for, options_for
from tests.conformance.reference_vendor import ReferenceVendor

PLANNED = registered_operations()
# Per name, plans of these compute dtypes are compared (every plan of every name is slow).
_COMPUTE = (cv.float64, cv.float32, cv.int32, cv.uint8, cv.bool, cv.complex128, cv.float16)


def _sample(name: str) -> list[cv.OperationPlan]:
    picked: dict[Any, cv.OperationPlan] = {}
    for plan in enumerate_plans(name):
        key = (plan.compute, tuple(o.weak for o in plan.operands), plan.accumulator_dtype)
        if plan.compute in _COMPUTE and key not in picked:
            picked[key] = plan
    return list(picked.values())[:8]


def _run(cls: type[cv.Carrier], plan: cv.OperationPlan, case: Case, grad: bool) -> Any:
    """Outputs (and input gradients when ``grad``) as NumPy, or the raised (type, message)."""
    inputs = [
        cv.tensor(v, dtype=o.dtype, carrier=cls) if isinstance(v, np.ndarray) else v
        for v, o in zip(case.operands, plan.operands, strict=True)
    ]
    wants = [
        x
        for x in inputs
        if isinstance(x, cv.Tensor) and (x.dtype.is_floating or x.dtype.is_complex)
    ]
    for x in wants if grad else ():
        x.requires_grad = True
    try:
        first = next(x for x in inputs if isinstance(x, cv.Tensor))
        result = first.carrier.dispatch_op(plan.operation).forward(
            *inputs, options=options_for(plan, case)
        )
    except Exception as exc:
        return (type(exc), str(exc).replace(cls.__name__, "<carrier>"))
    outputs = result if isinstance(result, tuple) else (result,)
    values = [(o.shape, o.dtype, o.numpy()) for o in outputs]
    if not grad:
        return values
    seed = outputs[0]
    if not seed.requires_grad:
        return values, []
    try:
        seed.backward(cv.ones(seed.shape, seed.dtype, carrier=cls))
    except Exception as exc:  # a refused backward must be refused the same way
        return values, [(type(exc), str(exc).replace(cls.__name__, "<carrier>"))]
    return values, [None if x.grad is None else x.grad.numpy() for x in wants]


def _same(got: Any, want: Any) -> None:
    if isinstance(want, tuple) and len(want) == 2 and isinstance(want[0], type):
        assert got == want
        return
    if isinstance(want, tuple):  # (values, gradients)
        _same(got[0], want[0])
        for g, w in zip(got[1], want[1], strict=True):
            assert (g is None) == (w is None)
            if isinstance(w, tuple):
                assert g == w
            elif w is not None:
                np.testing.assert_array_equal(g, w)
        return
    assert len(got) == len(want)
    for (gs, gd, gv), (ws, wd, wv) in zip(got, want, strict=True):
        assert gs == ws and gd is wd
        np.testing.assert_array_equal(gv, wv)


class TestEveryNameHasACentralDefinition:
    """cv.operation_definitions() lists one definition per planned name and per view name."""

    def test_listing_covers_planned_and_view_names(self) -> None:
        names = [d.name for d in cv.operation_definitions()]
        assert set(PLANNED) | set(VIEW_OPERATIONS) <= set(names)
        assert len(PLANNED) == 71 and len(VIEW_OPERATIONS) == 8
        assert names == sorted(names)

    @pytest.mark.parametrize("name", PLANNED)
    def test_roles_and_differentiability_come_from_the_tables(self, name: str) -> None:
        definition = cv.operation_definition(name)
        spec = operation_spec(name)
        assert definition is not None
        assert definition.roles == spec.roles
        assert definition.scalar_roles == spec.scalar_roles
        assert definition.optional_roles == spec.optional_roles
        assert definition.differentiable == (name in differentiable_operations())

    @pytest.mark.parametrize("name", VIEW_OPERATIONS)
    def test_view_names_are_differentiable(self, name: str) -> None:
        definition = cv.operation_definition(name)
        assert definition is not None and definition.roles == ("input",)
        assert definition.differentiable


class TestDefinitionBackedMatchesGeneric:
    """Same results, shapes, dtypes and refusals as Generic, for sampled plans of every name."""

    @pytest.mark.parametrize("name", PLANNED)
    def test_results_and_refusals_match_generic(self, name: str) -> None:
        checked = 0
        for plan in _sample(name):
            for case in cases_for(plan):
                want = _run(Generic, plan, case, grad=False)
                got = _run(ReferenceVendor, plan, case, grad=False)
                _same(got, want)
                checked += 1
        assert checked > 0

    @pytest.mark.parametrize("name", sorted(differentiable_operations()))
    def test_gradients_match_generic(self, name: str) -> None:
        checked = 0
        for plan in _sample(name):
            if not plan.outputs[0].is_differentiable:  # floating or complex (tan of complex)
                continue
            for case in cases_for(plan):
                want = _run(Generic, plan, case, grad=True)
                got = _run(ReferenceVendor, plan, case, grad=True)
                _same(got, want)
                checked += 1
        assert checked > 0


def _both(values: Any, dtype: cv.DType = cv.float64) -> tuple[cv.Tensor, cv.Tensor]:
    return cv.tensor(values, dtype, carrier=Generic), cv.tensor(
        values, dtype, carrier=ReferenceVendor
    )


_VIEW_CASES: list[tuple[str, Any]] = [
    ("index", lambda t: t[1]),
    ("negative step", lambda t: t[::-1, 1:]),
    ("ellipsis and None", lambda t: t[..., None, 0]),
    ("transpose", lambda t: t.T),
    ("reshape copy", lambda t: t.T.reshape(-1)),
    ("reshape view", lambda t: t.reshape(4, 3)),
    ("permute", lambda t: t.permute(1, 0)),
    ("squeeze", lambda t: t[None].squeeze(0)),
    ("broadcast", lambda t: t[0].broadcast_to((2, 4))),
    ("rearrange copy", lambda t: cv.rearrange(t.T, pattern="a b -> (b a)")),
    ("as_strided", lambda t: cv.as_strided(t, shape=(2, 2), strides=(1, 1))),
]


class TestViewsOnDefinitionBackedCarriers:
    """The eight view names run through the storage provider's spans, like Generic."""

    @pytest.mark.parametrize(("label", "view"), _VIEW_CASES, ids=[c[0] for c in _VIEW_CASES])
    def test_view_values_and_gradients_match_generic(self, label: str, view: Any) -> None:
        data = np.arange(12.0).reshape(3, 4)
        results = []
        for t in _both(data):
            t.requires_grad = True
            out = view(t)
            out.backward(cv.ones(out.shape, out.dtype, carrier=type(t.carrier)) * 2.0)
            assert t.grad is not None and type(t.grad.carrier) is type(t.carrier)
            results.append((out.shape, out.numpy(), t.grad.numpy()))
        (gs, gv, gg), (vs, vv, vg) = results
        assert gs == vs
        np.testing.assert_array_equal(vv, gv)
        np.testing.assert_array_equal(vg, gg)

    def test_aliasing_view_shares_the_carrier(self) -> None:
        _, t = _both(np.arange(6.0).reshape(2, 3))
        assert t[0].carrier is t.carrier and t.T.carrier is t.carrier

    def test_bad_index_refused_like_generic(self) -> None:
        errors = []
        for t in _both(np.arange(6.0).reshape(2, 3)):
            with pytest.raises(IndexError) as info:
                t[5]
            errors.append(str(info.value).replace(type(t.carrier).__name__, "<carrier>"))
        assert errors[0] == errors[1]
