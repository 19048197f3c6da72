"""``promote`` decides alike from the command line and in a pipeline: a production version
that cannot be verified is refused on both paths (exit 2, naming it and why), and a person's
``force`` promotes over it on both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amv_calib.cli import main
from amv_calib.contract import read_aliases


@pytest.fixture
def doctored(models_with_v2: Path) -> Path:
    """models/amv-guard: production at v1, whose calibrator was edited after it was
    promoted (its sha256 no longer matches); v2 a sound version of the same content."""
    v1 = models_with_v2 / "amv-guard" / "v1"
    cal = json.loads((v1 / "calibrator.json").read_text(encoding="utf-8"))
    cal["intercept"] += 0.1
    (v1 / "calibrator.json").write_text(json.dumps(cal), encoding="utf-8")
    return models_with_v2


def _production(models: Path) -> str:
    return str(read_aliases(models / "amv-guard")["aliases"]["production"]["version"])


def _pipeline(tmp_path: Path, models: Path) -> Path:
    toml = tmp_path / "promote.toml"
    toml.write_text(f"[pipeline]\nworkdir = 'w'\ntracking = false\nmodels_dir = '{models}'\n"
                    f"[[steps]]\nkind = 'promote'\n"
                    f"artifact = '{models / 'amv-guard' / 'v2'}'\n", encoding="utf-8")
    return toml


@pytest.mark.parametrize("path", ["command", "pipeline"])
def test_a_production_that_cannot_be_verified_is_refused_unless_forced(
        tmp_path: Path, doctored: Path, capsys: pytest.CaptureFixture[str],
        path: str) -> None:
    models = doctored
    if path == "command":
        argv = ["promote", "amv-guard", "v2", "--alias", "production",
                "--models-dir", str(models)]
        force = [*argv, "--force"]
    else:
        argv = ["run", str(_pipeline(tmp_path, models))]
        force = [*argv, "--set", "promote.force=true"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "the current production amv-guard v1 cannot be verified" in err
    assert "sha256 mismatch" in err  # why
    assert ("pass --force" if path == "command" else "set force = true") in err
    assert _production(models) == "v1"  # nothing moved
    assert main(force) == 0
    assert _production(models) == "v2"
