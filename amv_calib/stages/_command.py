"""The ``amv-calib`` sub-command of a :class:`~amv_calib.stages.Stage`, made from it.

Every flag is made from the stage's :class:`~amv_calib.stages.Input` or its options'
:class:`~amv_calib.settings.Option`: default, type, choices and help come from there only,
and a value is checked by the same :meth:`~amv_calib.settings.Option.check` that checks a
step's key or a library call.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from amv_calib.exceptions import ConfigError
from amv_calib.settings import Option, Options
from amv_calib.stages._stage import Call, Input, Stage

__all__ = ["add_command", "add_options", "call_from", "parse_option", "run_command",
           "with_default"]


def with_default(help: str, default: Any) -> str:
    """``help`` with ``(default X)`` appended, unless it states its default itself."""
    return help if "default" in help else f"{help} (default {default})"


def parse_option(flag: str, opt: Option) -> Callable[[str], Any]:
    """Parse one command-line value as the option's type and check it like the library."""
    def parse(text: str) -> Any:
        if opt.type is list:
            value: Any = [v.strip() for v in text.split(",") if v.strip()]
        else:
            try:
                value = opt.type(text)
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"{text!r} is not {'an integer' if opt.type is int else 'a number'}"
                ) from None
        try:
            return opt.check(flag, value)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = opt.type.__name__
    return parse


def add_options(p: argparse.ArgumentParser, cls: type[Options], *,
                only: tuple[str, ...] | None = None) -> None:
    """One flag per command-line option of ``cls`` (or of ``only`` of them)."""
    defaults = cls.defaults()
    for name, opt in cls.spec().items():
        if not opt.cli or (only is not None and name not in only):
            continue
        default = getattr(defaults, name)
        flags = [f"--{name.replace('_', '-')}", *opt.flags]
        if opt.type is bool:
            p.add_argument(*flags, dest=name, action="store_true", default=default,
                           help=opt.help)
            continue
        shown = "none" if default is None else (",".join(default) if isinstance(default, list)
                                                 else default)
        kwargs: dict[str, Any] = {"dest": name, "default": default,
                                  "help": with_default(opt.help, shown),
                                  "metavar": opt.metavar, "type": parse_option(f"--{name}", opt)}
        if opt.choices is not None and opt.type is not list:
            kwargs["choices"] = opt.choices
        p.add_argument(*flags, **kwargs)


def _add_input(p: argparse.ArgumentParser, name: str, inp: Input) -> None:
    """The argument or flag of one input."""
    kwargs: dict[str, Any] = {"help": inp.help, "metavar": inp.metavar}
    if inp.choices is not None:
        kwargs["choices"] = inp.choices
    if inp.nargs is not None:
        kwargs["nargs"] = inp.nargs
    if inp.positional:
        p.add_argument(name, **kwargs)
        return
    flags = inp.flags or (f"--{name.replace('_', '-')}",)
    if inp.type is bool:
        p.add_argument(*flags, dest=name, action="store_true", default=inp.default,
                       help=inp.help)
        return
    if inp.type in (int, float):
        kwargs["type"] = inp.type
    if inp.type is list and inp.nargs is None:  # a list without nargs: a repeatable flag
        kwargs["action"] = "append"
    if inp.required or inp.cli_required:
        kwargs["required"] = True
    elif inp.nargs is None or inp.default is not None:
        kwargs["default"] = list(inp.default) if isinstance(inp.default, list) else inp.default
    p.add_argument(*flags, dest=name, **kwargs)


def add_command(subparsers: Any, stage: Stage,
                hooks: Mapping[str, Callable[..., Any]] | None = None
                ) -> argparse.ArgumentParser:
    """Add ``stage``'s sub-command: its inputs, ``--out``, options, shared settings, ``--json``;
    ``hooks`` are lent to its calls (:attr:`Call.hooks`)."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        stage.name, help=stage.help, description=stage.description)
    for name, inp in stage.inputs.items():
        if inp.cli:
            _add_input(p, name, inp)
    if stage.out is not None:
        _add_input(p, "out", stage.out)
    if stage.options is not None:
        add_options(p, stage.options)
    for name in stage.shared:
        shared = stage.cli_keys()[name]
        if stage.shared[name] is not None:
            shared = dataclasses.replace(shared, help=with_default(shared.help, shared.default))
        _add_input(p, name, shared)
    p.add_argument("--json", action="store_true", help=stage.json_help)
    p.set_defaults(func=run_command, stage=stage, hooks=dict(hooks or {}))
    return p


def call_from(stage: Stage, args: argparse.Namespace) -> Call:
    """The :class:`Call` of a command's parsed arguments."""
    # an input the command does not offer is None, as one a step does not offer
    inputs = {k: getattr(args, k) if i.cli else None for k, i in stage.inputs.items()}
    options = None
    if stage.options is not None:
        options = stage.options.from_mapping(
            {k: getattr(args, k) for k in stage.options.spec() if hasattr(args, k)})
    shared: dict[str, Any] = {k: getattr(args, k) for k in stage.shared}
    if shared.get("models_dir") is not None:
        shared["models_dir"] = Path(shared["models_dir"])
    out = getattr(args, "out", None)
    return Call(inputs=inputs, options=options, out=None if out is None else Path(out),
                verbose=bool(getattr(args, "verbose", False)),
                hooks=getattr(args, "hooks", {}),
                progress=not getattr(args, "json", False), **shared)


def run_command(args: argparse.Namespace) -> int:
    """Run the stage of the parsed command (``args.stage``): its summary (or ``--json``)
    on stdout; the stage's exit code."""
    stage: Stage = args.stage
    result = stage.run(call_from(stage, args))
    if args.json:
        sys.stdout.write(json.dumps(stage.to_json(result), indent=stage.json_indent,
                                    sort_keys=stage.json_sort_keys) + "\n")
    else:
        sys.stdout.write("".join(f"{line}\n" for line in stage.summary(result)))
    sys.stdout.flush()
    stage.check(result)
    return stage.exit_code(result)
