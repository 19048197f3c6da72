"""What the commands that are not stages share: how a command is added, its common flags,
and how it prints its result (a few lines for a person, or ``--json`` for a script)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable
from typing import Any

from amv_calib.settings import DEFAULT_ALIAS, DEFAULT_SEED, TuneOptions
from amv_calib.stages import parse_option, with_default

__all__ = ["URI_HELP", "alias_option", "command", "emit", "harm_price_option", "json_option",
           "models_dir_option", "print_json", "seed_option", "tracking_uri_option",
           "trusted_key_option", "version_arguments"]

URI_HELP = "MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)"


# -- what every command has, and options several commands share -------------------------------

def command(subparsers: Any, name: str, run: Callable[[argparse.Namespace], int], *,
             help: str, description: str,
             formatter_class: type[argparse.HelpFormatter] = argparse.HelpFormatter,
             ) -> argparse.ArgumentParser:
    """Add the sub-command ``name``, carried out by ``run``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        name, help=help, description=description, formatter_class=formatter_class)
    p.set_defaults(func=run)
    return p


def harm_price_option(p: argparse.ArgumentParser, help: str) -> None:
    """``--harm-price`` of the gate and replay: checked as tune's ``harm_price`` option."""
    p.add_argument("--harm-price", dest="harm_price", default=None, metavar="X", help=help,
                   type=parse_option("--harm-price", TuneOptions.spec()["harm_price"]))


def seed_option(p: argparse.ArgumentParser, help: str,
                 default: int = DEFAULT_SEED) -> None:
    """``--seed``: the random seed of the command's draws."""
    p.add_argument("--seed", type=int, default=default, help=with_default(help, default))


def json_option(p: argparse.ArgumentParser,
                 help: str = "print the full result as JSON instead of the summary") -> None:
    """``--json``: the result as JSON on stdout instead of text."""
    p.add_argument("--json", action="store_true", help=help)


def emit(args: argparse.Namespace, data: Any, summary: Iterable[str]) -> None:
    """The command's result: a few lines for a person, or with ``--json`` the full object
    (one object, sorted keys) for a script."""
    if getattr(args, "json", False):
        print_json(data)
    else:
        sys.stdout.write("".join(f"{line}\n" for line in summary))
    sys.stdout.flush()


def tracking_uri_option(p: argparse.ArgumentParser, help: str = URI_HELP) -> None:
    """``--tracking-uri``: the MLflow tracking server or store."""
    p.add_argument("--tracking-uri", default=None, help=help)


def models_dir_option(p: argparse.ArgumentParser) -> None:
    """``--models-dir``: the root of the artifact folders."""
    p.add_argument("--models-dir", metavar="DIR", default=None,
                   help="artifact root (default: $AMV_CALIB_MODELS_DIR, else models/ in the "
                   "nearest folder upwards from here that holds one, else here)")


def version_arguments(p: argparse.ArgumentParser) -> None:
    """``NAME VERSION``: one artifact version, by number or by one of its aliases."""
    p.add_argument("name", metavar="NAME", help="artifact name (the folder under models/)")
    p.add_argument("version", metavar="VERSION",
                   help="vN, or an alias naming one (challenger, production)")


def trusted_key_option(p: argparse.ArgumentParser) -> None:
    """``--trusted-key``: public keys one of which must have signed the artifact."""
    # None when not given: an empty list would name no key and refuse every artifact
    p.add_argument("--trusted-key", dest="trusted_keys", action="append", default=None,
                   metavar="PUBLIC",
                   help="public key (from `amv-calib keygen`) that must have signed the "
                   "artifact (repeatable: any one of them; also $AMV_CALIB_TRUSTED_KEYS, "
                   "separated by ':'); an unsigned or wrongly signed artifact is refused "
                   "(default: the variable's keys, else no signature check)")


def alias_option(p: argparse.ArgumentParser) -> None:
    """``--alias`` of an artifact name."""
    p.add_argument("--alias", default=DEFAULT_ALIAS, help=f"default: {DEFAULT_ALIAS}")


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")

