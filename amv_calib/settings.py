"""One place for default paths and settings.

Nothing here touches the disk or the environment at import time: each default is a function
of the environment at the moment it is asked for, so tests and the CLI can override it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

__all__ = [
    "DEFAULT_ALIAS",
    "DEFAULT_MODEL_NAME",
    "DEFAULT_REGISTERED_MODEL",
    "DEFAULT_SEED",
    "champion_reference",
    "models_dir",
    "optuna_storage",
    "project_root",
    "tracking_uri",
]

#: Seed used wherever the user gives none; every random stream derives from a seed.
DEFAULT_SEED: Final = 20261202
#: Name of the artifact folder under ``models/`` that ships with the repository.
DEFAULT_MODEL_NAME: Final = "amv-guard"
#: Alias the gate loads by default.
DEFAULT_ALIAS: Final = "production"
#: MLflow registered-model name.
DEFAULT_REGISTERED_MODEL: Final = "amv-guard-calibrator"


def project_root() -> Path:
    """The checkout this package lives in (the folder holding ``pyproject.toml``), else cwd."""
    here = Path(__file__).resolve().parent.parent
    if (here / "pyproject.toml").is_file():
        return here
    return Path.cwd()


def models_dir() -> Path:
    """Where artifacts live: ``$AMV_CALIB_MODELS_DIR``, else ``models/`` in the checkout."""
    env = os.environ.get("AMV_CALIB_MODELS_DIR")
    return Path(env) if env else project_root() / "models"


def champion_reference() -> str:
    """The artifact reference the gate loads when given none: ``models/amv-guard@production``."""
    return f"{models_dir() / DEFAULT_MODEL_NAME}@{DEFAULT_ALIAS}"


def tracking_uri() -> str:
    """MLflow tracking URI: ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db`` in cwd."""
    return os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///mlflow.db"


def optuna_storage() -> str:
    """Optuna storage: ``$AMV_CALIB_OPTUNA_STORAGE``, else a journal file under ``.optuna/``."""
    return os.environ.get("AMV_CALIB_OPTUNA_STORAGE") or str(Path(".optuna") / "journal.log")
