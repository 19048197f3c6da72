"""Say whether ``make demo`` reproduced the shipped champion.

``make demo`` writes its versions to ``out/models/`` (ignored by git), never to the tracked
``models/``. This script compares the version the demo exported (``out/models/amv-guard``'s
``challenger``) with the shipped ``models/amv-guard/v1``: the calibrator's bytes, the gate
thresholds, and, when the calibrator differs, the decisions of both on the sample episodes.

Run it:  python examples/demo_check.py [--mine REF] [--shipped REF] [--episodes FILE]
Exit status 0 in every case the comparison could be made (a difference is reported, not an
error); 2 when a version cannot be loaded.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import numpy as np

from amv_calib.contract import load_artifact
from amv_calib.exceptions import ArtifactError
from amv_calib.gate import Gate
from amv_calib.tuning import replay

ROOT = Path(__file__).resolve().parents[1]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def main(argv: list[str] | None = None) -> int:
    """Compare the demo's version with the shipped one and print the verdict."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mine", default=str(ROOT / "out" / "models" / "amv-guard") + "@challenger")
    ap.add_argument("--shipped", default=str(ROOT / "models" / "amv-guard" / "v1"))
    ap.add_argument("--episodes", default=str(ROOT / "data" / "sample" / "episodes.jsonl"))
    args = ap.parse_args(argv)
    try:
        mine, shipped = load_artifact(args.mine), load_artifact(args.shipped)
    except ArtifactError as exc:
        print(f"demo check: cannot compare with the shipped champion: {exc}", file=sys.stderr)
        return 2
    where = f"{mine.path.parent.name}/{mine.path.name}"
    ours, theirs = mine.read("calibrator.json"), shipped.read("calibrator.json")
    same_gate = dict(mine.manifest["gate"]) == dict(shipped.manifest["gate"])
    if ours == theirs and same_gate:
        print(f"demo check: {where} reproduces the shipped models/amv-guard/v1: calibrator.json "
              f"has the same bytes (sha256 {_sha(ours)[:16]}...) and the gate the same "
              "thresholds")
        return 0
    why = []
    if ours != theirs:
        a, b = mine.calibrator, shipped.calibrator
        if a.kind == b.kind and len(a.coef) == len(b.coef):
            diff = max(abs(x - y) for x, y in zip((a.intercept, *a.coef),
                                                  (b.intercept, *b.coef), strict=True))
            why.append(f"calibrator.json differs (largest coefficient difference {diff:.3g})")
        else:
            why.append(f"calibrator.json differs (a {a.kind} calibrator of {len(a.coef)} "
                       f"terms against {b.kind} of {len(b.coef)})")
    if not same_gate:
        ours_gate, v1_gate = dict(mine.manifest["gate"]), dict(shipped.manifest["gate"])
        moved = [f"{k} {ours_gate.get(k)!r} against v1's {v1_gate.get(k)!r}"
                 for k in sorted(set(ours_gate) | set(v1_gate))
                 if ours_gate.get(k) != v1_gate.get(k)]
        why.append(f"the gate thresholds differ ({', '.join(moved)})")
    print(f"demo check: {where} is not the shipped models/amv-guard/v1: {'; '.join(why)}. "
          "The data and the pinned stack are the same, so the cause is this machine's "
          "arithmetic or a change of the code since v1 was exported.")
    runs = [replay(args.episodes, "lookahead", seed=0, n_boot=0,
                   gate=Gate.from_artifact(art.path, strict=True)).outcomes
            for art in (mine, shipped)]
    differ = int(np.count_nonzero((runs[0].proceed != runs[1].proceed)
                                  | (runs[0].queries != runs[1].queries)))
    n = len(runs[0].proceed)
    print(f"demo check: on the {n:,} sample episodes its decisions "
          + ("equal v1's on every one" if differ == 0 else f"differ from v1's on {differ:,}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
