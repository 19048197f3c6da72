"""Synthetic data: determinism, the laws by hand, p_true as the true posterior, episodes.

The statistical checks compare the generator with independent computations: the family law
written out with the math module, empirical frequencies against the analytic posterior, and
Proposition 1's regimes computed from the DESIGN formulas (not from the gate).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from repo_paths import REPO_ROOT

from amv_calib import ConfigError
from amv_calib.claims._ingest import load_claims
from amv_calib.cli import main
from amv_calib.datasets._synth import (
    CLAIM_COLUMNS,
    FAMILIES,
    family_posterior,
    family_probability,
    synth_claims,
    synth_episodes,
    true_probability,
    write_claims,
    write_episodes,
)
from amv_calib.settings import DEFAULT_SEED

SAMPLE = REPO_ROOT / "data" / "sample"
FEATURES = ["recency_hours", "source_trust_score", "model_confidence", "contradiction_flag"]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def synth_big() -> pd.DataFrame:
    return synth_claims(200_000, seed=DEFAULT_SEED)


# -- determinism ---------------------------------------------------------------------------


@pytest.mark.parametrize("ending", ["csv", "parquet", "jsonl"])
def test_same_seed_same_bytes(tmp_path: Path, ending: str) -> None:
    a = write_claims(synth_claims(500, seed=3), tmp_path / f"a.{ending}")
    b = write_claims(synth_claims(500, seed=3), tmp_path / f"b.{ending}")
    c = write_claims(synth_claims(500, seed=4), tmp_path / f"c.{ending}")
    assert _sha(a) == _sha(b) != _sha(c)


def test_same_seed_same_episode_bytes(tmp_path: Path) -> None:
    a = write_episodes(synth_episodes(200, seed=3), tmp_path / "a.jsonl")
    b = write_episodes(synth_episodes(200, seed=3), tmp_path / "b.jsonl")
    c = write_episodes(synth_episodes(200, seed=4), tmp_path / "c.jsonl")
    assert _sha(a) == _sha(b) != _sha(c)


@pytest.mark.parametrize(("kind", "name"), [("claims", "claims.csv"),
                                            ("episodes", "episodes.jsonl")])
def test_sample_files_regenerate_byte_identical(
    tmp_path: Path, kind: str, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The committed data/sample files are exactly what the documented command writes."""
    out = tmp_path / name
    assert main(["synth", kind, "--seed", str(DEFAULT_SEED), "--out", str(out), "--json"]) == 0
    line = json.loads(capsys.readouterr().out)
    assert line["sha256"] == _sha(out)
    assert _sha(out) == _sha(SAMPLE / name), f"data/sample/{name} drifted; regenerate it"


def test_cli_rejects_bad_arguments(tmp_path: Path) -> None:
    assert main(["synth", "claims", "--out", str(tmp_path / "x.txt")]) == 2
    assert main(["synth", "episodes", "--out", str(tmp_path / "x.csv")]) == 2
    assert main(["synth", "claims", "--n", "-1", "--out", str(tmp_path / "x.csv")]) == 2
    with pytest.raises(ConfigError, match="seed"):
        synth_claims(10, seed=-1)


def test_cli_synth_claims_kinds_writes_the_kind_world(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "kinds.csv"
    assert main(["synth", "claims", "--kinds", "--n", "3000", "--seed", "5",
                 "--out", str(out)]) == 0
    written = pd.read_csv(out)
    want = synth_claims(3000, seed=5, kinds=True)
    assert set(written["memory_kind"]) == set(want["memory_kind"])
    assert written["memory_kind"].tolist() == want["memory_kind"].tolist()
    capsys.readouterr()
    assert main(["synth", "episodes", "--kinds", "--out", str(tmp_path / "e.jsonl")]) == 2
    assert "--kinds is for synth claims" in capsys.readouterr().err


# -- claims ----------------------------------------------------------------------------------


def test_claims_schema_and_ingest_round_trip(tmp_path: Path) -> None:
    frame = synth_claims(2000, seed=11)
    assert tuple(frame.columns) == CLAIM_COLUMNS
    assert str(frame["timestamp"].dtype) == "datetime64[us, UTC]"
    assert frame["timestamp"].is_monotonic_increasing
    assert frame["claim_id"].is_unique
    for ending in ("csv", "parquet", "jsonl"):
        claims, rejects = load_claims(write_claims(frame, tmp_path / f"s.{ending}"))
        assert rejects.empty and len(claims) == len(frame)
        np.testing.assert_array_equal(claims["p_true"].to_numpy(), frame["p_true"].to_numpy())
        assert (claims["timestamp"].to_numpy() == frame["timestamp"].to_numpy()).all()


def test_label_rate_families_and_tools(synth_big: pd.DataFrame) -> None:
    rate = synth_big["violated"].mean()
    assert 0.10 <= rate <= 0.35
    assert set(synth_big["family"]) == {f.name for f in FAMILIES}
    tools = {f.name: set(f.tools) for f in FAMILIES}
    pairs = synth_big[["family", "tool_name"]].drop_duplicates().itertuples(index=False)
    assert all(tool in tools[fam] for fam, tool in pairs)
    by_family = synth_big.groupby("family")["violated"].mean()
    assert by_family.max() - by_family.min() > 0.1  # the families really differ


def test_family_law_by_hand() -> None:
    """The law of one family written out independently with the math module."""
    for f, (h, t, c, k) in itertools.product(
        FAMILIES, [(30.0, 0.9, 0.8, 1), (2000.0, 0.3, 0.99, 0), (0.5, 0.99, 0.2, 0)]
    ):
        changed = f.pi * (1 - math.exp(-((h / f.scale) ** f.shape)))
        wrong = f.wrong * (1 - t) ** f.trust_power
        prior = 1 - (1 - changed) * (1 - wrong)
        z = (math.log(prior / (1 - prior)) + f.conf_low * -math.log(c)
             - f.conf_high * -math.log(1 - c) + k * (f.flag_base + f.flag_trust * (1 - t)))
        expected = 1 / (1 + math.exp(-z))
        got = family_probability(f.name, [h], [t], [c], [k])[0]
        assert got == pytest.approx(expected, rel=1e-12)


def test_laws_are_not_the_seed_formula() -> None:
    """Hazard recency (a Weibull CDF, not a ramp), over-confidence and an interaction."""
    f = FAMILIES[0]
    hours = np.array([1.0, 100.0, 1000.0, 10000.0, 50000.0])
    p = family_probability(f.name, hours, [0.8] * 5, [0.9] * 5, [0] * 5)
    assert np.all(np.diff(p) > 0) and p[-1] - p[-2] > 0  # still rising beyond 720 h
    # over-confidence: a confidence of 0.999 still leaves a violation rate above 0.1%
    assert family_probability(f.name, [5000.0], [0.8], [0.999], [0])[0] > 0.01
    # the contradiction flag matters more for a low-trust source
    lift = [family_probability(f.name, [500.0], [t], [0.8], [1])[0]
            / family_probability(f.name, [500.0], [t], [0.8], [0])[0] for t in (0.2, 0.95)]
    assert lift[0] > lift[1]


def test_posterior_matches_family_frequencies(synth_big: pd.DataFrame) -> None:
    """E[P(g | x)] equals the share of g, and rows with P(g | x) ~ q are of family g ~ q."""
    post = family_posterior(*(synth_big[c].to_numpy() for c in FEATURES))
    np.testing.assert_allclose(post.sum(axis=1), 1.0, rtol=1e-12)
    names = [f.name for f in FAMILIES]
    share = synth_big["family"].value_counts(normalize=True).reindex(names).to_numpy()
    np.testing.assert_allclose(post.mean(axis=0), share, atol=0.004)
    for g in range(len(FAMILIES)):
        is_g = (synth_big["family"] == names[g]).to_numpy()
        bins = np.digitize(post[:, g], [0.2, 0.4, 0.6, 0.8])
        for b in range(5):
            sel = bins == b
            if sel.sum() < 2000:
                continue
            se = math.sqrt(0.25 / sel.sum())
            assert abs(is_g[sel].mean() - post[sel, g].mean()) < 4 * se + 0.01


def test_p_true_is_calibrated_for_the_label(synth_big: pd.DataFrame) -> None:
    """E[violated | p_true] == p_true: binned frequencies within sampling error."""
    p = synth_big["p_true"].to_numpy()
    y = synth_big["violated"].to_numpy()
    edges = np.quantile(p, np.linspace(0, 1, 21))
    bins = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, 19)
    for b in range(20):
        sel = bins == b
        pm = p[sel].mean()
        se = math.sqrt(pm * (1 - pm) / sel.sum())
        assert abs(y[sel].mean() - pm) < 4.5 * se
    again = true_probability(*(synth_big[c].to_numpy() for c in FEATURES))
    np.testing.assert_allclose(again, p, atol=5e-7)  # the column is the function, rounded


@pytest.mark.slow
def test_flexible_reference_is_close_to_the_oracle(synth_big: pd.DataFrame) -> None:
    """A gradient-boosted model on the four features gets within ~1% of p_true's log loss,
    while the seed's linear feature map (Platt) stays clearly worse: calibrators differ."""
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import log_loss

    x = synth_big[FEATURES].to_numpy(dtype=float)
    y = synth_big["violated"].to_numpy()
    p_true = synth_big["p_true"].to_numpy()
    order = np.random.default_rng(0).permutation(len(y))
    train, test = order[:150_000], order[150_000:]
    hgb = HistGradientBoostingClassifier(random_state=0).fit(x[train], y[train])
    ll_hgb = log_loss(y[test], hgb.predict_proba(x[test])[:, 1])
    ll_oracle = log_loss(y[test], p_true[test])
    conf = np.clip(x[:, 2], 1e-5, 1 - 1e-5)
    seed_map = np.c_[np.log(conf / (1 - conf)), np.minimum(1, x[:, 0] / 720), x[:, 1], x[:, 3]]
    platt = LogisticRegression(C=1e6, max_iter=1000).fit(seed_map[train], y[train])
    ll_platt = log_loss(y[test], platt.predict_proba(seed_map[test])[:, 1])
    gap = (ll_hgb - ll_oracle) / ll_oracle
    print(f"oracle {ll_oracle:.5f} hgb {ll_hgb:.5f} gap {100 * gap:.2f}% platt {ll_platt:.5f}")
    assert -0.005 < gap < 0.015
    assert (ll_platt - ll_oracle) / ll_oracle > 0.03


# -- episodes --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def synth_sample_episodes() -> list[dict[str, Any]]:
    with open(SAMPLE / "episodes.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def test_episode_format(synth_sample_episodes: list[dict[str, Any]]) -> None:
    eps = synth_sample_episodes
    assert len(eps) == 3520
    assert len({e["instance_id"] for e in eps}) == 3520
    tools = {f.name: set(f.tools) for f in FAMILIES}
    some_unverified = some_multi = False
    for e in eps:
        assert set(e) == {"instance_id", "family", "tool_name", "impact_cost_theta",
                          "abstention_cost_kappa", "premises", "verifiers"}
        assert e["tool_name"] in tools[e["family"]]
        assert e["impact_cost_theta"] > 0 and e["abstention_cost_kappa"] > 0
        assert 1 <= len(e["premises"]) <= 4 and 1 <= len(e["verifiers"]) <= 4
        ids = [p["id"] for p in e["premises"]]
        assert len(set(ids)) == len(ids)
        for p in e["premises"]:
            assert set(p) == {"id", "claim_id", *FEATURES, "violated", "p_true"}
            assert p["recency_hours"] >= 0 and 0 <= p["source_trust_score"] <= 1
            assert 0 <= p["model_confidence"] <= 1 and 0 < p["p_true"] < 1
            assert isinstance(p["contradiction_flag"], bool) and isinstance(p["violated"], bool)
        covered: set[str] = set()
        for v in e["verifiers"]:
            assert 0.5 < v["symmetric_reliability"] <= 1 and v["execution_cost"] >= 0
            assert v["resolves_premise_ids"] and set(v["resolves_premise_ids"]) <= set(ids)
            covered |= set(v["resolves_premise_ids"])
            some_multi |= len(v["resolves_premise_ids"]) > 1
        some_unverified |= covered != set(ids)
    assert some_unverified and some_multi
    assert {e["family"] for e in eps} == {f.name for f in FAMILIES}


def test_episodes_load_in_replay() -> None:
    from amv_calib.tuning._episodes import read_episodes

    assert len(read_episodes(SAMPLE / "episodes.jsonl")) == 3520


def _v_stop(ps: list[float], theta: float, kappa: float, delta: float, eps: float
            ) -> tuple[float, bool]:
    p_any = 1 - math.prod(1 - p for p in ps)
    ok = theta * p_any <= min(delta, kappa) and p_any <= eps
    return (theta * p_any if ok else kappa), ok


def _regime(e: dict[str, Any], *, delta: float, eps: float) -> str:
    """One-step decision of DESIGN section 2 with p = p_true (signals per premise)."""
    ps = {p["id"]: p["p_true"] for p in e["premises"]}
    theta, kappa = e["impact_cost_theta"], e["abstention_cost_kappa"]
    v0, ok = _v_stop(list(ps.values()), theta, kappa, delta, eps)
    best = -math.inf
    for v in e["verifiers"]:
        r = v["symmetric_reliability"]
        outcomes: list[tuple[dict[str, float], float]] = [({}, 1.0)]
        for pid in v["resolves_premise_ids"]:
            p = ps[pid]
            confirm = (1 - p) * r + p * (1 - r)
            post = (p * (1 - r) / confirm, p * r / (1 - confirm) if confirm < 1 else p)
            outcomes = [(d | {pid: q}, w * pw) for d, w in outcomes
                        for q, pw in zip(post, (confirm, 1 - confirm), strict=True)]
        expected = sum(w * _v_stop([d.get(k, ps[k]) for k in ps], theta, kappa, delta, eps)[0]
                       for d, w in outcomes)
        best = max(best, v0 - expected - v["execution_cost"])
    if best > 0:
        return "VERIFY"
    return "PROCEED" if ok else "ABSTAIN"


def test_episodes_span_the_three_regimes(synth_sample_episodes: list[dict[str, Any]]) -> None:
    """Proposition 1's setting (screening by kappa only): reads mostly PROCEED, irreversible
    actions VERIFY or ABSTAIN, and every regime is well represented; with the gate's
    default screening (delta=10, epsilon=0.05) every regime still occurs."""
    eps = synth_sample_episodes
    prop1 = [_regime(e, delta=math.inf, eps=1.0) for e in eps]
    counts = {r: prop1.count(r) / len(eps) for r in ("PROCEED", "VERIFY", "ABSTAIN")}
    assert all(share > 0.15 for share in counts.values()), counts
    reads = [r for r, e in zip(prop1, eps, strict=True) if e["impact_cost_theta"] < 1.5]
    assert reads.count("PROCEED") / len(reads) > 0.8
    big = [r for r, e in zip(prop1, eps, strict=True) if e["impact_cost_theta"] > 40]
    assert big.count("PROCEED") / len(big) < 0.05
    default = [_regime(e, delta=10.0, eps=0.05) for e in eps]
    assert all(default.count(r) >= 0.01 * len(eps) for r in ("PROCEED", "VERIFY", "ABSTAIN"))
