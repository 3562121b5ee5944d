"""conveyor-shm: the example vendor carrier, a definition-backed sibling in shared memory."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor.engine.move import move
from conveyor.sdk import DefinitionOperation, carrier_definition
from conveyor_generic import CPU
from conveyor_shm import SharedMemoryCarrier, SharedMemoryFacet


def shm(values: object, dtype: cv.DType = cv.float32, requires_grad: bool = False) -> cv.Tensor:
    return cv.tensor(values, dtype, carrier=SharedMemoryCarrier, requires_grad=requires_grad)


def _exists(name: str) -> bool:
    """Whether segment ``name`` exists; looks at the file, opening nothing (no tracker entry)."""
    return (Path("/dev/shm") / name).exists()


def _run(code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


class TestDiscovery:
    def test_carrier_found_by_name(self) -> None:
        """The installed distribution contributes the open, definition-backed 'shm' carrier."""
        host = cv.plugins.host()
        assert host.carrier("shm") is SharedMemoryCarrier
        assert host.provider("shm").distribution == "conveyor-shm"
        assert not cv.is_closed_carrier(SharedMemoryCarrier)
        assert carrier_definition(SharedMemoryCarrier) is not None


class TestCentralDefinitions:
    """The central definitions dispatch with exact metadata and Generic's values."""

    @pytest.mark.parametrize(
        ("name", "operands", "expected"),
        [
            ("add", ([1.0, 2.0], [10.0, 20.0]), [11.0, 22.0]),
            ("elementwise_mul", ([1.0, 2.0], [3.0, 4.0]), [3.0, 8.0]),
            ("mul", ([1.0, 2.0], 3.0), [3.0, 6.0]),
            ("mul", (3.0, [1.0, 2.0]), [3.0, 6.0]),
            ("relu", ([-1.0, 2.0],), [0.0, 2.0]),
            ("reduce_sum", ([[1.0, 2.0], [3.0, 4.0]],), 10.0),
            ("matmul", ([[1.0, 2.0]], [[3.0], [4.0]]), [[11.0]]),
        ],
    )
    def test_dispatch_with_exact_metadata(
        self, name: str, operands: tuple[object, ...], expected: object
    ) -> None:
        inputs = tuple(shm(x) if isinstance(x, list) else x for x in operands)
        carrier = next(x for x in inputs if isinstance(x, cv.Tensor)).carrier
        op = carrier.dispatch_op(name)
        assert isinstance(op, DefinitionOperation)
        assert (op._operation_name, op._dispatch_carrier_class) == (name, SharedMemoryCarrier)
        out = op.forward(*inputs)
        assert type(out.carrier) is SharedMemoryCarrier and out.dtype is cv.float32
        np.testing.assert_allclose(out.numpy(), expected)
        assert out.shape == op.invocation.results[0].shape  # type: ignore[union-attr]  # ran

    def test_integer_plans_and_promotion(self) -> None:
        """Integer arithmetic follows the central plan (int32 + int32 wraps)."""
        x = shm([2**31 - 1], cv.int32)
        out = cv.add(x, x)
        assert out.dtype is cv.int32 and out.numpy().tolist() == [-2]
        assert cv.reduce_sum(x).dtype is cv.int64

    def test_every_cpu_plan_is_advertised(self) -> None:
        """shm advertises every plan CPU has (issue 10: the whole surface)."""
        cpu = cv.definition_capabilities(CPU)
        ours = cv.definition_capabilities(SharedMemoryCarrier)
        assert cpu.names <= ours.names and all(ours.supports(c) for c in cpu)

    @pytest.mark.parametrize(
        ("label", "compute"),
        [
            ("index", lambda t: t[0]),
            ("sub scalar", lambda t: t - 1),
            ("true division", lambda t: t / 2),
            ("exp", lambda t: t.exp()),
            ("sort", lambda t: cv.sort(t, axis=-1)[0]),
            ("gather", lambda t: cv.gather(t, t.astype(cv.int64) * 0, axis=1)),
        ],
        ids=lambda v: v if isinstance(v, str) else "",
    )
    def test_formerly_refused_calls_match_cpu(self, label: str, compute: object) -> None:
        """``s[0]``, ``s - 1`` and ``s / 2`` used to fail on shm; now they give CPU's values."""
        data = [[1.5, -2.0, 3.0], [0.0, 4.0, -1.0]]
        assert callable(compute)
        got = compute(shm(data))
        want = compute(cv.tensor(data, cv.float32, carrier=CPU))
        assert type(got.carrier) is SharedMemoryCarrier
        assert (got.shape, got.dtype) == (want.shape, want.dtype)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)

    def test_unknown_name_refused(self) -> None:
        with pytest.raises(NotImplementedError, match="frobnicate on SharedMemoryCarrier"):
            shm([1.0]).carrier.dispatch_op("frobnicate")


class TestGradients:
    def test_gradients_flow_through_central_vjps(self) -> None:
        """relu(x @ w + b) * 2, summed: gradients match the hand-computed ones."""
        x = shm([[1.0, -2.0], [3.0, 4.0]], requires_grad=True)
        w = shm([[0.5], [1.0]], requires_grad=True)
        b = shm([0.1], requires_grad=True)
        loss = (cv.relu(x @ w + b) * 2.0).sum()
        np.testing.assert_allclose(loss.numpy(), 11.2, rtol=1e-6)
        loss.backward()
        assert x.grad is not None and w.grad is not None and b.grad is not None
        np.testing.assert_allclose(x.grad.numpy(), [[0.0, 0.0], [1.0, 2.0]])
        np.testing.assert_allclose(w.grad.numpy(), [[6.0], [8.0]])
        np.testing.assert_allclose(b.grad.numpy(), [2.0])
        assert type(x.grad.carrier) is SharedMemoryCarrier


class TestSharing:
    def test_second_process_reads_and_writes_by_name(self) -> None:
        """Another process attaches by segment name and sees (and changes) the same memory."""
        x = shm([1.5, 2.5, 3.5])
        name = x.carrier.require_facet(SharedMemoryFacet).name
        assert name == x.carrier.segment_name  # type: ignore[attr-defined]  # the carrier's own
        done = _run(
            f"""
            import conveyor as cv
            from conveyor_shm import SharedMemoryCarrier
            c = SharedMemoryCarrier.attach({name!r}, 3, cv.float32)
            print(cv.Tensor(c).numpy().tolist())
            c.write(0, 9.0)
            c.release()
            """
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "[1.5, 2.5, 3.5]"
        assert x.numpy().tolist() == [9.0, 2.5, 3.5]  # no copy: the write is visible here
        assert _exists(name)  # the reader's exit did not unlink the owner's segment

    def test_attach_in_the_creating_process_keeps_the_creators_registration(
        self, tmp_path: Path
    ) -> None:
        """Attaching to its own segment, the creator keeps its resource-tracker entry: at exit
        stderr is clean (no tracker KeyError, no leak warning) and each segment is unlinked
        exactly once, whether released first or left for the interpreter's exit."""
        log = tmp_path / "unlinks"
        done = _run(
            f"""
            from multiprocessing import shared_memory

            import conveyor as cv
            from conveyor_shm import SharedMemoryCarrier

            real = shared_memory._posixshmem.shm_unlink


            def counting(name):
                with open({str(log)!r}, "a") as out:
                    out.write(name.lstrip("/") + "\\n")
                real(name)


            shared_memory._posixshmem.shm_unlink = counting
            names = []
            for release in (True, False):
                x = cv.tensor([1.0, 2.0], cv.float64, carrier=SharedMemoryCarrier)
                names.append(x.carrier.segment_name)
                attached = SharedMemoryCarrier.attach(names[-1], 2, cv.float64)
                attached.write(0, 5.0)
                assert x.numpy().tolist() == [5.0, 2.0]
                attached.release()
                if release:
                    x.carrier.release()
            print(" ".join(names))
            """
        )
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        names = done.stdout.split()
        assert sorted(log.read_text().split()) == sorted(names)  # each unlinked once
        assert not any(_exists(name) for name in names)

    def test_small_results_create_no_segment_until_named(self) -> None:
        """Kernel results and small tensors stay in process memory: no segment until a name is
        asked for; then the values move into a new segment that another process can attach."""
        from multiprocessing import shared_memory

        created: list[str] = []
        original = shared_memory.SharedMemory

        def record(*args: object, **kwargs: object) -> shared_memory.SharedMemory:
            segment = original(*args, **kwargs)  # type: ignore[arg-type]  # passthrough
            created.append(segment.name)
            return segment

        shared_memory.SharedMemory = record  # type: ignore[misc]  # counting, restored below
        try:
            a = shm([1.0, 2.0, 3.0])
            total = a
            for _ in range(20):
                total = total + a
            assert created == []
            np.testing.assert_array_equal(total.numpy(), [21.0, 42.0, 63.0])
            name = total.carrier.segment_name  # type: ignore[attr-defined]  # SharedMemoryCarrier
            assert created == [name] and _exists(name)
            total.carrier.write(1, 5.0)  # writes after sharing land in the segment
            assert total.carrier.segment_name == name  # type: ignore[attr-defined]  # once
        finally:
            shared_memory.SharedMemory = original  # type: ignore[misc]
        done = _run(
            f"""
            import conveyor as cv
            from conveyor_shm import SharedMemoryCarrier
            c = SharedMemoryCarrier.attach({name!r}, 3, cv.float32)
            print(cv.Tensor(c).numpy().tolist())
            c.release()
            """
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "[21.0, 5.0, 63.0]"
        np.testing.assert_array_equal((total + a).numpy(), [22.0, 7.0, 66.0])
        total.carrier.release()
        assert not _exists(name)

    def test_large_allocations_create_their_segment_at_once(self) -> None:
        from conveyor_shm import carrier as module

        big = SharedMemoryCarrier.allocate(module.PRIVATE_MAX_BYTES // 4 + 1, cv.float32)
        named = SharedMemoryCarrier.allocate(2, cv.float32, name=f"cvt-{os.getpid()}-named")
        try:
            for carrier in (big, named):
                assert cv.storage_handle(carrier)._name is not None  # the segment exists already
                assert _exists(carrier.segment_name)  # type: ignore[attr-defined]  # SharedMemoryCarrier
        finally:
            big.release()
            named.release()

    def test_release_unlinks_segment(self) -> None:
        x = shm([1.0])
        name = x.carrier.segment_name  # type: ignore[attr-defined]  # SharedMemoryCarrier
        assert _exists(name)
        x.carrier.release()
        assert not _exists(name)
        with pytest.raises(RuntimeError, match="read on SharedMemoryCarrier: the carrier was"):
            x.carrier.read(0)

    def test_interpreter_exit_unlinks_segment(self) -> None:
        """A segment never released is unlinked when its creating interpreter exits."""
        done = _run(
            """
            import conveyor as cv
            from conveyor_shm import SharedMemoryCarrier
            keep = SharedMemoryCarrier.allocate(4, cv.float64)
            print(keep.segment_name)
            """
        )
        assert done.returncode == 0, done.stderr
        assert "leaked" not in done.stderr
        assert not _exists(done.stdout.strip())


class TestTransfers:
    def test_move_to_and_from_cpu(self) -> None:
        x = shm([[1.0, 2.0], [3.0, 4.0]])
        on_cpu = move(x.T, CPU)
        assert type(on_cpu.carrier) is CPU and on_cpu.numpy().tolist() == [[1.0, 3.0], [2.0, 4.0]]
        back = move(on_cpu, "shm")
        assert type(back.carrier) is SharedMemoryCarrier
        assert back.numpy().tolist() == [[1.0, 3.0], [2.0, 4.0]]


class TestEmptyViews:
    def test_reversed_view_of_an_empty_tensor_reads_and_computes(self) -> None:
        """An empty view whose offset lies past the segment (``x[:, ::-1]`` of a 0x3 tensor)
        reads as empty and computes, as on CPU (the kit's negative-step views found this)."""
        x = cv.zeros((0, 3), dtype=cv.float32, carrier="shm")[:, ::-1]
        assert x.layout.offset == 2 and x.numpy().shape == (0, 3)
        assert (-x).numpy().shape == (0, 3)


class TestKernels:
    """shm runs CPU's computation: one ufunc into the result for native binary arithmetic,
    CPU's kernel (``run_cpu_kernel``) for the rest, over views of the operands' slots."""

    @pytest.fixture
    def cpu_kernel_calls(self, monkeypatch: pytest.MonkeyPatch) -> list[str]:
        from conveyor_shm import carrier as module

        calls: list[str] = []
        real = module.run_cpu_kernel

        def counting(carrier: type, plan: cv.OperationPlan, *rest: Any) -> Any:
            calls.append(plan.operation)
            return real(carrier, plan, *rest)

        monkeypatch.setattr(module, "run_cpu_kernel", counting)
        return calls

    @pytest.mark.parametrize("dtype", [cv.float32, cv.float64, cv.int32, cv.int64, cv.complex128])
    @pytest.mark.parametrize("name", ["add", "sub", "mul", "div"])
    def test_native_binary_arithmetic_is_one_ufunc_with_cpus_bits(
        self, cpu_kernel_calls: list[str], name: str, dtype: cv.DType
    ) -> None:
        left, right = [[1.5, -2.0, 3.0], [0.25, 7.0, -1.0]], [[3.0, 0.5, -4.0]]
        op = getattr(cv, name)
        got = op(shm(left, dtype), shm(right, dtype))
        want = op(cv.tensor(left, dtype, carrier=CPU), cv.tensor(right, dtype, carrier=CPU))
        assert (got.shape, got.dtype) == (want.shape, want.dtype)
        assert got.numpy().tobytes() == want.numpy().tobytes()
        # Integer division computes in a float dtype: its int operands go through CPU's kernel.
        assert cpu_kernel_calls == ([name] if name == "div" and dtype.is_integer else [])

    @pytest.mark.parametrize(
        ("label", "compute"),
        [
            ("float16 add", lambda a, b: a.astype(cv.float16) + b.astype(cv.float16)),
            ("complex64 mul", lambda a, b: a.astype(cv.complex64) * b.astype(cv.complex64)),
            ("mixed dtypes", lambda a, b: a.astype(cv.int32) + b),
            ("weak scalar", lambda a, b: a * 3.0),
            ("exp", lambda a, b: a.exp()),
            ("matmul", lambda a, b: a @ b.T),
        ],
        ids=lambda v: v if isinstance(v, str) else "",
    )
    def test_other_plans_run_cpus_kernel_with_cpus_bits(
        self, cpu_kernel_calls: list[str], label: str, compute: Any
    ) -> None:
        data = [[1.5, -2.0, 3.0], [0.25, 7.0, -1.0]]
        got = compute(shm(data), shm(data))
        want = compute(cv.tensor(data, cv.float32, carrier=CPU), cv.tensor(data, carrier=CPU))
        assert (got.shape, got.dtype) == (want.shape, want.dtype)
        assert got.numpy().tobytes() == want.numpy().tobytes()
        assert len(cpu_kernel_calls) == 1

    def test_overflow_and_nan_are_values_not_warnings(self) -> None:
        big = shm([3e38, 0.0])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            total = (big + big).numpy()
            ratio = cv.div(big, shm([0.0, 0.0])).numpy()
        assert np.isinf(total[0]) and total[1] == 0.0
        assert np.isinf(ratio[0]) and np.isnan(ratio[1])

    def test_operand_views_are_kept_until_the_tensor_is_shared(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A kernel reading the same operand again builds no view; once the tensor moves into
        its segment the kept view (over the private array) is dropped, so later writes, here
        and from another process, are what the kernels read."""
        from conveyor_shm import carrier as module

        built: list[cv.Layout] = []
        real = module._strided

        def counting(flat: Any, layout: cv.Layout) -> Any:
            built.append(layout)
            return real(flat, layout)

        a = shm([1.0, 2.0, 3.0])
        monkeypatch.setattr(module, "_strided", counting)
        doubled, squared = a + a, a * a
        assert built == [a.layout]  # one view of a, read four times
        assert doubled.numpy().tolist() == [2.0, 4.0, 6.0]
        assert squared.numpy().tolist() == [1.0, 4.0, 9.0]
        name = a.carrier.segment_name  # type: ignore[attr-defined]  # SharedMemoryCarrier
        a.carrier.write(0, 10.0)
        assert (a + a).numpy().tolist() == [20.0, 4.0, 6.0]
        done = _run(
            f"""
            import conveyor as cv
            from conveyor_shm import SharedMemoryCarrier
            c = SharedMemoryCarrier.attach({name!r}, 3, cv.float32)
            c.write(2, -1.0)
            c.release()
            """
        )
        assert done.returncode == 0, done.stderr
        assert (a + a).numpy().tolist() == [20.0, 4.0, -2.0]
        a.carrier.release()
        assert not _exists(name)
