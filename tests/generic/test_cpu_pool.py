"""The CPU buffer pool: dead large results come back, and the next result takes them."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import numpy as np
import pytest

import conveyor as cv
from conveyor_generic import CPU
from conveyor_generic.kernels import cpu_runtime as rt
from tests.generic.test_cpu import address, buffer_of

LARGE = 1 << 19  # float32 elements: 2 MiB, above POOL_MIN_BYTES
MEDIUM = 1 << 16  # float32 elements: 256 KiB, the smallest pooled size


@pytest.fixture(autouse=True)
def empty_pool() -> Iterator[None]:
    """Each test starts from an empty pool (and leaves one)."""
    gc.collect()
    rt.pool_bytes()
    with rt._pool_lock:
        rt._pool.clear()
        rt._pool_bytes = 0
    yield
    with rt._pool_lock:
        rt._pool.clear()
        rt._pool_bytes = 0


class TestPoolRefills:
    def test_a_dead_result_refills_the_pool(self) -> None:
        x = cv.zeros(LARGE, carrier=CPU)
        y = cv.add(x, 1.0)
        assert rt.pool_bytes() == 0
        del y
        assert rt.pool_bytes() == rt.size_class(LARGE * 4)

    def test_the_next_result_takes_the_dead_buffer_and_empties_the_pool(self) -> None:
        x = cv.zeros(LARGE, carrier=CPU)
        y = cv.add(x, 1.0)
        first = address(buffer_of(y))
        del y
        z = cv.add(x, 2.0)
        assert address(buffer_of(z)) == first
        assert rt.pool_bytes() == 0
        np.testing.assert_array_equal(z.numpy()[:3], [2.0, 2.0, 2.0])

    def test_repeated_large_adds_reuse_one_buffer(self) -> None:
        x = cv.zeros(LARGE, carrier=CPU)
        seen = set()
        for _ in range(5):
            y = x + x
            seen.add(address(buffer_of(y)))
            del y
        assert len(seen) == 1

    def test_a_slightly_different_size_reuses_the_same_size_class(self) -> None:
        x = cv.zeros(LARGE, carrier=CPU)
        y = cv.add(x, 1.0)
        first = address(buffer_of(y))
        del y
        w = cv.add(cv.zeros(LARGE - 16, carrier=CPU), 1.0)
        assert rt.size_class((LARGE - 16) * 4) == rt.size_class(LARGE * 4)
        assert address(buffer_of(w)) == first

    def test_a_dead_result_with_an_exported_view_stays_out_of_the_pool(self) -> None:
        x = cv.zeros(LARGE, carrier=CPU)
        y = cv.add(x, 1.0)
        kept = np.asarray(y)
        del y
        assert rt.pool_bytes() == 0
        z = cv.add(x, 2.0)
        assert not np.shares_memory(kept, np.asarray(z))
        np.testing.assert_array_equal(kept[:3], [1.0, 1.0, 1.0])

    def test_medium_results_from_256_kib_refill_the_pool(self) -> None:
        """From 256 KiB malloc would hand freed buffers back to the kernel, so they are pooled."""
        assert MEDIUM * 4 == rt.POOL_MIN_BYTES
        x = cv.zeros(MEDIUM, carrier=CPU)
        y = x + x
        first = address(buffer_of(y))
        del y
        assert rt.pool_bytes() == rt.size_class(MEDIUM * 4)
        z = x + 1.0
        assert address(buffer_of(z)) == first
        np.testing.assert_array_equal(z.numpy()[-3:], [1.0, 1.0, 1.0])

    def test_a_chain_of_medium_results_reuses_two_buffers(self) -> None:
        """``(x + x) + x`` keeps two buffers alive at a time; repeating it needs no new one."""
        x = cv.zeros(MEDIUM, carrier=CPU)
        seen = set()
        for _ in range(6):
            y = x + x
            z = y + x
            seen.update((address(buffer_of(y)), address(buffer_of(z))))
            del y, z
        assert len(seen) == 2

    def test_a_dying_carrier_s_watch_queues_its_buffer_once(self) -> None:
        x = cv.zeros(MEDIUM, carrier=CPU)
        y = x + x
        assert y.carrier.__dict__["_watch"]() is y.carrier
        del y
        assert len(rt._dead) == 1
        assert rt.pool_bytes() == rt.size_class(MEDIUM * 4)
        assert rt._dead == []

    def test_a_repeated_backward_with_accumulated_gradients_allocates_no_new_buffer(self) -> None:
        """Gradient sums write into recycled buffers: after the first step, a step that
        accumulates four contributions into one leaf takes every buffer from the pool."""
        x = cv.tensor(np.ones(MEDIUM, np.float32), carrier=CPU, requires_grad=True)

        def step() -> None:
            x.grad = None
            y = x * 2.0 + x * 3.0 + x * 4.0 + x * 5.0
            y.sum().backward()

        step()
        before = rt.fresh_buffers()
        for _ in range(3):
            step()
        assert rt.fresh_buffers() == before
        assert x.grad is not None
        np.testing.assert_array_equal(x.grad.numpy()[:3], [14.0, 14.0, 14.0])

    @pytest.mark.parametrize(
        ("x_shape", "k_shape", "padding"),
        [((2, 8, 30, 30), (8, 8, 3, 3), 1), ((4, 64, 12, 12), (16, 64, 1, 1), 0)],
        ids=["3x3, one image per product", "1x1, images sharing a product"],
    )
    def test_a_repeated_convolution_takes_its_work_buffers_from_the_pool(
        self, x_shape: tuple[int, ...], k_shape: tuple[int, ...], padding: int
    ) -> None:
        """The im2col buffers go back to the pool (a view left alive used to keep them out,
        so every call mapped, and faulted in, fresh ones)."""
        rng = np.random.default_rng(0)
        x = cv.tensor(rng.standard_normal(x_shape).astype(np.float32), carrier=CPU)
        k = cv.tensor(rng.standard_normal(k_shape).astype(np.float32), carrier=CPU)
        pads = ((padding, padding), (padding, padding))
        first = cv.conv_general(x, k, padding=pads).numpy().copy()
        before = rt.fresh_buffers()
        for _ in range(3):
            np.testing.assert_array_equal(cv.conv_general(x, k, padding=pads).numpy(), first)
        assert rt.fresh_buffers() == before

    def test_small_results_never_enter_the_pool(self) -> None:
        x = cv.zeros(1024, carrier=CPU)
        for _ in range(3):
            del_me = x + x
            del del_me
        assert rt.pool_bytes() == 0


class TestPooledBuffersAreAlignedMappings:
    def test_a_reused_buffer_needs_no_address_look_up(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Once a medium result died, the next one takes its buffer without aligning anew."""
        x = cv.zeros(MEDIUM, carrier=CPU)
        y = x + x
        del y

        def refuse(raw: object) -> int:
            raise AssertionError("buffer_address called on a pooled reuse")

        monkeypatch.setattr(rt, "buffer_address", refuse)
        before = rt.fresh_buffers()
        for _ in range(3):
            z = x + 1.0
            assert address(buffer_of(z)) % rt.ALIGN == 0
            np.testing.assert_array_equal(z.numpy()[:2], [1.0, 1.0])
            del z
        assert rt.fresh_buffers() == before

    def test_a_scratch_buffer_with_another_array_over_it_is_not_reused(self) -> None:
        """recycle leaves a buffer alone while a second array still reads its memory."""
        work = rt.scratch((MEDIUM,), np.dtype(np.float32))
        kept = work[:4]
        rt.recycle(work)
        assert rt.pool_bytes() == 0
        del kept

    def test_a_dead_shaped_result_refills_the_pool(self) -> None:
        """A 2-D result (whose flat buffer is a view of the shaped array) comes back too."""
        x = cv.zeros((512, 1024), carrier=CPU)
        y = x + 1.0
        first = address(buffer_of(y))
        del y
        assert rt.pool_bytes() == rt.size_class(512 * 1024 * 4)
        z = x + 2.0
        assert address(buffer_of(z)) == first

    def test_an_exported_view_of_a_shaped_result_keeps_it_out_of_the_pool(self) -> None:
        x = cv.zeros((512, 1024), carrier=CPU)
        y = x + 1.0
        kept = np.asarray(y)
        del y
        assert rt.pool_bytes() == 0
        z = x + 2.0
        assert not np.shares_memory(kept, np.asarray(z))
        np.testing.assert_array_equal(kept[0, :3], [1.0, 1.0, 1.0])
