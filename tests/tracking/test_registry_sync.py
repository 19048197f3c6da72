"""The file aliases are the source of truth; the MLflow registry mirrors them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from mlflow import MlflowClient

from amv_calib.artifacts import export_artifact, promote, rollback
from amv_calib.contract import seed_prior_calibrator
from amv_calib.tracking import register_champion, sync_registry_aliases


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_registry_aliases_follow_promote_and_rollback(
        tmp_path: Path, store: str, shipped_models: Callable[[Path], Path]) -> None:
    models = shipped_models(tmp_path / "models")
    v2 = export_artifact(calibrator=seed_prior_calibrator(), name="amv-guard",
                         models_dir=models, include_joblib=False)
    mdir = models / "amv-guard"
    name = "gate-model"
    r1 = register_champion(mdir / "v1", registered_name=name, alias=None, tracking_uri=store)
    r2 = register_champion(mdir / "v2", registered_name=name, alias=None, tracking_uri=store)
    # registering the same artifact again reuses its version: no duplicates
    again = register_champion(mdir / "v1", registered_name=name, alias=None,
                              tracking_uri=store)
    assert again.version == r1.version
    client = MlflowClient(tracking_uri=store, registry_uri=store)
    assert len(client.search_model_versions(f"name = '{name}'")) == 2

    promote("amv-guard", v2.version, alias="challenger", models_dir=models)
    synced = sync_registry_aliases(mdir, registered_name=name, tracking_uri=store)
    assert synced == {"champion": r1.version, "challenger": r2.version}
    assert str(client.get_model_version_by_alias(name, "champion").version) == r1.version
    assert str(client.get_model_version_by_alias(name, "challenger").version) == r2.version

    promote("amv-guard", v2.version, alias="production", models_dir=models)
    sync_registry_aliases(mdir, registered_name=name, tracking_uri=store)
    assert str(client.get_model_version_by_alias(name, "champion").version) == r2.version
    rollback("amv-guard", alias="production", models_dir=models)
    sync_registry_aliases(mdir, registered_name=name, tracking_uri=store)
    assert str(client.get_model_version_by_alias(name, "champion").version) == r1.version


def test_an_alias_whose_version_is_not_registered_is_removed(
        tmp_path: Path, store: str, shipped_models: Callable[[Path], Path]) -> None:
    models = shipped_models(tmp_path / "models")
    mdir = models / "amv-guard"
    aliases = json.loads((mdir / "aliases.json").read_text(encoding="utf-8"))
    aliases["aliases"].pop("challenger", None)  # the file names production only
    (mdir / "aliases.json").write_text(json.dumps(aliases), encoding="utf-8")
    name = "gate-model"
    r1 = register_champion(mdir / "v1", registered_name=name, alias="challenger",
                           tracking_uri=store)
    out = sync_registry_aliases(mdir, registered_name=name, tracking_uri=store)
    assert out == {"champion": r1.version, "challenger": None}  # no file alias challenger
    client = MlflowClient(tracking_uri=store, registry_uri=store)
    with pytest.raises(Exception, match="challenger"):
        client.get_model_version_by_alias(name, "challenger")


def test_a_file_alias_on_an_unregistered_version_leaves_the_registry_as_it_was(
        tmp_path: Path, store: str, shipped_models: Callable[[Path], Path],
        caplog: pytest.LogCaptureFixture) -> None:
    # Job 3 as written: export v2, promote it; the registry holds v1 only. Its aliases must
    # not be emptied: they stay, and the warning says what to run.
    models = shipped_models(tmp_path / "models")
    mdir = models / "amv-guard"
    name = "gate-model"
    r1 = register_champion(mdir / "v1", registered_name=name, alias=None, tracking_uri=store)
    assert sync_registry_aliases(mdir, registered_name=name, tracking_uri=store) == {
        "champion": r1.version, "challenger": r1.version}
    v2 = export_artifact(calibrator=seed_prior_calibrator(), name="amv-guard",
                         models_dir=models, include_joblib=False)
    promote("amv-guard", v2.version, alias="challenger", models_dir=models)
    promote("amv-guard", v2.version, alias="production", models_dir=models)
    with caplog.at_level("WARNING", logger="amv_calib.tracking._registry"):
        out = sync_registry_aliases(mdir, registered_name=name, tracking_uri=store)
    assert out == {"champion": r1.version, "challenger": r1.version}
    client = MlflowClient(tracking_uri=store, registry_uri=store)
    assert str(client.get_model_version_by_alias(name, "champion").version) == r1.version
    assert f"amv-calib register {mdir / 'v2'}" in caplog.text
