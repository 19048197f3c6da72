"""``certify``: Learn-then-Test of a gate on the episodes its thresholds never saw.

The command certifies an artifact (its calibrator, thresholds and tuning record); a step the
tune step's calibrator, thresholds and record. Either way every episode the record covers is
excluded, and certifying without one needs ``assume_unseen``. ``test_fraction`` sets unseen
episodes aside for a held-out table only where some given episode tuned the thresholds (the
pool tune and certify share): otherwise every episode calibrates.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amv_calib.exceptions import ConfigError
from amv_calib.settings import CertifyOptions
from amv_calib.stages._stage import Call, Input, Stage
from amv_calib.stages._tables import gate_from, replay_table

__all__ = ["CERTIFY", "Certified"]

log = logging.getLogger(__name__)


@dataclass
class Certified:
    """A :class:`~amv_calib.tuning.CertificationResult`, the files written and the name of
    the artifact certified (None: a step's files)."""

    result: Any
    files: dict[str, Any] = field(default_factory=dict)
    name: str | None = None
    out: Path | None = None


def _sources(call: Call) -> tuple[Any, Any, Any, str | None]:
    """``(calibrator, thresholds, tuning record or None, artifact name or None)``."""
    from amv_calib.contract import PortableCalibrator, load_artifact, read_json_object
    from amv_calib.tuning import artifact_record, read_tuning_record

    p, opts = call.inputs, call.options
    if p["artifact"] is not None:
        art = load_artifact(str(p["artifact"]))
        seen = artifact_record(art)
        if seen is None and not opts.assume_unseen:
            raise ConfigError(
                f"{art.path}: carries no tuning record, so nothing tells which episodes shaped "
                f"its thresholds; certify only on episodes you know it never saw, and say so "
                f"with --assume-unseen")
        return art.calibrator, art.thresholds, seen, art.name
    if p["tuning"] is None and not opts.assume_unseen:
        raise ConfigError(
            f"{call.where()}give tuning (the tune step's record, '@tune.tuning') so that "
            f"certification excludes the episodes the thresholds were tuned on, or set "
            f"assume_unseen = true when no episode given touched them")
    if p["calibrator"] is None or p["thresholds"] is None:
        raise ConfigError(f"{call.where()}give calibrator and thresholds, or an artifact")
    calibrator = PortableCalibrator.from_dict(
        read_json_object(p["calibrator"], what="calibrator"))
    thresholds = read_json_object(p["thresholds"], what="thresholds")
    seen = None if p["tuning"] is None else read_tuning_record(p["tuning"])
    return calibrator, thresholds, seen, None


def _run(call: Call) -> Certified:
    from amv_calib.tuning import certify_episodes, read_episodes, write_certification

    opts = call.options
    calibrator, thresholds, seen, name = _sources(call)
    episodes = read_episodes(call.inputs["episodes"])
    test_fraction = opts.test_fraction
    if test_fraction > 0 and (seen is None or not seen.contains(episodes.instance_id).any()):
        # Episodes of the user's own, none of which tuned the thresholds, are a calibration
        # set: every one of them certifies. Setting some aside is for the shared pool that
        # tune and certify split (the demo's held-out table).
        log.info("%stest_fraction=%g not applied: no episode given tuned the thresholds, so "
                 "every one calibrates (no held-out table)", call.where(), test_fraction)
        test_fraction = 0.0
    result = certify_episodes(episodes, calibrator, thresholds, seen=seen, alpha=opts.alpha,
                              delta=opts.delta, seed=call.seed, test_fraction=test_fraction)
    cert = result.certificate
    log.info("%scertified on %d calibration episodes of %d (%d excluded: they shaped the "
             "thresholds; %d set aside for the held-out table); alpha=%g, delta=%g",
             call.where(), cert.n, len(episodes), int(result.excluded.sum()),
             int(result.test.sum()), opts.alpha, opts.delta)
    done = Certified(result, name=name, out=call.out)
    if call.out is None:
        return done
    done.files = write_certification(result, call.out)
    replay = None
    if cert.thresholds is not None and result.test.any():
        replay = replay_table(episodes.subset(result.test),
                              gate=gate_from(cert.thresholds, calibrator),
                              calibrator=calibrator, seed=call.seed, out_dir=call.out,
                              certificate=cert.to_dict())
        done.files["replay_table"] = str(call.out / "replay.md")
    if cert.thresholds is not None:
        call.tracker.log_certification(cert, files=done.files, replay=replay)
    return done


def _check(c: Certified) -> None:
    from amv_calib.tuning import require_certified

    require_certified(c.result.certificate)  # exit 2, saying what the data support


def _summary(c: Certified) -> list[str]:
    from amv_calib.tuning import describe_certificate

    lines = list(describe_certificate(c.result.certificate.to_dict()))
    if c.files and c.out is not None and c.result.certificate.thresholds is not None:
        f = c.files
        lines.append(f"wrote {', '.join(sorted(Path(p).name for p in f.values()))} to "
                     f"{c.out.resolve()}; export them with\n  amv-calib export --calibrator "
                     f"{f['calibrator']} --thresholds {f['thresholds']} --certificate "
                     f"{f['certificate']} --name {c.name}")
    return lines


def _outputs(c: Certified) -> dict[str, Any]:
    cert = c.result.certificate
    return {"dir": str(c.out), **{k: str(v) for k, v in c.files.items()},
            "harm_price": (cert.thresholds or {}).get("harm_price", 0.0),
            "observed_upper_bound": cert.upper_bound, "calibration_episodes": cert.n,
            "excluded_episodes": int(c.result.excluded.sum())}


_FILES = ("the command certifies an artifact: its calibrator, thresholds and tuning record; "
          "a step the tune step's")
CERTIFY = Stage(
    name="certify",
    help="certify an artifact's gate: Gate Harmful <= alpha with probability >= 1-delta",
    description="Learn-then-Test on the EPISODES the version never saw: every episode its "
                "tuning record covers (the tuning split, and the calibration set of the "
                "certificate that chose its harm price) is excluded, every other one "
                "calibrates. The version's thresholds with the harm price raised step "
                "by step, safest first, are each tested for harm rate > alpha with an "
                "exact binomial p-value and walked by fixed-sequence testing at level "
                "delta; the certified configuration of lowest loss is chosen. --out "
                "writes what `export` needs: calibrator.json, thresholds.json, "
                "certificate.json and tuning.json, and frontier.png. Exit 2 when too few "
                "unseen episodes remain or nothing is certified, saying which alpha they "
                "support.",
    inputs={
        "artifact": Input(help="models/NAME/vN or models/NAME@ALIAS", positional=True,
                          path=True, metavar="ARTIFACT", step=False, why=_FILES),
        "episodes": Input(help="episodes JSONL file", required=True, path=True,
                          positional=True, metavar="EPISODES"),
        "calibrator": Input(help="the calibrator.json certified", path=True, cli=False,
                            required=True,
                            why=_FILES),
        "thresholds": Input(help="the thresholds.json certified", path=True, cli=False,
                            required=True,
                            why=_FILES),
        "tuning": Input(help="the tune step's record: its episodes are excluded", path=True,
                        cli=False, why=_FILES),
    },
    options=CertifyOptions,
    out=Input(help="write calibrator.json, thresholds.json, certificate.json, tuning.json "
              "(with tuning-episodes.u64) and frontier.png here (default: print only)",
              metavar="DIR"),
    shared={"seed": "answer stream of the replays"},
    run=_run,
    check=_check,
    summary=_summary,
    to_json=lambda c: c.result.certificate.to_dict(),
    outputs=_outputs,
    json_help="print the certificate as JSON",
)
