"""Replay: episode loading, the answer stream (CRN), baseline policies and metrics by hand."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from amv_calib import DataContractError
from amv_calib.contract._features import FeatureMap, PortableCalibrator, Term
from amv_calib.tuning._episodes import episode_set, load_episodes, read_episodes
from amv_calib.tuning._replay import METRICS, replay, replay_many
from amv_calib.tuning._stream import answer_uniform, stream_uniform


def _premise(pid: str, *, violated: bool, conf: float = 0.9) -> dict[str, Any]:
    return {"id": pid, "claim_id": f"c-{pid}", "recency_hours": 10.0,
            "source_trust_score": 0.5, "model_confidence": conf,
            "contradiction_flag": False, "violated": violated, "p_true": 0.1}


def _verifier(vid: str, ids: list[str], cost: float, r: float = 1.0) -> dict[str, Any]:
    return {"id": vid, "resolves_premise_ids": ids, "execution_cost": cost,
            "symmetric_reliability": r}


def _instance(iid: str, family: str, theta: float, kappa: float,
              premises: list[dict[str, Any]], verifiers: list[dict[str, Any]]) -> dict[str, Any]:
    return {"instance_id": iid, "family": family, "tool_name": "transfer",
            "impact_cost_theta": theta, "abstention_cost_kappa": kappa,
            "premises": premises, "verifiers": verifiers}


# Four instances worked by hand (perfect verifiers, so the answers are the truth):
# A (f1): a1 valid (p=.01), a2 violated (p=.5); vA1 [a1] 0.5, vA2 [a2] 0.2, vA3 [a1,a2] 2.0
# B (f1): b1 valid (p=.1); vB1 [b1] 0.3
# C (f2): c1 valid (p=.02), c2 valid (p=.3); vC1 [c1,c2] 1.0
# D (f2): d1 violated (p=.01); no verifier
HAND = [
    _instance("A", "f1", 10.0, 1.0,
              [_premise("a1", violated=False, conf=0.99), _premise("a2", violated=True, conf=0.5)],
              [_verifier("vA1", ["a1"], 0.5), _verifier("vA2", ["a2"], 0.2),
               _verifier("vA3", ["a1", "a2"], 2.0)]),
    _instance("B", "f1", 5.0, 2.0, [_premise("b1", violated=False, conf=0.9)],
              [_verifier("vB1", ["b1"], 0.3)]),
    _instance("C", "f2", 20.0, 3.0,
              [_premise("c1", violated=False, conf=0.98), _premise("c2", violated=False, conf=0.7)],
              [_verifier("vC1", ["c1", "c2"], 1.0)]),
    _instance("D", "f2", 4.0, 1.0, [_premise("d1", violated=True, conf=0.99)], []),
]

#: p = sigmoid(-logit(confidence)) = 1 - confidence.
ONE_MINUS_CONF = PortableCalibrator(
    kind="linear",
    feature_map=FeatureMap((Term(column="model_confidence", transform="logit"),)),
    intercept=0.0,
    coef=(-1.0,),
)


@pytest.fixture(scope="module")
def hand() -> Any:
    return episode_set(HAND)


def _values(res: Any) -> dict[str, float]:
    return {k: res.overall[k].value for k in METRICS}


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("always-proceed", {"gate_harmful": 0.5, "verification_cost": 0.0, "queries": 0.0,
                            "proceed_coverage": 1.0, "abstention_rate": 0.0,
                            "total_loss": (10 + 0 + 0 + 4) / 4}),
        # A: vA1 + vA2 (0.7), a2 refuted -> abstain; B: vB1 (0.3) proceed; C: vC1 once (1.0)
        # proceed; D: no verifier for d1 -> abstain.
        ("always-verify", {"gate_harmful": 0.0, "verification_cost": (0.7 + 0.3 + 1.0) / 4,
                           "queries": (2 + 1 + 1) / 4, "proceed_coverage": 0.5,
                           "abstention_rate": 0.5,
                           "total_loss": ((1 + 0.7) + 0.3 + 1.0 + 1) / 4}),
        ("oracle", {"gate_harmful": 0.0, "verification_cost": 0.0, "queries": 0.0,
                    "proceed_coverage": 0.5, "abstention_rate": 0.5, "total_loss": 2 / 4}),
    ],
    ids=["always-proceed", "always-verify", "oracle"],
)
def test_baseline_metrics_by_hand(hand: Any, policy: str, expected: dict[str, float]) -> None:
    res = replay(hand, policy, seed=1, n_boot=0)
    assert _values(res) == pytest.approx(expected, abs=1e-12)
    assert res.n == 4


def test_static_by_hand(hand: Any) -> None:
    # tau = 0.2 flags a2 (p=.5) and c2 (p=.3): A calls vA2 (0.2), refuted -> abstain;
    # B nothing -> proceed; C calls vC1 (1.0) -> proceed; D unflagged -> harmful proceed.
    res = replay(hand, "static", seed=1, calibrator=ONE_MINUS_CONF, tau=0.2, n_boot=0)
    assert _values(res) == pytest.approx(
        {"gate_harmful": 0.25, "verification_cost": 1.2 / 4, "queries": 2 / 4,
         "proceed_coverage": 0.75, "abstention_rate": 0.25,
         "total_loss": ((1 + 0.2) + 0 + 1.0 + 4) / 4},
        abs=1e-12,
    )
    np.testing.assert_array_equal(res.outcomes.queries, [1, 0, 1, 0])


def test_per_family_and_lambda(hand: Any) -> None:
    res = replay(hand, "always-verify", seed=1, n_boot=0, lambda_eval=2.0)
    assert res.family_n == {"f1": 2, "f2": 2}
    f1 = {k: v.value for k, v in res.by_family["f1"].items()}
    assert f1["total_loss"] == pytest.approx(((1 + 2 * 0.7) + 2 * 0.3) / 2)
    assert f1["queries"] == pytest.approx(1.5)
    f2 = {k: v.value for k, v in res.by_family["f2"].items()}
    assert f2["proceed_coverage"] == pytest.approx(0.5)
    assert f2["total_loss"] == pytest.approx((2 * 1.0 + 1) / 2)


def test_bootstrap_intervals(hand: Any) -> None:
    res = replay(hand, "always-proceed", seed=3, n_boot=400)
    harm = res.overall["gate_harmful"]
    assert harm.lo <= harm.value <= harm.hi
    assert 0.0 <= harm.lo < 0.5 < harm.hi <= 1.0
    again = replay(hand, "always-proceed", seed=3, n_boot=400)
    assert again.to_dict() == res.to_dict()


def test_stream_vectorised_equals_scalar() -> None:
    es = episode_set(HAND)
    i, v, j = 0, 2, 1  # instance A, verifier vA3, premise a2
    key = es.stream_key[i, v, j]
    for seed in (0, 1, 2**63 + 5):
        for call in (0, 1, 7):
            u = stream_uniform(np.array([key]), seed, call)[0]
            assert u == answer_uniform(seed, "A", "vA3", "a2", call)
            assert 0.0 <= u < 1.0


def test_stream_is_uniform() -> None:
    # 20,000 keys: mean and a coarse histogram of u against U(0, 1).
    keys = np.arange(20_000, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    u = stream_uniform(keys, 42, 0)
    assert abs(u.mean() - 0.5) < 0.01
    counts = np.histogram(u, bins=10, range=(0.0, 1.0))[0]
    assert counts.min() > 1800 and counts.max() < 2200
    # different call indices give (nearly) independent numbers
    u1 = stream_uniform(keys, 42, 1)
    assert abs(np.corrcoef(u, u1)[0, 1]) < 0.03


NOISY = [
    _instance(f"n{i}", "noisy", 10.0, 1.0,
              [_premise("x", violated=i % 3 == 0, conf=0.6)],
              [_verifier("cheap", ["x"], 0.1, r=0.7), _verifier("dear", ["x"], 1.0, r=0.9)])
    for i in range(300)
]


def test_common_random_numbers_between_baselines() -> None:
    es = episode_set(NOISY)
    # Always Verify and Static (every premise flagged) both call "cheap" once on "x":
    # with CRN they proceed on exactly the same instances, whatever the seed.
    for seed in (5, 6):
        a = replay(es, "always-verify", seed=seed, n_boot=0)
        s = replay(es, "static", seed=seed, calibrator=ONE_MINUS_CONF, tau=-1.0, n_boot=0)
        np.testing.assert_array_equal(a.outcomes.proceed, s.outcomes.proceed)
    # and each decision is the stream's answer: proceed iff the answer confirms
    a = replay(es, "always-verify", seed=5, n_boot=0)
    for i, rec in enumerate(NOISY):
        u = answer_uniform(5, rec["instance_id"], "cheap", "x", 0)
        violated = rec["premises"][0]["violated"]
        confirm = (u < 0.7) != violated
        assert a.outcomes.proceed[i] == confirm
    # an answer with reliability 0.7 is wrong about 30% of the time
    wrong = a.outcomes.proceed == es.any_violated
    assert 0.22 < wrong.mean() < 0.38


def test_seeded_reproducibility_and_seed_matters() -> None:
    es = episode_set(NOISY)
    a = replay(es, "always-verify", seed=11, n_boot=50)
    b = replay(es, "always-verify", seed=11, n_boot=50)
    assert a.to_dict() == b.to_dict()
    np.testing.assert_array_equal(a.outcomes.proceed, b.outcomes.proceed)
    c = replay(es, "always-verify", seed=12, n_boot=0)
    assert not np.array_equal(a.outcomes.proceed, c.outcomes.proceed)


def test_file_order_does_not_change_answers(tmp_path: Path) -> None:
    # The stream is keyed by ids, not positions: shuffling the file permutes the outcomes.
    es = episode_set(NOISY)
    perm = list(reversed(NOISY))
    es2 = episode_set(perm)
    a = replay(es, "always-verify", seed=9, n_boot=0).outcomes.proceed
    b = replay(es2, "always-verify", seed=9, n_boot=0).outcomes.proceed
    np.testing.assert_array_equal(a, b[::-1])


def test_load_jsonl_roundtrip(tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in HAND) + "\n\n", encoding="utf-8")
    es = read_episodes(path)
    assert es.instance_id == ("A", "B", "C", "D")
    assert es.premise_mask.shape == (4, 2) and es.resolves.shape == (4, 3, 2)
    assert es.n_premises == 6
    assert es.resolves[0, 2].tolist() == [True, True]
    assert not es.verifier_mask[3].any()
    res = replay(str(path), "oracle", seed=0, n_boot=0)
    assert res.overall["abstention_rate"].value == 0.5


def _bad(mutate: Any) -> list[dict[str, Any]]:
    rows = json.loads(json.dumps(HAND))
    mutate(rows)
    return rows


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda r: r[1].update(impact_cost_theta=0), r"row 2: impact_cost_theta=0"),
        (lambda r: r[2].update(abstention_cost_kappa="x"), r"row 3: abstention_cost_kappa"),
        (lambda r: r[0]["verifiers"][1].update(symmetric_reliability=0.4),
         r"row 1: verifiers\[1\]\.symmetric_reliability=0\.4"),
        (lambda r: r[0]["verifiers"][0].update(execution_cost=-1),
         r"row 1: verifiers\[0\]\.execution_cost=-1"),
        (lambda r: r[1]["verifiers"][0].update(resolves_premise_ids=["zz"]),
         r"row 2: .*unknown premise 'zz'"),
        (lambda r: r[3].update(instance_id="A"), r"row 4: instance_id='A' repeats row 1"),
        (lambda r: r[0]["premises"][0].update(model_confidence=1.5),
         r"row 1: premises\[0\]\.model_confidence=1\.5"),
        (lambda r: r[0]["premises"][1].pop("violated"),
         r"row 1: premises\[1\] lacks field 'violated'"),
        (lambda r: r[2].update(premises=[]), r"row 3: premises=\[\]"),
        (lambda r: r[0].update(verifiers="v1"), r"row 1: verifiers='v1' must be a list"),
        # the premises are read (and refused) before the verifiers
        (lambda r: r[0].update(verifiers="v1", premises=[1]),
         r"row 1: premises\[0\] must be an object"),
        (lambda r: r[1]["verifiers"][0].update(id="v1") or r[1]["verifiers"].append(
            dict(r[1]["verifiers"][0])), r"row 2: verifiers\[1\]\.id='v1' appears twice"),
    ],
    ids=["theta", "kappa-type", "reliability", "cost", "unknown-premise", "dup-instance",
         "confidence", "no-truth", "no-premises", "verifiers-type", "premises-first",
         "dup-verifier"],
)
def test_contract_errors(mutate: Any, match: str) -> None:
    with pytest.raises(DataContractError, match=match):
        episode_set(_bad(mutate))


def test_bad_json_line(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    path.write_text(json.dumps(HAND[0]) + "\n{oops\n", encoding="utf-8")
    with pytest.raises(DataContractError, match="row 2: not valid JSON"):
        load_episodes(path)


def test_camel_case_premise_features() -> None:
    rec = json.loads(json.dumps(HAND[1]))
    pr = rec["premises"][0]
    pr["modelConfidence"] = pr.pop("model_confidence")
    pr["recencyHours"] = pr.pop("recency_hours")
    es = episode_set([rec])
    assert es.features[0, 0].tolist() == [10.0, 0.5, 0.9, 0.0]


def test_replay_many_passes_its_options_to_replay(hand: Any) -> None:
    options: dict[str, Any] = dict(calibrator=ONE_MINUS_CONF, tau=0.3, lambda_eval=2.0,
                                   n_boot=50, ci=0.8)
    many = replay_many(hand, ["static", "always-verify"], seed=5, **options)
    for policy, got in many.items():
        want = replay(hand, policy, seed=5, **options)
        assert got.summary() == want.summary()
        assert got.config == want.config
        np.testing.assert_array_equal(got.outcomes.proceed, want.outcomes.proceed)
    assert many["static"].config["tau"] == 0.3


def test_replay_many_shares_episodes(hand: Any) -> None:
    out = replay_many(hand, ["always-proceed", "oracle"], seed=0, n_boot=0)
    assert list(out) == ["always-proceed", "oracle"]
    assert math.isclose(out["oracle"].summary()["total_loss"], 0.5)
    assert out["always-proceed"].summary()["n"] == 4


# -- the command line ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cli_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from amv_calib.artifacts._export import export_artifact
    from amv_calib.datasets._synth import synth_episodes

    root = tmp_path_factory.mktemp("cli")
    path = root / "episodes.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in synth_episodes(150, seed=4)) + "\n")
    res = export_artifact(calibrator=ONE_MINUS_CONF, name="m", models_dir=root / "models",
                          include_joblib=False)
    return {"episodes": path, "artifact": Path(res.path)}


def test_cli_replay_json_matches_api(cli_files: dict[str, Path],
                                     capsys: pytest.CaptureFixture[str]) -> None:
    from amv_calib.cli import main

    code = main(["replay", str(cli_files["episodes"]), "--policy", "all", "--json",
                 "--artifact", str(cli_files["artifact"]), "--seed", "8", "--n-boot", "0"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out) == ["always-proceed", "always-verify", "static", "seed", "myopic",
                         "lookahead", "oracle"]
    assert set(out["seed"]) == {*METRICS, "n"} and out["seed"]["n"] == 150
    api = replay(str(cli_files["episodes"]), "always-verify", seed=8, n_boot=0).summary()
    assert out["always-verify"] == pytest.approx(api)


def test_cli_replay_table(cli_files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    from amv_calib.cli import main

    code = main(["replay", str(cli_files["episodes"]), "--policy", "always-proceed",
                 "--policy", "oracle", "--n-boot", "50", "--by-family"])
    assert code == 0
    out = capsys.readouterr().out
    assert "Gate Harmful %" in out and "Always Proceed" in out and "Oracle" in out
    assert "family " in out


def test_cli_tune_writes_thresholds(cli_files: dict[str, Path], tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    from amv_calib.cli import main

    code = main(["tune", str(cli_files["episodes"]), "--calibrator", "seed", "--trials", "3",
                 "--storage", str(tmp_path / "j.log"), "--target-harmful", "0.5",
                 "--planner", "myopic", "--n-boot", "0", "--out", str(tmp_path / "o")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "trial   2 (3/3) feasible   Gate Harmful" in captured.err
    assert "| best feasible: trial" in captured.err
    assert (tmp_path / "o" / "thresholds.json").is_file()
    assert "held-out split" in captured.out


@pytest.mark.parametrize("verbose", [False, True], ids=["plain", "-v"])
def test_cli_tune_progress_is_one_display(cli_files: dict[str, Path], tmp_path: Path,
                                          verbose: bool) -> None:
    # Optuna's own INFO lines ("[I ...] A new study created ...") interleaved with ours: they
    # show only with -v; an infeasible trial is marked as such
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "amv_calib", *(["-v"] if verbose else []), "tune",
         str(cli_files["episodes"]), "--calibrator", "seed", "--trials", "4", "--storage",
         str(tmp_path / "j.log"), "--target-harmful", "0.0", "--planner", "myopic",
         "--n-boot", "0"], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    trials = [line for line in done.stderr.splitlines() if line.startswith("trial ")]
    assert len(trials) == 4
    marks = [t.split()[3] for t in trials]  # "trial N (k/n) MARK ..."
    assert set(marks) <= {"feasible", "INFEASIBLE"} and "INFEASIBLE" in marks
    assert ("A new study created" in done.stderr) is verbose


def test_cli_harm_price_options(cli_files: dict[str, Path], tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    from amv_calib.cli import main

    base = ["replay", str(cli_files["episodes"]), "--policy", "lookahead", "--json",
            "--artifact", str(cli_files["artifact"]), "--seed", "8", "--n-boot", "0"]
    runs = {}
    for mu in (None, "0", "1e6"):
        assert main(base + ([] if mu is None else ["--harm-price", mu])) == 0
        runs[mu] = json.loads(capsys.readouterr().out)["lookahead"]
    assert runs["0"] == runs[None]  # the artifact predates the harm price: 0
    # priced out: it proceeds only where a perfect verifier left P_any = 0
    assert runs["1e6"]["gate_harmful"] == 0.0
    assert runs["1e6"]["proceed_coverage"] < runs[None]["proceed_coverage"]
    # tune pins it instead of searching it
    code = main(["tune", str(cli_files["episodes"]), "--calibrator", "seed", "--trials", "2",
                 "--storage", str(tmp_path / "j.log"), "--target-harmful", "1.0",
                 "--planner", "myopic", "--n-boot", "0", "--out", str(tmp_path / "o"),
                 "--harm-price", "3.5"])
    capsys.readouterr()
    assert code == 0
    assert json.loads((tmp_path / "o" / "thresholds.json").read_text())["harm_price"] == 3.5


def test_cli_replay_error_exit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from amv_calib.cli import main

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"instance_id": "x"}\n')
    assert main(["replay", str(bad), "--policy", "oracle"]) == 2
    assert "amv-calib replay: error: episodes row 1: lacks field 'family'" in \
        capsys.readouterr().err


# -- the sequential batch replay equals Gate.run with the same answers -----------------------


def _scalar_run(es: Any, rec: dict[str, Any], gate: Any, seed: int) -> tuple[bool, int, float]:
    from amv_calib.gate import CandidateAction, Premise, Verifier

    probs = es.probabilities(gate.calibrator)[es.instance_id.index(rec["instance_id"])]
    action = CandidateAction(
        action_id=rec["instance_id"], tool_name=rec["tool_name"],
        impact_cost_theta=rec["impact_cost_theta"],
        abstention_cost_kappa=rec["abstention_cost_kappa"],
        premises=tuple(Premise(id=p["id"], calibrated_violation_probability=float(probs[j]))
                       for j, p in enumerate(rec["premises"])),
    )
    verifiers = [Verifier.from_dict(v) for v in rec["verifiers"]]
    truth = {p["id"]: p["violated"] for p in rec["premises"]}
    calls: dict[str, int] = {}

    def verify(v: Any, _a: Any) -> dict[str, bool]:
        c = calls.get(v.id, 0)
        calls[v.id] = c + 1
        return {pid: (answer_uniform(seed, rec["instance_id"], v.id, pid, c)
                      < v.symmetric_reliability) != truth[pid]
                for pid in v.resolves_premise_ids}

    trace = gate.run(action, verifiers, verify)
    return trace.final.regime == "PROCEED", trace.verifications, trace.total_cost


@pytest.mark.parametrize(
    "gate_kw",
    [{"planner": "myopic"}, {"planner": "lookahead"}, {"planner": "lookahead",
                                                        "max_verifications": 1},
     {"mode": "seed", "planner": "myopic"}],
    ids=["myopic", "lookahead", "lookahead-budget1", "seed"],
)
def test_batch_replay_equals_scalar_run(gate_kw: dict[str, Any]) -> None:
    from amv_calib.datasets._synth import synth_episodes
    from amv_calib.gate import Gate
    from amv_calib.gate._batch import evaluate_batch  # noqa: F401  (the path under test)
    from amv_calib.tuning._replay import _gate_policy

    recs = synth_episodes(200, seed=21)
    es = episode_set(recs)
    gate = Gate(calibrator=ONE_MINUS_CONF, **gate_kw)
    proceed, calls, _ = _gate_policy(es, gate, es.probabilities(ONE_MINUS_CONF), 17)
    cost = (calls * es.cost).sum(axis=1)
    for i, rec in enumerate(recs):
        want = _scalar_run(es, rec, gate, 17)
        assert (bool(proceed[i]), int(calls[i].sum())) == want[:2], rec["instance_id"]
        assert cost[i] == pytest.approx(want[2], abs=1e-12)


@pytest.mark.slow
def test_bench_quick_runs(run_bench: Callable[..., dict[str, Any]]) -> None:
    res = run_bench("bench_replay")
    policies = res["replay"]["policies"]
    assert all(r["identical_to_scalar"] and r["identical_end_to_end"]
               for r in policies.values())
    # the batch replay beats the scalar loop on the same instances, same clock (quick run:
    # about 4x myopic and seed, 20x lookahead, engine only): loose for a loaded machine
    assert all(r["ratio_engine_cpu"] >= 1.5 for r in policies.values())
    assert policies["lookahead"]["ratio_engine_cpu"] >= 4
    assert res["tuning"]["workers_1"]["n_trials"] == res["tuning"]["trials"]


def test_lookahead_parallel_rows_give_the_same_replay() -> None:
    from amv_calib.datasets._synth import synth_episodes
    from amv_calib.gate import Gate
    from amv_calib.gate._compiled import PARALLEL_MIN_ROWS

    # enough rows for two threads of the compiled engine
    es = episode_set(synth_episodes(2 * PARALLEL_MIN_ROWS + 500, seed=3))
    gate = Gate(calibrator=ONE_MINUS_CONF, planner="lookahead")
    one = replay(es, "lookahead", seed=2, gate=gate, n_boot=0)
    two = replay(es, "lookahead", seed=2, gate=gate, n_boot=0, n_jobs=2)
    np.testing.assert_array_equal(one.outcomes.proceed, two.outcomes.proceed)
    np.testing.assert_array_equal(one.outcomes.calls, two.outcomes.calls)


def test_reused_verifier_draws_a_fresh_answer_per_call() -> None:
    from amv_calib.gate import Gate

    # one premise, one noisy verifier that may be called again: the replay equals Gate.run
    # with answers drawn at call indices 0, 1, 2, ...
    recs = [_instance(f"r{i}", "f", 50.0, 2.0, [_premise("x", violated=i % 4 == 0, conf=0.9)],
                      [_verifier("v", ["x"], 0.01, r=0.9)]) for i in range(60)]
    es = episode_set(recs)
    gate = Gate(calibrator=ONE_MINUS_CONF, planner="lookahead", reuse_verifiers=True,
                max_verifications=4)
    res = replay(es, "lookahead", seed=4, gate=gate, n_boot=0)
    assert res.outcomes.queries.max() > 1
    for i, rec in enumerate(recs):
        want = _scalar_run(es, rec, gate, 4)
        assert (bool(res.outcomes.proceed[i]), int(res.outcomes.queries[i])) == want[:2]


# -- the harm price through replay --------------------------------------------------------------


@pytest.mark.parametrize("policy", ["myopic", "lookahead"])
def test_zero_harm_price_replays_as_the_gate_without_one(policy: Any) -> None:
    from amv_calib.datasets._synth import synth_episodes
    from amv_calib.gate import Gate

    es = episode_set(synth_episodes(400, seed=13))
    kw = {"calibrator": ONE_MINUS_CONF, "epsilon_harm_bound": 0.2, "lambda_cost_scale": 0.5}
    want = replay(es, policy, seed=6, gate=Gate(**kw), n_boot=200)
    got = replay(es, policy, seed=6, gate=Gate(harm_price=0.0, **kw),
                 n_boot=200)
    for name in ("proceed", "harmful", "queries", "cost", "loss", "calls"):
        a, b = getattr(got.outcomes, name), getattr(want.outcomes, name)
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name
    assert got.to_dict() == want.to_dict()
    assert got.config["harm_price"] == 0.0


def test_raising_the_harm_price_never_raises_gate_harmful() -> None:
    from amv_calib.contract._features import seed_prior_calibrator
    from amv_calib.datasets._synth import synth_episodes
    from amv_calib.gate import Gate

    # Fixed thresholds, the harm price swept: Gate Harmful falls (by at most a few instances
    # of noise upwards between neighbours: a priced plan may call another verifier, whose
    # answer differs), and reaches 0 in the limit, where only a premise confirmed by a
    # perfect verifier (P_any = 0 exactly) still PROCEEDs.
    es = episode_set(synth_episodes(1500, seed=31))
    noise = 3 / len(es)
    for policy in ("myopic", "lookahead"):
        harmful, coverage = [], []
        for mu in (0.0, 0.1, 1.0, 3.0, 10.0, 30.0, 100.0, 1e3, 1e6):
            gate = Gate(calibrator=seed_prior_calibrator(), harm_price=mu, planner=policy,
                        epsilon_harm_bound=1.0, delta_loss_threshold=10.0,
                        lambda_cost_scale=0.5)
            r = replay(es, policy, seed=3, gate=gate, n_boot=0)
            harmful.append(r.overall["gate_harmful"].value)
            coverage.append(r.overall["proceed_coverage"].value)
        assert all(b <= a + noise for a, b in zip(harmful, harmful[1:], strict=False)), harmful
        assert harmful[0] > 0.05 and harmful[-1] == 0.0, harmful
        assert coverage[-1] > 0.0  # it still proceeds where nothing can be violated
