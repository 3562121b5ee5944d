"""The oracle cases again, under conditions a kernel can get wrong while fresh tensors pass.

- view operands (``_views``): the same values behind offset, transposed, negative-step and
  broadcast layouts, and as results of the carrier's own view operations; compared with the
  oracle's result on fresh contiguous tensors;
- a write then a recompute: the case runs once, every tensor operand is overwritten in place
  with new values (``x[...] = new``), and a fresh dispatch on the same tensors must give the
  oracle's result for the new values (a kernel that caches results by operand fails);
- ``requires_grad`` operands: the floating operands of a differentiable name made grad leaves,
  grad mode on; the results must be bit for bit those of the same call without.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final

import numpy as np

import conveyor as cv
from conveyor.sdk import OperationPlan
from conveyor_testkit._compare import _wide
from conveyor_testkit._inputs import Case, cases_for, plan_text
from conveyor_testkit._run import (
    PlanFailure,
    Raised,
    build_operands,
    check_case,
    describe_error,
    execute,
)
from conveyor_testkit._surface import Surface
from conveyor_testkit._target import make_tensor
from conveyor_testkit._views import (
    LAYOUT_KINDS,
    VIEW_OP,
    ViewKind,
    applies,
    view_tensor,
    view_values,
)

__all__ = [
    "check_recompute",
    "check_requires_grad",
    "check_view_ops",
    "check_views",
    "kernel_plans",
]

_Array = np.ndarray[Any, Any]
# Cases past this many elements per operand are left out of the checks that run a case on the
# carrier twice (the write, requires_grad): the layout-kind views and the oracle test already
# cover the long ones.
_SMALL: Final = 4097
# Cases per plan run with requires_grad operands: the first few small ones.
_GRAD_CASES: Final = 3


def kernel_plans(plans: list[OperationPlan]) -> list[OperationPlan]:
    """One plan per kernel shape: the compute, output and accumulator dtypes, and per operand
    whether it is a tensor, a scalar or absent and whether it already has the compute dtype.

    Plans that differ otherwise only convert other dtypes into the same computation; the
    checks of this module run these representatives (the oracle test runs every plan), which
    keeps the kit's time in bounds: ``clamp`` alone has 3484 plans but 316 kernel shapes.
    """
    picked: dict[Any, OperationPlan] = {}
    for plan in plans:
        operands = tuple(
            (
                "absent" if o.dtype is None else "scalar" if o.weak else "tensor",
                o.dtype is plan.compute,
            )
            for o in plan.operands
        )
        key = (plan.compute, plan.outputs, plan.accumulator_dtype, operands)
        picked.setdefault(key, plan)
    return list(picked.values())


def _arrays(case: Case) -> list[_Array]:
    return [v for v in case.operands if isinstance(v, np.ndarray)]


def _cases(plan: OperationPlan, seed: int, surface: Surface | None) -> list[Case]:
    """The plan's oracle cases with tensor operands (inside the direct surface, if any)."""
    cases = [c for c in cases_for(plan, seed) if _arrays(c)]
    if surface is None:
        return cases
    return [c for c in cases if surface.refuses(plan, c) is None]


def _assign(cases: list[Case]) -> list[tuple[Case, ViewKind]]:
    """Rotate the layout kinds over the cases: every case runs once on views, and every kind
    that any case can take runs at least once."""
    pairs, unused = [], list(LAYOUT_KINDS)
    for i, case in enumerate(cases):
        arrays = _arrays(case)
        order = LAYOUT_KINDS[i % len(LAYOUT_KINDS) :] + LAYOUT_KINDS[: i % len(LAYOUT_KINDS)]
        kind = next((k for k in order if applies(k, arrays)), None)
        if kind is not None:
            pairs.append((case, kind))
            if kind in unused:
                unused.remove(kind)
    for kind in unused:
        taker = next((c for c in cases if applies(kind, _arrays(c))), None)
        if taker is not None:
            pairs.append((taker, kind))
    return pairs


def _on_views(
    target: type[cv.Carrier],
    oracle: type[cv.Carrier],
    plan: OperationPlan,
    case: Case,
    kind: ViewKind,
) -> PlanFailure | None:
    first = next(i for i, v in enumerate(case.operands) if isinstance(v, np.ndarray))
    operands = tuple(
        view_values(kind, i == first, v) if isinstance(v, np.ndarray) else v
        for i, v in enumerate(case.operands)
    )
    viewed = replace(case, operands=operands)

    def build(i: int, values: Any, dtype: cv.DType | None) -> Any:
        assert dtype is not None  # tensor roles always have a dtype
        make = lambda v, d: make_tensor(target, v, d)  # noqa: E731  # a one-line builder
        return view_tensor(kind, i == first, values, dtype, make)

    def run() -> tuple[Any, ...]:
        return execute(target, plan, viewed, build_operands(target, plan, viewed, build))

    return check_case(target, oracle, plan, viewed, run, f"{case.label}, {kind.label}")


def check_views(
    target: type[cv.Carrier],
    oracle: type[cv.Carrier],
    plan: OperationPlan,
    seed: int,
    surface: Surface | None = None,
) -> PlanFailure | None:
    """The first case of ``plan`` that fails on operands behind offset, transposed,
    negative-step or broadcast layouts, or ``None``."""
    for case, kind in _assign(_cases(plan, seed, surface)):
        failure = _on_views(target, oracle, plan, case, kind)
        if failure is not None:
            return failure
    return None


def check_view_ops(
    target: type[cv.Carrier],
    oracle: type[cv.Carrier],
    plan: OperationPlan,
    seed: int,
    surface: Surface | None = None,
) -> PlanFailure | None:
    """The failure of ``plan``'s first case (of at least one axis) on operands that are
    results of the carrier's own view operations (``b[k::-1].T``), or ``None``."""
    for case in _cases(plan, seed, surface):
        if applies(VIEW_OP, _arrays(case)):
            return _on_views(target, oracle, plan, case, VIEW_OP)
    return None


def _flipped(case: Case) -> Case | None:
    """The case with every tensor operand reversed along every axis: new values that keep
    what the builders guarantee (indices in range and distinct per column, matrices positive
    definite or invertible: a reversal is a permutation similarity). ``None`` when that changes
    no value (a 0-d or symmetric operand)."""
    operands = tuple(np.flip(v).copy() if isinstance(v, np.ndarray) else v for v in case.operands)
    changed = any(
        isinstance(a, np.ndarray) and a.tobytes() != b.tobytes()
        for a, b in zip(operands, case.operands, strict=True)
    )
    return replace(case, operands=operands) if changed else None


def check_recompute(
    target: type[cv.Carrier],
    oracle: type[cv.Carrier],
    plan: OperationPlan,
    seed: int,
    surface: Surface | None = None,
) -> PlanFailure | None:
    """Runs a case, writes new values into every tensor operand in place and runs a fresh
    dispatch on the same tensors: the failure if that result is not the oracle's for the new
    values, else ``None``. The first two small non-empty cases the carrier computes are used."""
    candidates = [
        c for c in _cases(plan, seed, surface) if all(0 < a.size <= _SMALL for a in _arrays(c))
    ]
    checked = 0
    for case in candidates:
        new = _flipped(case)
        if new is None:
            continue
        inputs = build_operands(target, plan, case)
        try:
            execute(target, plan, case, inputs)
        except Raised:
            continue  # a case the carrier refuses: the oracle test checks the refusal

        def run(new: Case = new, inputs: list[Any] = inputs) -> tuple[Any, ...]:
            return _rewrite_and_run(target, plan, new, inputs, surface)

        label = f"{case.label}, recomputed after x[...] = new values"
        failure = check_case(target, oracle, plan, new, run, label)
        checked += 1
        if failure is not None or checked == 2:
            return failure
    return None


def _rewrite_and_run(
    target: type[cv.Carrier],
    plan: OperationPlan,
    new: Case,
    inputs: list[Any],
    surface: Surface | None,
) -> tuple[Any, ...]:
    """Write ``new``'s values into the tensors ``inputs`` in place, then run ``new`` on them."""
    for x, values in zip(inputs, new.operands, strict=True):
        if isinstance(x, cv.Tensor):
            if surface is not None:
                surface.writable(x)
            try:
                x[...] = values
            except Exception as exc:
                raise Raised("writing the new operand values (x[...] = new)", exc) from exc
    return execute(target, plan, new, inputs)


def _parts(values: _Array) -> list[_Array]:
    wide = _wide(values)
    return [wide.real, wide.imag] if wide.dtype.kind == "c" else [wide]


def _differs(got: _Array, want: _Array) -> str | None:
    """Where two results of the same call differ bit for bit (any NaN meets any NaN)."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"shape {got.shape} {got.dtype}, without requires_grad {want.shape} {want.dtype}"
    if got.tobytes() == want.tobytes():
        return None
    bad = np.zeros(got.shape, bool)
    for g, w in zip(_parts(got), _parts(want), strict=True):
        if g.dtype.kind == "f":
            nan = np.isnan(g) & np.isnan(w)
            bad |= ~nan & ((g != w) | (np.signbit(g) != np.signbit(w)))
        else:
            bad |= g != w
    if not bad.any():
        return None
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    return (
        f"{int(bad.sum())} of {got.size} elements differ from the same call without "
        f"requires_grad; first at {index}: got {got[index].item()!r}, without "
        f"{want[index].item()!r}"
    )


def check_requires_grad(
    target: type[cv.Carrier], plan: OperationPlan, seed: int, surface: Surface | None = None
) -> PlanFailure | None:
    """Runs each small case with every floating operand a ``requires_grad`` leaf (grad mode on)
    and without: the failure if a result differs, else ``None``."""
    text = plan_text(plan)
    floating = [
        o.dtype is not None and not o.weak and (o.dtype.is_floating or o.dtype.is_complex)
        for o in plan.operands
    ]
    if not any(floating):
        return None
    for case in [
        c for c in _cases(plan, seed, surface) if max(a.size for a in _arrays(c)) <= _SMALL
    ][:_GRAD_CASES]:

        def leaf(i: int, values: Any, dtype: cv.DType | None) -> Any:
            x = make_tensor(target, values, dtype)
            return x.requires_grad_(True) if floating[i] else x

        try:
            plain = execute(target, plan, case, build_operands(target, plan, case), grad=True)
        except Raised:
            continue  # a refused case: the oracle test checks the refusal
        label = f"{case.label}, requires_grad operands"
        try:
            tracked = execute(
                target, plan, case, build_operands(target, plan, case, leaf), grad=True
            )
        except Raised as raised:
            detail = (
                f"{raised.stage} raised {describe_error(raised.error)} with requires_grad "
                f"operands; without it returned a result"
            )
            return PlanFailure(plan.operation, text, label, detail)
        for k, (got, want) in enumerate(zip(tracked, plain, strict=True)):
            problem = _differs(got, want)
            if problem is not None:
                which = f"output {k}: " if len(tracked) > 1 else ""
                return PlanFailure(plan.operation, text, label, which + problem)
    return None
