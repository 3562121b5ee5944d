"""``conveyor demo``: the whole framework doing real work, as one readable story in the terminal.

This distribution (``conveyor-demo``) adds the ``demo`` subcommand to ``conveyor`` through the
``conveyor_commands`` plugin hook (``conveyor_demo.plugin``).

Each step prints what it proves and its figures; steps that take more than a second show a
``tqdm`` bar; the run ends with a summary table and writes ``summary.json`` and ``loss.png`` to
the output folder. A step whose optional plugin is missing says how to install it and the demo
goes on. ``quick=True`` is the seconds-long variant the test suite runs.

Carriers are reached by their registered names through the plugin host, never by importing a
carrier distribution, so the demo exercises discovery exactly as a user's program would.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import attrs

from conveyor import plugins
from conveyor.plugins import table

__all__ = ["DemoOptions", "run_demo"]

_MIB = 1 << 20


@attrs.frozen(kw_only=True)
class DemoOptions:
    """What ``conveyor demo`` was asked for (the command-line flags)."""

    quick: bool = False
    size: int = 1024 * _MIB  # bytes of float32 data in the out-of-core step
    budget: int = 128 * _MIB  # resident bytes the out-of-core step may hold
    output: Path = Path("conveyor-demo")
    json: bool = False  # print only the summary document

    @property
    def epochs(self) -> int:
        return 4 if self.quick else 15

    @property
    def accuracy_goal(self) -> float:
        """Test accuracy the training step must beat (a few epochs reach less)."""
        return 0.9 if self.quick else 0.95


class _Story:
    """Prints the narrative (silenced under ``--json``) and makes progress bars."""

    def __init__(self, options: DemoOptions, stream: TextIO) -> None:
        self.quiet = options.json
        self.stream = stream

    def say(self, text: str = "") -> None:
        if not self.quiet:
            print(text, file=self.stream, flush=True)

    def bar(self, total: int, label: str, unit: str = "it") -> Any:
        from tqdm import tqdm

        return tqdm(total=total, desc=label, unit=unit, disable=self.quiet, leave=False)


# This demo is itself a plugin; the plugins step is about the carriers the others contribute.
_OWN_DISTRIBUTION = "conveyor-demo"


def _plugins_step(story: _Story) -> dict[str, Any]:
    records = [r for r in plugins.host().plugins() if r.distribution != _OWN_DISTRIBUTION]
    story.say(
        "1. Plugins: every carrier is a separately installed distribution, found at run time."
    )
    rows = [
        (r.name, str(r.state), ", ".join(r.carriers) or "-", (r.error or "").splitlines()[0:1])
        for r in records
    ]
    story.say(
        table(
            ("plugin", "state", "carriers", "reason"),
            [(n, s, c, e[0] if e else "") for n, s, c, e in rows],
        )
    )
    return {
        "plugins": [
            {"name": r.name, "state": str(r.state), "carriers": list(r.carriers), "reason": r.error}
            for r in records
        ]
    }


def _train_step(story: _Story, options: DemoOptions) -> tuple[dict[str, Any], Any, list[Any]]:
    from conveyor_demo import _train

    story.say("\n2. Train: a digit classifier through the public API and autograd on CPU.")
    data = _train.load_digits()
    story.say(
        f"   scikit-learn digits: {len(data.train_y)} training and {len(data.test_y)} test "
        f"images of 8x8 pixels; network 64-{_train.HIDDEN}-10, {options.epochs} epochs"
    )
    results = []
    trainers: list[tuple[str, Callable[..., Any]]] = [
        ("conveyor", _train.train_conveyor),
        ("numpy", _train.train_numpy),
        ("torch", _train.train_torch),
    ]
    for name, trainer in trainers:
        with story.bar(options.epochs, f"   {name}", "epoch") as bar:
            result = trainer(data, options.epochs, bar.update)
        if result is None:
            story.say(f"   {name}: not installed (pip install torch==2.13.0 to compare)")
            continue
        results.append(result)
    conveyor_run = results[0]
    figures: dict[str, Any] = {"epochs": options.epochs, "accuracy_goal": options.accuracy_goal}
    for result in results:
        figures[result.framework] = {
            "accuracy": result.accuracy,
            "final_loss": result.losses[-1],
            "steps_per_second": result.steps_per_second,
        }
    numpy_run = next(r for r in results if r.framework == "numpy")
    figures["same_accuracy_as_numpy"] = conveyor_run.accuracy == numpy_run.accuracy
    story.say(
        table(
            ("framework", "test accuracy", "final loss", "steps/s"),
            [
                (
                    r.framework,
                    f"{r.accuracy:.1%}",
                    f"{r.losses[-1]:.4f}",
                    f"{r.steps_per_second:.0f}",
                )
                for r in results
            ],
        )
    )
    return figures, data, results


def _out_of_core_step(story: _Story, options: DemoOptions) -> dict[str, Any]:
    from conveyor_demo._out_of_core import stream_reduce_and_scale

    size, budget = (16 * _MIB, 4 * _MIB) if options.quick else (options.size, options.budget)
    story.say(
        f"\n3. Out of core: {size / _MIB:.0f} MiB of float32 on disk, computed tile by tile "
        f"within a {budget / _MIB:.0f} MiB budget (TiledEvictable over FileBacked)."
    )
    figures = stream_reduce_and_scale(size, budget, options.output / "tiles", story.bar)
    if "skipped" in figures:
        story.say(f"   skipped: {figures['skipped']}; {figures['fix']}")
    else:
        story.say(
            f"   sum {figures['sum']:.6g} (exact: {figures['expected_sum']:.6g}); "
            f"streamed at {figures['throughput_mb_s']:.0f} MB/s beside {figures['disk_mb_s']:.0f} "
            f"MB/s for a raw sequential read of the same file (same page cache);\n"
            f"   peak resident {figures['peak_resident_bytes'] / _MIB:.1f} MiB of "
            f"{budget / _MIB:.0f} MiB"
        )
    return figures


def _resume_step(story: _Story, options: DemoOptions, data: Any, weights: Any) -> dict[str, Any]:
    from conveyor_demo._resume import evict_and_resume

    story.say("\n4. Evict and resume: the trained weights evicted to disk and promoted back.")
    figures = evict_and_resume(weights, data, options.output / "weights")
    story.say(
        f"   {figures['bytes_on_disk']} bytes evicted; accuracy {figures['accuracy_before']:.1%}"
        f" before, {figures['accuracy_after']:.1%} after: "
        + ("identical" if figures["identical"] else "DIFFERENT")
    )
    return figures


def _siblings_step(story: _Story, data: Any, weights: Any) -> dict[str, Any]:
    import numpy as np

    import conveyor as cv
    from conveyor_demo import _siblings
    from conveyor_demo._train import conveyor_logits

    story.say("\n5. Sibling carriers: the same forward pass elsewhere, compared with CPU.")
    with cv.no_grad():
        cpu = [cv.tensor(w, carrier="cpu") for w in weights]
        reference = conveyor_logits(cpu, cv.tensor(data.test_x, carrier="cpu")).numpy()
    figures: dict[str, Any] = {}
    for name, run in (("shm", _siblings.on_shared_memory), ("dask", _siblings.on_dask)):
        with story.bar(1, f"   {name}") as bar:
            figures[name] = run(weights, data, np.asarray(reference))
            bar.update(1)
        outcome = figures[name]
        if "skipped" in outcome:
            story.say(f"   {name}: skipped, {outcome['skipped']}; {outcome['fix']}")
        else:
            verdict = (
                "identical to CPU"
                if outcome["identical"]
                else "equal to CPU within float32 rounding"
                if outcome["agrees"]
                else "DIFFERENT from CPU"
            )
            story.say(
                f"   {name}: {verdict} (max |difference| {outcome['max_abs_difference']:.3g})"
            )
    return figures


def _verdict(step: dict[str, Any], key: str) -> str:
    if "skipped" in step:
        return "skipped"
    return "ok" if step.get(key, False) else "FAILED"


def _summary_rows(summary: dict[str, Any]) -> list[tuple[str, str, str]]:
    train = summary["train"]
    ooc = summary["out_of_core"]
    resume = summary["resume"]
    loaded = sum(p["state"] == "loaded" for p in summary["plugins"])
    rows = [
        ("plugins", "ok", f"{loaded} of {len(summary['plugins'])} loaded"),
        (
            "train",
            "ok" if train["conveyor"]["accuracy"] > train["accuracy_goal"] else "FAILED",
            f"accuracy {train['conveyor']['accuracy']:.1%}, "
            f"{train['conveyor']['steps_per_second']:.0f} steps/s "
            f"(numpy {train['numpy']['steps_per_second']:.0f}"
            + (f", torch {train['torch']['steps_per_second']:.0f}" if "torch" in train else "")
            + ")",
        ),
        (
            "out of core",
            "skipped"
            if "skipped" in ooc
            else _verdict(ooc, "within_budget")
            if ooc["correct"]
            else "FAILED",
            "-"
            if "skipped" in ooc
            else f"{ooc['throughput_mb_s']:.0f} MB/s, peak {ooc['peak_resident_bytes'] >> 20} MiB"
            f" of {ooc['budget_bytes'] >> 20} MiB",
        ),
        ("evict and resume", _verdict(resume, "identical"), f"{resume['bytes_on_disk']} bytes"),
    ]
    for name, outcome in summary["siblings"].items():
        detail = outcome.get("fix", f"max |difference| {outcome.get('max_abs_difference', 0):.3g}")
        rows.append((f"{name} carrier", _verdict(outcome, "agrees"), detail))
    return rows


def run_demo(options: DemoOptions, stream: TextIO = sys.stdout) -> dict[str, Any]:
    """Run every step; return the summary (also written to ``options.output``)."""
    from conveyor_demo import _report

    story = _Story(options, stream)
    started = time.perf_counter()
    summary: dict[str, Any] = {"quick": options.quick}
    summary.update(_plugins_step(story))
    summary["train"], data, results = _train_step(story, options)
    summary["out_of_core"] = _out_of_core_step(story, options)
    summary["resume"] = _resume_step(story, options, data, results[0].weights)
    summary["siblings"] = _siblings_step(story, data, results[0].weights)
    summary["seconds"] = time.perf_counter() - started
    story.say("\n6. Report")
    plot = _report.write_plot(results, options.output)
    summary["files"] = {"summary": str(options.output / "summary.json"), "plot": str(plot)}
    rows = _summary_rows(summary)
    summary["problems"] = [step for step, result, _ in rows if result == "FAILED"]
    _report.write_summary(summary, options.output)
    story.say(table(("step", "result", "figures"), rows))
    story.say(f"\n{summary['seconds']:.0f} s; report in {options.output}/ (summary.json, loss.png)")
    return summary
