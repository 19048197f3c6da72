"""Run the seed document's TypeScript engine under node, and draw random cases for it.

The seed text lives outside the repository, in ``<parent of the checkout>/shared/seed/``;
``run_seed.mjs`` cuts the engine out of it and strips its types at run time. Loaded by the
gate tests and by ``bench/bench_gate.py`` (through ``importlib``, so ``tests/`` needs no
``__init__``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
RUNNER = HERE / "run_seed.mjs"
REPO_ROOT = HERE.parents[2]


def seed_file(repo_root: Path = REPO_ROOT) -> Path | None:
    """The seed document beside the checkout, or None when it is not there."""
    folder = repo_root.parent / "shared" / "seed"
    if not folder.is_dir():
        return None
    for path in sorted(folder.glob("*.txt")):
        if "class AMVGuardEngine" in path.read_text(encoding="utf-8"):
            return path
    return None


def unavailable_reason(repo_root: Path = REPO_ROOT) -> str | None:
    """Why the node comparison cannot run here, or None when it can."""
    if shutil.which("node") is None:
        return "node is not installed, so the seed's TypeScript engine cannot run"
    if seed_file(repo_root) is None:
        return (
            f"the seed document (with class AMVGuardEngine) is not in "
            f"{repo_root.parent / 'shared' / 'seed'}"
        )
    return None


def run_node(request: dict[str, Any], repo_root: Path = REPO_ROOT) -> dict[str, Any]:
    """Send one JSON request to one node process running the seed engine."""
    seed = seed_file(repo_root)
    if seed is None:
        raise RuntimeError(unavailable_reason(repo_root))
    proc = subprocess.run(
        ["node", str(RUNNER), str(seed)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"node failed ({proc.returncode}): {proc.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def random_claim(rng: np.random.Generator, cid: str) -> dict[str, Any]:
    """A claim in the seed's camelCase, with edge values now and then."""
    # mostly confident memories from trusted sources, as an agent's memory would hold
    conf = float(rng.beta(5.0, 1.2))
    if rng.uniform() < 0.05:
        conf = float(rng.choice([0.0, 1.0, 1e-7, 1.0 - 1e-9]))
    hours = float(rng.exponential(200.0)) if rng.uniform() < 0.9 else 0.0
    return {
        "id": cid,
        "statement": f"claim {cid}",
        "timestamp": float(rng.integers(1_600_000_000, 1_800_000_000)),
        "sourceTrustScore": float(rng.beta(3.0, 1.5)),
        "modelConfidence": conf,
        "recencyHours": hours,
        "contradictionFlag": bool(rng.uniform() < 0.1),
    }


def random_case(
    rng: np.random.Generator,
    i: int,
    *,
    n_premises: int | None = None,
    n_verifiers: int | None = None,
    explicit_p: float = 0.1,
    one_premise_each: bool = False,
) -> dict[str, Any]:
    """One random action with 1-4 premises from random claims and 1-4 verifiers.

    ``explicit_p`` is the share of premises that carry a probability instead of a claim;
    those include the edges 0 and 1, where the seed relies on its guards. Verifiers
    resolve 1-3 random premises (5 % none), or with ``one_premise_each`` verifier ``j``
    resolves premise ``j mod m``.
    """
    m = int(rng.integers(1, 5)) if n_premises is None else n_premises
    k = int(rng.integers(1, 5)) if n_verifiers is None else n_verifiers
    premises = []
    for j in range(m):
        pid = f"a{i}p{j}"
        prem: dict[str, Any] = {
            "id": pid,
            "claimId": f"c{i}_{j}",
            "dependencyType": "direct",
            "parameterTarget": f"arg{j}",
        }
        if rng.uniform() < explicit_p:
            u = rng.uniform()
            p = float(rng.beta(0.5, 6.0)) if u < 0.8 else float(rng.choice([0.0, 1.0]))
            prem["calibratedViolationProbability"] = p
        else:
            prem["calibratedViolationProbability"] = None
            prem["claim"] = random_claim(rng, f"c{i}_{j}")
        premises.append(prem)
    ids = [pm["id"] for pm in premises]
    verifiers = []
    for j in range(k):
        if one_premise_each:
            resolves: list[str] = [ids[j % m]]
        elif rng.uniform() < 0.05:
            resolves = []
        else:
            size = int(rng.integers(1, min(3, m) + 1))
            resolves = [ids[t] for t in rng.permutation(m)[:size]]
        r = 1.0 if rng.uniform() < 0.15 else float(rng.uniform(0.5, 1.0))
        if r == 0.5:
            r = 0.75
        cost = 0.0 if rng.uniform() < 0.1 else float(rng.exponential(0.5))
        verifiers.append({
            "id": f"v{j}",
            "resolvesPremiseIds": resolves,
            "executionCost": cost,
            "symmetricReliability": r,
        })
    engine = {
        "lambda": 1.0 if rng.uniform() < 0.5 else float(rng.uniform(0.0, 3.0)),
        "delta": float(np.exp(rng.uniform(np.log(0.5), np.log(100.0)))),
        "epsilon": float(rng.uniform(0.01, 0.6)),
    }
    action = {
        "actionId": f"a{i}",
        "toolName": "transfer",
        "arguments": {"amount": i},
        "impactCostTheta": float(np.exp(rng.uniform(np.log(0.1), np.log(1000.0)))),
        "abstentionCostKappa": float(np.exp(rng.uniform(np.log(0.1), np.log(100.0)))),
        "premises": premises,
    }
    return {"engine": engine, "action": action, "verifiers": verifiers}


def random_cases(seed: int, n: int, **kwargs: Any) -> list[dict[str, Any]]:
    """``n`` random cases from one seeded generator."""
    rng = np.random.default_rng(seed)
    return [random_case(rng, i, **kwargs) for i in range(n)]


def calibrated(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cases with every premise's seed-prior probability computed up front (the seed engine
    takes probabilities; the benchmarks give both sides the same ones)."""
    from amv_calib.gate import seed_calibrate

    out = []
    for c in cases:
        prem = []
        for pm in c["action"]["premises"]:
            pm = dict(pm)
            claim = pm.pop("claim", None)
            if pm.get("calibratedViolationProbability") is None:
                pm["calibratedViolationProbability"] = seed_calibrate(
                    claim["recencyHours"], claim["sourceTrustScore"], claim["modelConfidence"],
                    claim["contradictionFlag"])
            prem.append(pm)
        out.append({**c, "action": {**c["action"], "premises": prem}})
    return out
