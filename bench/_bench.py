"""What every benchmark shares: its options, timing both sides alike, and its targets.

``bench/README.md`` states the rules this module implements once: one clock for both sides of
a ratio, the same warm-up and the same number of rounds on both sides, rounds alternating,
baselines measured in the same invocation; ``--check`` exits 1 naming each missed target.
The scripts run as ``python bench/<name>.py``, so this file is importable as ``_bench``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def parser(doc: str | None, topic: str) -> argparse.ArgumentParser:
    """The options every benchmark takes: ``--quick``, ``--check`` and ``--out``."""
    ap = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="tiny run (smoke test); targets stated for the full size are not "
                         "checked")
    ap.add_argument("--check", action="store_true",
                    help="exit with status 1, naming each missed target")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / f"{topic}.json",
                    help="where to write the results (JSON)")
    return ap


@dataclass
class Rounds:
    """Seconds of every timed round of one side: wall and process CPU."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    last: Any = None

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu)

    @property
    def wall_median(self) -> float:
        return statistics.median(self.wall)

    @property
    def cpu_best(self) -> float:
        return min(self.cpu)

    @property
    def wall_best(self) -> float:
        return min(self.wall)


def alternate(sides: Mapping[str, Callable[[], Any]], *, rounds: int, warmup: int = 1
              ) -> dict[str, Rounds]:
    """Time every side ``rounds`` times, the sides alternating round by round.

    Each side first runs ``warmup`` untimed calls (the same number on every side). A round
    is one call of the side's function; its wall time (``time.perf_counter``) and its
    process CPU time (``time.process_time``: every thread of this process) are kept. The
    garbage collector stays as the caller left it (on, unless a benchmark says otherwise
    for both sides). The last result of each side is kept in ``Rounds.last``.
    """
    for fn in sides.values():
        for _ in range(warmup):
            fn()
    out = {name: Rounds() for name in sides}
    for _ in range(rounds):
        for name, fn in sides.items():
            t0, c0 = time.perf_counter(), time.process_time()
            res = fn()
            out[name].cpu.append(time.process_time() - c0)
            out[name].wall.append(time.perf_counter() - t0)
            out[name].last = res
    return out


@dataclass(frozen=True)
class Target:
    """A stated target: ``value`` must be at most (``at_most``) or at least ``bound``.

    ``value`` None means the figure could not be measured (``missing`` says why): a check
    that cannot run does not pass. ``full_only`` targets are stated for the full size and
    are not checked in ``--quick``. ``bound`` None is a figure reported beside its baseline
    with no target (:func:`reported`): never missed. When ``value`` is a ratio, ``ours``
    and ``baseline`` are its two sides (in ``side_unit``) and ``baseline_name`` says what
    the baseline is; the benchmark page (``bench/report.py``) shows them.
    """

    name: str
    value: float | None
    bound: float | None
    at_most: bool
    unit: str = ""
    missing: str = ""
    full_only: bool = False
    prop: bool = False
    ours: float | None = None
    baseline: float | None = None
    baseline_name: str = ""
    side_unit: str = ""

    @property
    def met(self) -> bool:
        if self.bound is None:
            return True
        if self.value is None:
            return False
        return self.value <= self.bound if self.at_most else self.value >= self.bound

    def describe(self) -> str:
        op = "<=" if self.at_most else ">="
        want = ("holds" if self.prop else "none" if self.bound is None
                else f"{op} {self.bound:g}{self.unit}")
        if self.value is None:
            return f"{self.name}: not measured ({self.missing}); target: {want}"
        if self.prop:
            return f"{self.name}: {'holds' if self.met else 'does not hold'}"
        return f"{self.name}: {self.value:.4g}{self.unit} (target {want})"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "bound": self.bound,
                "op": None if self.bound is None else "<=" if self.at_most else ">=",
                "unit": self.unit, "met": self.met, "missing": self.missing or None,
                "full_only": self.full_only, "property": self.prop, "ours": self.ours,
                "baseline": self.baseline, "baseline_name": self.baseline_name or None,
                "side_unit": self.side_unit}


def at_most(name: str, value: float | None, bound: float, **kw: Any) -> Target:
    """A target ``value <= bound``."""
    return Target(name, value, bound, True, **kw)


def at_least(name: str, value: float | None, bound: float, **kw: Any) -> Target:
    """A target ``value >= bound``."""
    return Target(name, value, bound, False, **kw)


def holds(name: str, ok: bool | None, missing: str = "", **kw: Any) -> Target:
    """A target that is a property (equal results, byte-identical files): met when true."""
    return Target(name, None if ok is None else float(bool(ok)), 1.0, False,
                  missing=missing, prop=True, **kw)


def reported(name: str, value: float | None, **kw: Any) -> Target:
    """A figure shown beside its baseline with no target (never missed)."""
    return Target(name, value, None, True, **kw)


def checked(targets: Sequence[Target], *, quick: bool) -> list[Target]:
    """The targets that apply to this run (``full_only`` ones are left out in --quick)."""
    return [t for t in targets if not (quick and t.full_only)]


def report_targets(targets: Sequence[Target], *, quick: bool) -> list[dict[str, Any]]:
    """The targets as JSON objects, each with ``checked`` (False: full size only)."""
    live = checked(targets, quick=quick)
    return [{**t.to_dict(), "checked": t in live} for t in targets]


def finish(targets: Sequence[Target], *, quick: bool, check: bool) -> int:
    """Print every target; with ``check``, name each missed one on stderr and return 1."""
    live = checked(targets, quick=quick)
    for t in targets:
        state = ("not checked in --quick" if t not in live
                 else "met" if t.met else "MISSED")
        print(f"target {state}: {t.describe()}")
    missed = [t for t in live if not t.met]
    if check and missed:
        for t in missed:
            print(f"missed target: {t.describe()}", file=sys.stderr)
        return 1
    return 0


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def _options() -> list[str]:
    """This run's command-line options, less the paths (``--out``, ``--data-dir``)."""
    out: list[str] = []
    args = iter(sys.argv[1:])
    for a in args:
        if a in ("--out", "--data-dir"):
            next(args, None)
        elif not a.startswith(("--out=", "--data-dir=")):
            out.append(a)
    return out


def run_info(*, quick: bool) -> dict[str, Any]:
    """When and where this run was made: the benchmark page prints it beside the figures.

    The load average is kept because the machines are shared: a high one says the
    absolute times are slow, while the ratios (both sides timed alike) still hold.
    """
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
            "quick": quick,
            "options": _options(),
            "machine": {"cpu": _cpu_model(), "logical_cpus": os.cpu_count(),
                        "memory_gib": _memory_gib(),
                        "os": f"{platform.system()} {platform.release()}",
                        "python": platform.python_version()},
            "load_average_1min": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg")
            else None}


def write_results(path: Path, results: dict[str, Any], targets: Sequence[Target], *,
                  quick: bool) -> None:
    """Write ``results`` as JSON to ``path``, with its targets and :func:`run_info`."""
    results["targets"] = report_targets(targets, quick=quick)
    results["run"] = run_info(quick=quick)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
