"""The exception hierarchy: one base class, specific subclasses.

Every error the package raises on purpose derives from :class:`AmvCalibError`, so a caller
can catch the whole family at once. Subclasses that signal bad input also derive from
:class:`ValueError`, so ``except ValueError`` keeps working for code that does not know us.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "AmvCalibError",
    "ArtifactError",
    "CertificateMismatchError",
    "ConfigError",
    "DataContractError",
    "InsufficientDataError",
    "LockedError",
    "MissingColumnsError",
    "PipelineError",
    "PortableFormatError",
    "UncalibratedPremiseError",
    "UnknownAliasError",
    "check_choice",
]


class AmvCalibError(Exception):
    """Base class of every error raised by amv-calib.

    ``exit_code`` is what the command line exits with when this error reaches it.
    """

    exit_code: int = 1


class DataContractError(AmvCalibError, ValueError):
    """Input data break the data contract (see ``docs/data.md``)."""

    exit_code = 2


class MissingColumnsError(DataContractError):
    """An input file lacks required columns; raised before any row is read."""


class InsufficientDataError(AmvCalibError, ValueError):
    """Too little (or too uniform) data to fit or compare calibrators."""

    exit_code = 2


class PortableFormatError(AmvCalibError, ValueError):
    """A portable calibrator description is malformed or unsafe to evaluate."""


class ArtifactError(AmvCalibError):
    """An artifact is missing, tampered with, of unknown format or otherwise refused.

    ``code`` is a short stable reason code (``hash_mismatch``, ``bad_type``,
    ``certificate_binding``, ...; listed in ``amv_calib/contract/artifact_rules.json``) that
    the TypeScript loader gives for the same refusal; the message says the rest.
    """

    #: The reason code of a refusal raised without one.
    default_code: str = "refused"

    def __init__(self, message: str = "", *, code: str | None = None) -> None:
        super().__init__(message)
        self.code: str = code or self.default_code


class UnknownAliasError(ArtifactError, ValueError):
    """A reference names an alias the model folder does not have: a usage error (a gate
    loading it still fails closed, as for any refused artifact)."""

    exit_code = 2


class CertificateMismatchError(ArtifactError, ValueError):
    """An artifact's certificate is bound to another calibrator, other thresholds or another
    tuning record than the version carries: it vouches for something else."""

    exit_code = 2
    default_code = "certificate_binding"


class LockedError(AmvCalibError):
    """Another live process holds a lock this one needs (a pipeline's work folder)."""

    exit_code = 75  # EX_TEMPFAIL: try again later


class ConfigError(AmvCalibError, ValueError):
    """A pipeline file or setting is invalid (unknown key, missing file, bad value)."""

    exit_code = 2


class PipelineError(AmvCalibError):
    """A pipeline step failed; ``step`` names it. Its ``exit_code`` is the cause's when the
    cause is a :class:`ConfigError` (a setting or a decision a person must change), else 1."""

    def __init__(self, step: str, message: str, *, exit_code: int = 1) -> None:
        super().__init__(f"step {step!r} failed: {message}")
        self.step = step
        self.exit_code = exit_code


class UncalibratedPremiseError(AmvCalibError, ValueError):
    """A premise has no probability and none can be computed; the gate fails closed."""

    exit_code = 2


def check_choice(name: str, value: object, choices: Sequence[str],
                 error: type[Exception] = ValueError) -> None:
    """Raise ``error("name='x' must be 'a', 'b' or 'c'")`` unless ``value`` is a choice.

    The one wording of the package's "pick one of these strings" checks.
    """
    if value not in choices:
        allowed = repr(choices[-1]) if len(choices) == 1 else (
            ", ".join(map(repr, choices[:-1])) + " or " + repr(choices[-1]))
        raise error(f"{name}={value!r} must be {allowed}")
