"""Default locations follow one rule, whatever the install mode: the workspace is the nearest
folder from the current one upwards that holds ``models/``, else the current folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from amv_calib import settings


@pytest.fixture(autouse=True)
def _no_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("AMV_CALIB_MODELS_DIR", "MLFLOW_TRACKING_URI", "AMV_CALIB_OPTUNA_STORAGE"):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize("editable", [True, False], ids=["editable", "regular"])
def test_defaults_follow_the_current_folder_not_the_package(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, editable: bool) -> None:
    # the package's own checkout (an editable install) or site-packages (a regular one):
    # neither may decide where a user's export lands
    monkeypatch.setattr(settings, "project_root",
                        lambda: Path(settings.__file__).parents[1] if editable else tmp_path)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.chdir(scratch)
    assert settings.models_dir().resolve() == scratch / "models"
    assert settings.tracking_uri() == "sqlite:///mlflow.db"
    assert Path(settings.optuna_storage()).resolve() == scratch / ".optuna" / "journal.log"


def test_a_project_folder_is_found_upwards(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "project"
    (project / "models").mkdir(parents=True)
    (project / "pipelines" / "deep").mkdir(parents=True)
    monkeypatch.chdir(project / "pipelines" / "deep")
    assert settings.workspace() == project
    assert settings.models_dir() == project / "models"
    assert settings.tracking_uri() == f"sqlite:///{(project / 'mlflow.db').as_posix()}"
    assert settings.champion_reference() == f"{project / 'models' / 'amv-guard'}@production"
    monkeypatch.setenv("AMV_CALIB_MODELS_DIR", str(tmp_path / "elsewhere"))
    assert settings.models_dir() == tmp_path / "elsewhere"  # the variable still wins


_SHOW_ENV = ("import os, sys\n"
             "from amv_calib.cli import main\n"
             "try:\n"
             "    main(['--version'])\n"
             "except SystemExit:\n"
             "    pass\n"
             "print(os.environ.get('MIMALLOC_PURGE_DELAY'), 'pyarrow' in sys.modules)\n")


@pytest.mark.parametrize(("given", "expected"), [(None, "0"), ("25", "25")],
                         ids=["unset", "user-set"])
def test_the_command_line_sets_its_allocator_before_arrow_loads(
        given: str | None, expected: str) -> None:
    # Arrow's allocator reads MIMALLOC_* once, when it starts: the command line sets the
    # default first thing, and leaves a value the user gave alone.
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "MIMALLOC_PURGE_DELAY"}
    if given is not None:
        env["MIMALLOC_PURGE_DELAY"] = given
    out = subprocess.run([sys.executable, "-c", _SHOW_ENV], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out[-2:] == [expected, "False"]  # set while pyarrow was not yet imported


def test_process_env_is_left_alone_once_arrow_is_loaded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow  # noqa: F401  (loaded: its allocator has read its settings)

    monkeypatch.delenv("MIMALLOC_PURGE_DELAY", raising=False)
    settings.set_process_env()
    import os

    assert "MIMALLOC_PURGE_DELAY" not in os.environ
