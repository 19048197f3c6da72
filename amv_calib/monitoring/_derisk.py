"""De-risking on a harm ALERT: production moves, by itself, to a safer certified gate.

The artifact's certificate holds its certified path: the same calibrator with the harm
price raised step by step, safest first (:mod:`amv_calib.tuning._certify`). Fixed-sequence
testing certified a prefix of it, every configuration of which has harm at most alpha with
probability at least ``1 - delta`` (on episodes like the calibration ones), so moving the
chosen configuration within the certified prefix keeps the certificate true: the new
version carries the same certificate with ``chosen`` moved (still bound to the same
calibrator sha256 and, now, to the thresholds chosen).

``steps`` positions safer than the chosen one, floored at the safest certified
configuration; the default (None) goes straight to the safest certified one. Always Verify
(the replay's policy that verifies every premise and PROCEEDs only on confirmations) is
not a threshold configuration the gate can run, so the floor is the safest configuration
of the path (harm price 10^6 above the tuned one: the gate then verifies or abstains
nearly always).

Moving towards safety needs no person; moving back does (``amv-calib rollback``).
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass
from typing import Any

from amv_calib.exceptions import ArtifactError, ConfigError
from amv_calib.settings import MonitorOptions

_log = logging.getLogger(__name__)
#: ``--derisk-steps``' default, from the one source of the monitor's options.
_STEPS = MonitorOptions.defaults().derisk_steps


@dataclass(frozen=True, kw_only=True)
class DeriskResult:
    """What de-risking did: the new version (None when nothing safer was certified)."""

    previous: str
    version: str | None
    position: int | None
    chosen_before: int | None
    harm_price: float | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """Plain data."""
        return dict(vars(self))


def derisk(artifact: str | os.PathLike[str], *, evidence: str, steps: int | None = _STEPS,
           signing_key: str | os.PathLike[str] | None = None,
           trusted_keys: Any = None) -> DeriskResult:
    """Export the safer configuration as a new version and promote it to the alias the
    monitored artifact came through (``production`` for a version path), with
    ``evidence`` as the promotion's reason.

    Raises
    ------
    ArtifactError
        The artifact has no certificate (no certified path), or the alias no longer points
        at the monitored version (production moved meanwhile).
    ConfigError
        ``steps`` is not a positive whole number.
    """
    from amv_calib.artifacts import export_artifact, promote
    from amv_calib.contract import load_artifact, read_aliases
    from amv_calib.tuning import Certificate, artifact_record

    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int)
                              or steps < 1):
        raise ConfigError(f"derisk steps={steps!r} must be a whole number >= 1")
    art = load_artifact(str(artifact), trusted_keys=trusted_keys)
    data = art.manifest.get("certificate")
    if not data:
        raise ArtifactError(f"{art.path}: no certificate, so no certified path to move "
                            f"along; de-risking needs a certified version")
    cert = Certificate.from_dict(data)
    alias = art.alias or "production"
    mdir = art.path.parent
    current = read_aliases(mdir)["aliases"].get(alias, {}).get("version")
    if current != art.version:
        raise ArtifactError(f"{mdir}: alias {alias!r} points at {current}, not at the "
                            f"monitored {art.version}: not de-risking a version not in use")
    chosen = cert.chosen if cert.chosen is not None else 0
    floor = min(cert.certified) if cert.certified else 0
    target = floor if steps is None else max(floor, chosen - steps)
    if target >= chosen:
        _log.warning("%s %s already runs the safest certified configuration: nothing to "
                     "de-risk to", art.name, art.version)
        return DeriskResult(previous=art.version, version=None, position=None,
                            chosen_before=cert.chosen, harm_price=None, reason=evidence)
    moved = cert.with_chosen(target)
    record = artifact_record(art)
    with tempfile.TemporaryDirectory(prefix="amv-derisk-") as tmp:
        tuning = None if record is None else record.write(tmp)
        res = export_artifact(calibrator=art.calibrator, name=art.name,
                              thresholds=dict(moved.path[target]), models_dir=mdir.parent,
                              certificate=moved.to_dict(), tuning=tuning,
                              derived_from=art.path, signing_key=signing_key)
    reason = (f"de-risked by the monitor from {art.version} (path position {chosen}) to "
              f"position {target}: {evidence}")
    promote(art.name, res.version, alias=alias, models_dir=mdir.parent, reason=reason)
    _log.info("%s: %s now points at %s (harm price %s)", mdir, alias, res.version,
              moved.path[target].get("harm_price"))
    return DeriskResult(previous=art.version, version=res.version, position=target,
                        chosen_before=cert.chosen,
                        harm_price=moved.path[target].get("harm_price"), reason=reason)
