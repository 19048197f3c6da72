"""One place for default paths and settings.

Nothing here touches the disk or the environment at import time: each default is a function
of the environment at the moment it is asked for, so tests and the CLI can override it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

from amv_calib.exceptions import ConfigError

__all__ = [
    "ADAPTERS",
    "CALIBRATOR_NAMES",
    "DEFAULT_CALIBRATORS",
    "DEFAULT_ALIAS",
    "DEFAULT_MODEL_NAME",
    "DEFAULT_REGISTERED_MODEL",
    "DEFAULT_SEED",
    "TRUSTED_KEYS_ENV",
    "champion_reference",
    "models_dir",
    "optuna_storage",
    "project_root",
    "resolve_adapter",
    "tracking_uri",
    "trusted_keys",
    "ui_command",
]

#: Seed used wherever the user gives none; every random stream derives from a seed.
DEFAULT_SEED: Final = 20261202
#: Name of the artifact folder under ``models/`` that ships with the repository.
DEFAULT_MODEL_NAME: Final = "amv-guard"
#: Alias the gate loads by default.
DEFAULT_ALIAS: Final = "production"
#: MLflow registered-model name.
DEFAULT_REGISTERED_MODEL: Final = "amv-guard-calibrator"
#: Names ``compare`` knows (``--calibrators``), each a configured estimator:
#: ``platt`` = Platt on the rich feature map, ``platt_seed`` = Platt on the seed's map;
#: ``beta`` = Beta with the rich extras, ``beta_seed`` with the seed's; ``isotonic`` =
#: strict (centred) isotonic on a cross-fitted rich Platt index, ``isotonic_step`` its
#: step-function form; ``seed_prior`` = the seed formula. The rich maps and the strict
#: isotonic variant are the defaults because they win on out-of-fold log loss on the
#: synthetic data (see ``docs/calibration.md``).
CALIBRATOR_NAMES: Final = (
    "platt", "platt_seed", "beta", "beta_seed", "isotonic", "isotonic_step", "seed_prior"
)
#: The calibrators compared when none are given.
DEFAULT_CALIBRATORS: Final = ("platt", "beta", "isotonic", "seed_prior")
#: Input adapters for ``amv-calib ingest --adapter NAME``: name -> ``"module:function"``.
#: The function takes the input path and returns the claim-outcome table (a pandas
#: DataFrame or pyarrow Table, canonical or alias column names), or an iterable of such
#: tables; it is then validated like any other input (row numbers count its output rows).
#: Strings, not functions, so that the command line lists them without importing pandas.
ADAPTERS: dict[str, str] = {
    "mem0": "amv_calib.claims:mem0_adapter",
    "graphiti": "amv_calib.claims:graphiti_adapter",
}


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


def ui_command(uri: str | None = None, *, port: int = 5000) -> str:
    """The shell command that opens MLflow's UI on the tracking store ``uri`` (default:
    :func:`tracking_uri`); imports nothing."""
    uri = uri or tracking_uri()
    if uri.startswith(("http://", "https://")):
        return f"open {uri} in a browser (the tracking server serves the UI)"
    path = uri.removeprefix("sqlite:///")
    if uri.startswith("sqlite:///") and not path.startswith("/") and path != ":memory:":
        # A relative SQLite path names a file in the cwd; printed absolute, the command
        # opens the same store from any folder.
        uri = f"sqlite:///{(Path.cwd() / path).resolve().as_posix()}"
    return f"mlflow ui --backend-store-uri {uri} --host 127.0.0.1 --port {port}"


#: Environment variable naming the public keys (PEM files, separated by ``os.pathsep``) a
#: deployed gate trusts; when set, every artifact must be signed by one of them.
TRUSTED_KEYS_ENV: Final = "AMV_CALIB_TRUSTED_KEYS"


def trusted_keys() -> list[Path]:
    """The public keys named by ``$AMV_CALIB_TRUSTED_KEYS`` (none when it is unset).

    Raises
    ------
    ConfigError
        The variable is set but names no key (empty, blank, or separators only): whoever
        set it meant signatures to be checked, so nothing may load unchecked.
    """
    raw = os.environ.get(TRUSTED_KEYS_ENV)
    if raw is None:
        return []
    keys = [Path(p.strip()) for p in raw.split(os.pathsep) if p.strip()]
    if not keys:
        raise ConfigError(f"${TRUSTED_KEYS_ENV}={raw!r} is set but names no key file; set it "
                          f"to the public key(s) the artifacts must be signed with "
                          f"(separated by {os.pathsep!r}), or unset it")
    return keys


def resolve_adapter(name: str) -> Any:
    """The adapter function registered as ``name`` in :data:`ADAPTERS`.

    Raises
    ------
    ConfigError
        If no adapter has that name, or its ``"module:function"`` cannot be imported.
    """
    import importlib

    target = ADAPTERS.get(name)
    if target is None:
        known = ", ".join(sorted(ADAPTERS)) or "none"
        raise ConfigError(f"adapter={name!r} is not registered (available: {known})")
    module, _, func = target.partition(":")
    try:
        return getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"adapter {name!r} -> {target!r} cannot be loaded: {exc}") from exc
