"""Reading what a command or a step is given: a JSON file, the default artifact."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from amv_calib.exceptions import ConfigError

__all__ = ["default_artifact", "read_json"]


def read_json(where: str, flag: str = "--action") -> Any:
    """The JSON document in file ``where`` (``-``: stdin), errors naming ``flag``: a regular
    file only, UTF-8, every key of an object given once."""
    from amv_calib.contract import loads_strict, read_regular

    try:
        raw = sys.stdin.buffer.read() if where == "-" else read_regular(
            where, what=f"{flag} file", error=ConfigError)
    except OSError as exc:
        raise ConfigError(f"{flag} {where}: cannot read ({exc.strerror})") from None
    try:
        return loads_strict(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{flag} {where}: line {line}: not UTF-8 text ({exc.reason} at "
                          f"byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{flag} {where}: not JSON ({exc})") from None
    except RecursionError:
        raise ConfigError(f"{flag} {where}: JSON nested too deeply") from None
    except ValueError as exc:  # a key given twice: which copy counts is ambiguous
        raise ConfigError(f"{flag} {where}: {exc}") from None


def default_artifact() -> str:
    """``models/amv-guard@production`` when it exists, else exit 2 naming the flags."""
    from amv_calib.settings import champion_reference

    ref = champion_reference()
    folder = Path(ref.rpartition("@")[0])
    if not (folder / "aliases.json").is_file():
        raise ConfigError(f"no --artifact given and no {ref} to default to; pass --artifact "
                          f"DIR (or MODEL_DIR@ALIAS), --calibrator FILE or --no-artifact")
    return ref
