"""Load exported artifacts safely: the gate's side of ``models/<name>/<version>/``.

The loader reads every file of the version folder once, through one handle on the folder
(:mod:`._folder`), and judges those bytes only: it checks the format, the sha256 of every
file the manifest lists and that nothing unlisted sits beside them, the signature (under
trusted keys) against the same digests, validates the portable calibrator, and never
unpickles anything (a ``calibrator.joblib`` beside it is hashed, not opened). numpy and the
standard library only: the runtime gate imports this.

A *reference* names one artifact version:

- ``DIR`` where ``DIR`` holds a ``manifest.json`` (for example ``models/amv-guard/v3``);
- ``MODEL_DIR@ALIAS`` (for example ``models/amv-guard@production``): the version the alias
  file ``MODEL_DIR/aliases.json`` points at.

A bare model folder (``models/amv-guard``) is refused rather than read as "the latest
version": a fresh export must not reach production before someone promotes it. A relative
reference that does not exist from the current directory is looked up under
:func:`amv_calib.settings.models_dir` too (``amv-guard@production`` or
``models/amv-guard@production`` then work from any directory).
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import logging
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, TypeVar

from amv_calib.contract._features import FeatureMap, PortableCalibrator, _check_format
from amv_calib.contract._files import read_regular
from amv_calib.contract._folder import (
    MAX_FILE_BYTES,
    MAX_JSON_BYTES,
    VersionFolder,
    read_file_in,
    read_version_folder,
)
from amv_calib.contract._json import loads_strict
from amv_calib.contract._signature import SIGNATURE_FILE, verify_folder
from amv_calib.exceptions import (
    ArtifactError,
    CertificateMismatchError,
    ConfigError,
    PortableFormatError,
    UnknownAliasError,
    check_choice,
)
from amv_calib.settings import champion_reference, models_dir, trusted_keys


def _read_rules() -> Mapping[str, Any]:
    raw = importlib.resources.files(__package__).joinpath("artifact_rules.json").read_bytes()
    rules: dict[str, Any] = json.loads(raw)
    return MappingProxyType(rules)


#: The artifact rules that are data (fields, types, ranges, reason codes), written once in
#: ``artifact_rules.json``: the TypeScript loader reads the same file.
RULES: Final = _read_rules()
#: The reason codes an :class:`~amv_calib.ArtifactError` of the loader may carry.
REASON_CODES: Final = frozenset(RULES["codes"])

ARTIFACT_FORMAT: Final[str] = RULES["manifest"]["format"]
ARTIFACT_FORMAT_VERSION: Final[int] = RULES["manifest"]["format_version"]
ALIASES_FORMAT: Final = "amv-calib/aliases"
ALIASES_FORMAT_VERSION: Final = 1
MANIFEST_FILE: Final = "manifest.json"
CALIBRATOR_FILE: Final = "calibrator.json"
ALIASES_FILE: Final = "aliases.json"

#: The gate thresholds a manifest's ``gate`` object holds (the ``thresholds.json`` keys).
GATE_KEYS: Final[tuple[str, ...]] = tuple(RULES["gate"]["keys"])
#: The keys of :data:`GATE_KEYS` an older manifest may lack, and what they mean then: a
#: manifest written before the harm price prices no harm.
GATE_DEFAULTS: Final[Mapping[str, Any]] = MappingProxyType(dict(RULES["gate"]["defaults"]))

# "tuning": the episodes that shaped the thresholds (tuning.json; amv_calib.tuning._record);
# "engine": where the calibrator was fitted, when not on one machine ("spark"; docs/scale.md)
_MANIFEST_KEYS: Final = frozenset(RULES["manifest"]["allowed"])
_REQUIRED_MANIFEST_KEYS: Final[tuple[str, ...]] = tuple(RULES["manifest"]["required"])
_SHA256_RE: Final = re.compile(RULES["manifest"]["sha256_pattern"].strip("^$"))
_VERSION_RE: Final = re.compile(RULES["manifest"]["version_pattern"].strip("^$"))
#: Deeper JSON is refused (the format nests four levels; Python's parser would recurse).
_MAX_JSON_DEPTH: Final[int] = RULES["json"]["max_depth"]
#: Larger integers are refused in artifact JSON: JavaScript's numbers hold no larger one
#: exactly, so the two loaders would read different values.
_MAX_SAFE_INTEGER: Final[int] = RULES["json"]["max_safe_integer"]

_log = logging.getLogger(__name__)

G = TypeVar("G")
#: Trusted public keys as an argument: one path, or a sequence of them.
KeysLike = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


class RuleError(ValueError):
    """A value breaks one of the artifact rules: a ``ValueError`` carrying its reason code.

    Parameters
    ----------
    code : str
        One of :data:`REASON_CODES`.
    message : str
        Naming the field and the value.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, kw_only=True)
class LoadedArtifact:
    """A verified artifact version, ready for the gate.

    Attributes
    ----------
    path : pathlib.Path
        The version folder that was read.
    manifest : dict
        ``manifest.json`` as parsed.
    calibrator : PortableCalibrator
        ``calibrator.json`` validated, with the gate's clamp (``manifest["gate"]["clamp"]``)
        applied.
    thresholds : dict
        The manifest's ``gate`` object, validated (keys :data:`GATE_KEYS`).
    name, version : str
        From the manifest.
    alias : str or None
        The alias the reference went through, if any.
    files : dict
        The manifest's ``files``: name -> sha256, every one checked.
    signed_by : pathlib.Path or None
        The trusted public key that verified ``model.sig``; None when no trusted key was
        configured (a signature, if present, was then not checked).
    contents : mapping
        The bytes of every JSON file of the version (``manifest.json``, ``calibrator.json``,
        ``profile.json``, ...) as read, hashed and (under a key) verified: read these rather
        than the folder again, which may have changed since.
    """

    path: Path
    manifest: dict[str, Any]
    calibrator: PortableCalibrator
    thresholds: dict[str, Any]
    name: str
    version: str
    alias: str | None = None
    files: dict[str, str] = field(default_factory=dict)
    signed_by: Path | None = None
    contents: Mapping[str, bytes] = field(default_factory=dict, repr=False)

    @property
    def calibrator_sha256(self) -> str:
        """sha256 of ``calibrator.json`` as listed in (and checked against) the manifest."""
        return self.files[CALIBRATOR_FILE]

    def read(self, rel: str) -> bytes:
        """The bytes of the listed file ``rel`` this load vouched for.

        JSON files come from :attr:`contents`; any other listed file is read again (the
        loader hashed it without keeping it) and refused unless its sha256 is still the one
        the manifest lists.

        Raises
        ------
        ArtifactError
            ``rel`` is not listed, or changed since the load.
        """
        if rel in self.contents:
            return self.contents[rel]
        want = self.files.get(rel)
        if want is None:
            raise ArtifactError(f"{self.path}: {rel!r} is not a file its manifest lists")
        raw = read_file_in(self.path, rel, what="listed file", limit=MAX_FILE_BYTES)
        if raw is None or hashlib.sha256(raw).hexdigest() != want:
            raise ArtifactError(f"{self.path / rel}: changed since the version was loaded "
                                f"(sha256 differs from the manifest's); load it again")
        return raw


# -- plain-data helpers shared with the export side ------------------------------------
def canonical_json_bytes(obj: Any) -> bytes:
    """The one JSON serialisation artifacts use: sorted keys, indent 2, finite numbers, LF.

    Floats are written by ``repr`` (shortest round-trip form), so equal data give equal
    bytes.
    """
    text = json.dumps(obj, sort_keys=True, indent=2, allow_nan=False, ensure_ascii=True)
    return (text + "\n").encode("utf-8")


def check_thresholds(data: Any) -> dict[str, Any]:
    """Validate a ``thresholds.json`` / manifest ``gate`` object and return it normalised.

    A key of :data:`GATE_DEFAULTS` may be absent (an older manifest): the result then
    leaves it out too, so that re-exporting an older thresholds file writes the same
    manifest, and a reader takes the default (``thresholds.get("harm_price", 0.0)``; the
    gate's own default when :func:`gate_from_artifact` builds it). Given, ``harm_price``
    must be finite and >= 0.

    Raises
    ------
    RuleError
        A ``ValueError`` with the reason code (``missing_field``, ``unknown_field``,
        ``bad_type``, ``bad_value``), naming the key and the value: a missing or unknown key,
        a non-finite or negative
        cost scale, threshold or harm price, ``epsilon_harm_bound`` outside [0, 1], an
        unknown planner, a non-integer or negative ``max_verifications``, a clamp that is
        not ``[lo, hi]`` with ``0 <= lo < hi <= 1`` (or null).
    """
    if not isinstance(data, Mapping):
        raise RuleError("bad_type",
                        f"thresholds must be a JSON object, got {type(data).__name__}")
    rules = RULES["gate"]
    missing = [k for k in GATE_KEYS if k not in data and k not in GATE_DEFAULTS]
    if missing:
        raise RuleError("missing_field", f"thresholds lack keys {missing}")
    unknown = sorted(set(data) - set(GATE_KEYS))
    if unknown:
        raise RuleError("unknown_field",
                        f"thresholds have unknown keys {unknown}; expected {list(GATE_KEYS)}")
    out: dict[str, Any] = {}
    # key by key in the order of GATE_KEYS: the first bad key is the one both loaders name
    for key in GATE_KEYS:
        if key not in data:
            continue
        if key in rules["numbers"]:
            lo, hi = rules["numbers"][key]
            out[key] = _number(data[key], key, lo=lo, hi=hi)
        elif key in rules["choices"]:
            out[key] = _choice(data[key], key, rules["choices"][key])
        elif key in rules["integers"]:
            out[key] = _integer(data[key], key, rules["integers"][key])
        else:
            out[key] = _clamp(data[key], rules["clamp"])
    return out


def _choice(value: Any, key: str, choices: Sequence[str]) -> str:
    if not isinstance(value, str):
        raise RuleError("bad_type", f"{key}={value!r} must be a string")
    try:
        check_choice(key, value, choices)
    except ValueError as exc:
        raise RuleError("bad_value", str(exc)) from None
    return value


def _integer(value: Any, key: str, least: int) -> int:
    """An integer >= ``least``; a float of integral value (``3.0``) counts as one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RuleError("bad_type", f"{key}={value!r} must be an integer >= {least}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or value < least:
        raise RuleError("bad_value", f"{key}={value!r} must be an integer >= {least}")
    return value


def _clamp(clamp: Any, bounds: Sequence[float]) -> list[float] | None:
    if clamp is None:
        return None
    if isinstance(clamp, (str, bytes)) or not isinstance(clamp, (list, tuple)):
        raise RuleError("bad_type", f"clamp={clamp!r} must be [lo, hi] or null")
    if len(clamp) != 2:
        raise RuleError("bad_value", f"clamp={clamp!r} must be [lo, hi] or null")
    lo = _number(clamp[0], "clamp[0]", lo=bounds[0], hi=bounds[1])
    hi = _number(clamp[1], "clamp[1]", lo=bounds[0], hi=bounds[1])
    if not lo < hi:
        raise RuleError("bad_value", f"clamp={list(clamp)!r} must satisfy lo < hi")
    return [lo, hi]


def with_gate_clamp(calibrator: PortableCalibrator, gate: Mapping[str, Any]
                    ) -> tuple[PortableCalibrator, dict[str, Any]]:
    """The calibrator and the (checked) gate thresholds as an artifact holds them: one clamp.

    A clamp in the thresholds becomes the calibrator's; else the calibrator's own clamp, if
    any, becomes the thresholds'. Export writes the pair this way, and certification
    evaluates (and binds) exactly the calibrator export will write.
    """
    out = dict(gate)
    clamp = out.get("clamp")
    if clamp is not None:
        return replace(calibrator, clamp=(float(clamp[0]), float(clamp[1]))), out
    if calibrator.clamp is not None:
        out["clamp"] = [calibrator.clamp[0], calibrator.clamp[1]]
    return calibrator, out


def calibrator_sha256(calibrator: PortableCalibrator) -> str:
    """sha256 of the ``calibrator.json`` an export writes for ``calibrator``."""
    return hashlib.sha256(canonical_json_bytes(calibrator.to_dict())).hexdigest()


def thresholds_sha256(thresholds: Mapping[str, Any]) -> str:
    """sha256 of the canonical form of checked thresholds (an absent harm price is 0)."""
    full = {**GATE_DEFAULTS, **check_thresholds(thresholds)}
    return hashlib.sha256(canonical_json_bytes(full)).hexdigest()


def check_certificate_binding(certificate: Any, *, calibrator_sha256: str,
                              gate: Mapping[str, Any],
                              tuning: Mapping[str, Any] | None) -> None:
    """Refuse a certificate that is not bound to exactly this calibrator and these thresholds.

    The certificate must name the sha256 of the calibrator it certified
    (``calibrator_sha256``), its chosen configuration must be ``gate`` (every key, an
    absent harm price meaning 0), and when it names the record of the episodes its
    thresholds have seen (``seen``), the version must carry that record (``tuning``).

    Raises
    ------
    ValueError
        Naming both hashes (or fingerprints) of what differs.
    """
    if not isinstance(certificate, Mapping):
        raise RuleError("bad_type", "certificate must be an object")
    cert_cal = certificate.get("calibrator_sha256")
    if not (isinstance(cert_cal, str) and _SHA256_RE.fullmatch(cert_cal)):
        raise RuleError(
            "certificate_binding",
            "certificate does not name the calibrator it certified (no calibrator_sha256; "
            "made before certificates were bound?): certify this version again "
            "(amv-calib certify) and export the result")
    if cert_cal != calibrator_sha256:
        raise RuleError(
            "certificate_binding",
            f"certificate was made for calibrator sha256 {cert_cal}, but this calibrator.json "
            f"has sha256 {calibrator_sha256}: a certificate vouches for one calibrator only")
    chosen = certificate.get("thresholds")
    if not isinstance(chosen, Mapping):
        raise RuleError("certificate_binding", "certificate certified no configuration")
    path = certificate.get("path")
    index = certificate.get("chosen")
    # an index is a JSON integer (not true, not 21.0) naming the path's entry that its
    # thresholds are, compared as JSON (a boolean is never a number)
    if not (isinstance(path, list) and isinstance(index, int) and not isinstance(index, bool)
            and 0 <= index < len(path) and json_equal(path[index], chosen)):
        raise RuleError("certificate_binding",
                        f"certificate's thresholds are not its path's chosen configuration "
                        f"(chosen={index!r})")
    try:
        theirs = thresholds_sha256(chosen)
    except ValueError as exc:
        raise RuleError("certificate_binding",
                        f"certificate's chosen thresholds are invalid: {exc}") from None
    ours = thresholds_sha256(gate)
    if ours != theirs:
        a, b = {**GATE_DEFAULTS, **check_thresholds(chosen)}, {**GATE_DEFAULTS, **gate}
        differ = sorted(k for k in GATE_KEYS if a.get(k) != b.get(k))
        raise RuleError(
            "certificate_binding",
            f"certificate certified thresholds sha256 {theirs}, but this gate has sha256 "
            f"{ours} (they differ in {differ}): a certificate vouches for its chosen "
            f"thresholds only")
    seen = certificate.get("seen")
    if seen is not None:
        want = seen.get("fingerprint") if isinstance(seen, Mapping) else None
        have = None if tuning is None else tuning.get("fingerprint")
        # a record is named by a digest: "seen" without one vouches for no record
        if not (isinstance(want, str) and _SHA256_RE.fullmatch(want)) or want != have:
            raise RuleError(
                "tuning_binding",
                f"certificate's thresholds have seen the episodes of record {want}, but this "
                f"version carries record {have}: export the certify step's tuning.json with "
                f"its certificate")


def _number(value: Any, key: str, *, lo: float, hi: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RuleError("bad_type", f"{key}={value!r} is not a number")
    f = float(value)
    if not math.isfinite(f) or f < lo or (hi is not None and f > hi):
        bound = f">= {lo:g}" if hi is None else f"in [{lo:g}, {hi:g}]"
        raise RuleError("bad_value", f"{key}={value!r} must be finite and {bound}")
    return f


def json_equal(a: Any, b: Any) -> bool:
    """Equal as JSON values: a boolean is never a number (``True == 1`` is Python's, not
    JSON's); numbers compare by value (``3 == 3.0``); lists item by item; objects key by key."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


class _BigInteger(ValueError):
    pass


def _safe_int(text: str) -> int:
    """An integer both loaders read exactly; a longer one is refused before ``int()`` (which
    would also refuse, past 4,300 digits, with another error)."""
    digits = text.lstrip("-")
    if len(digits) > 16 or int(digits) > _MAX_SAFE_INTEGER:
        raise _BigInteger(f"integer {text[:40]}{'...' if len(text) > 40 else ''} is beyond "
                          f"+-{_MAX_SAFE_INTEGER}, which every reader represents exactly")
    return int(text)


def _parse_json(raw: bytes, where: Path, *, allow_nan: bool = False) -> dict[str, Any]:
    try:
        obj = loads_strict(raw.decode("utf-8"), allow_nan=allow_nan, parse_int=_safe_int)
    except UnicodeDecodeError as exc:
        raise ArtifactError(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start})",
                            code="not_utf8") from None
    except json.JSONDecodeError as exc:
        raise ArtifactError(
            f"{where}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
            code="bad_json") from None
    except RecursionError:
        raise ArtifactError(f"{where}: JSON nested deeper than {_MAX_JSON_DEPTH} levels",
                            code="too_deep") from None
    except _BigInteger as exc:
        raise ArtifactError(f"{where}: not valid JSON ({exc})", code="bad_number") from None
    except ValueError as exc:
        raise ArtifactError(f"{where}: not valid JSON ({exc})", code="bad_json") from None
    if not isinstance(obj, dict):
        raise ArtifactError(f"{where}: must hold a JSON object, got {type(obj).__name__}",
                            code="bad_type")
    if _depth(obj) > _MAX_JSON_DEPTH:
        raise ArtifactError(f"{where}: JSON nested deeper than {_MAX_JSON_DEPTH} levels",
                            code="too_deep")
    return obj


def _depth(obj: Any) -> int:
    """Nesting depth of parsed JSON, without recursion."""
    deepest = 0
    stack = [(obj, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        if deepest > _MAX_JSON_DEPTH:
            break
        children = node.values() if isinstance(node, dict) else node if isinstance(
            node, list) else ()
        stack.extend((c, level + 1) for c in children if isinstance(c, (dict, list)))
    return deepest


def _check_file_format(data: Mapping[str, Any], name: str, version: int, where: Path) -> None:
    """:func:`_check_format` of the JSON file ``where``, failing as an :class:`ArtifactError`."""
    try:
        _check_format(data, name, version)
    except PortableFormatError as exc:
        raise ArtifactError(f"{where}: {exc}", code="format") from None


def read_regular_bytes(path: str | os.PathLike[str], *, what: str) -> bytes:
    """The bytes of a user's regular file (never a FIFO or device), within the JSON size cap.

    Raises :class:`~amv_calib.ConfigError` naming the file and the problem.
    """
    return read_regular(path, what=what, error=ConfigError, limit=MAX_JSON_BYTES)


def read_json_object(path: str | os.PathLike[str], *, what: str) -> dict[str, Any]:
    """A JSON object from a user's file, read as strictly as an artifact's: a regular file,
    UTF-8, no repeated key, no NaN or Infinity, at most 32 levels deep.

    Raises :class:`~amv_calib.ConfigError` naming the file and the problem.
    """
    p = Path(path)
    try:
        return _parse_json(read_regular_bytes(p, what=what), p)
    except ArtifactError as exc:
        raise ConfigError(str(exc)) from None


# -- references and aliases ----------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class _Resolved:
    path: Path
    alias: str | None = None
    manifest_sha256: str | None = None


def _split_alias(ref: str) -> tuple[str, str | None]:
    head, sep, tail = ref.rpartition("@")
    if sep and head and tail and "/" not in tail and os.sep not in tail:
        return head, tail
    return ref, None


def _locate(given: Path) -> Path:
    """The first existing spelling of a (possibly relative) model or version folder."""
    candidates = [given]
    if not given.is_absolute():
        base = models_dir()
        candidates.append(base / given)
        if given.parts and given.parts[0] == "models" and len(given.parts) > 1:
            candidates.append(base.joinpath(*given.parts[1:]))
    for cand in candidates:
        if cand.is_dir():
            return cand
    looked = ", ".join(str(c) for c in dict.fromkeys(candidates))
    raise ArtifactError(f"{given}: artifact folder does not exist (looked in {looked})")


def read_aliases(model_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate ``MODEL_DIR/aliases.json``; ``{}``-shaped when the file is absent.

    Returns
    -------
    dict
        ``{"format", "format_version", "name", "aliases": {ALIAS: {"version",
        "manifest_sha256", "updated_utc", "history": [...]}}}``.
    """
    mdir = Path(model_dir)
    path = mdir / ALIASES_FILE
    if not os.path.lexists(path):
        return {"format": ALIASES_FORMAT, "format_version": ALIASES_FORMAT_VERSION,
                "name": mdir.name, "aliases": {}}
    raw = read_file_in(mdir, ALIASES_FILE, what="alias file")
    if raw is None:  # removed since the check above
        raise ArtifactError(f"{path}: alias file is missing")
    data = _parse_json(raw, path)
    _check_file_format(data, ALIASES_FORMAT, ALIASES_FORMAT_VERSION, path)
    aliases = data.get("aliases")
    if not isinstance(aliases, dict):
        raise ArtifactError(f"{path}: 'aliases' must be an object")
    for alias, entry in aliases.items():
        where = f"{path}: alias {alias!r}"
        if not isinstance(entry, dict) or not isinstance(entry.get("version"), str):
            raise ArtifactError(f"{where} must be an object with a 'version' string")
        if not _VERSION_RE.fullmatch(entry["version"]):
            raise ArtifactError(f"{where}: version={entry['version']!r} is not vN")
        history = entry.get("history", [])
        if not isinstance(history, list) or not all(
            isinstance(h, dict) and isinstance(h.get("version"), str) for h in history
        ):
            raise ArtifactError(f"{where}: 'history' must be a list of {{'version': ...}}")
        if history and history[-1]["version"] != entry["version"]:
            raise ArtifactError(
                f"{where}: version={entry['version']!r} differs from the last history entry "
                f"{history[-1]['version']!r}"
            )
        sha = entry.get("manifest_sha256")
        if sha is not None and not (isinstance(sha, str) and _SHA256_RE.fullmatch(sha)):
            raise ArtifactError(f"{where}: manifest_sha256={sha!r} is not a sha256 hex digest")
    return data


def _resolve(ref: str | os.PathLike[str] | None) -> _Resolved:
    text = champion_reference() if ref is None else os.fspath(ref)
    if not text:
        raise ArtifactError("empty artifact reference")
    head, alias = _split_alias(text)
    folder = _locate(Path(head))
    if alias is None:
        if not (folder / MANIFEST_FILE).exists() and (
            (folder / ALIASES_FILE).exists()
            or any(_VERSION_RE.fullmatch(p.name) for p in folder.iterdir() if p.is_dir())
        ):
            raise ArtifactError(
                f"{folder}: is a model folder, not an artifact version; name a version "
                f"({folder}/vN) or an alias ({folder}@production)"
            )
        return _Resolved(path=folder)
    data = read_aliases(folder)
    entry = data["aliases"].get(alias)
    if entry is None:
        raise UnknownAliasError(unknown_alias_message(folder, alias, data["aliases"]))
    target = folder / entry["version"]
    if not target.is_dir():
        raise ArtifactError(
            f"{folder / ALIASES_FILE}: alias {alias!r} names {entry['version']}, but {target} "
            f"does not exist"
        )
    return _Resolved(path=target, alias=alias, manifest_sha256=entry.get("manifest_sha256"))


def unknown_alias_message(folder: Path, alias: str, known: Iterable[str]) -> str:
    """Why ``alias`` does not resolve in ``folder``: the known aliases, the closest of them
    (a typo is the usual cause), and how to create the alias."""
    import difflib

    names = sorted(known)
    close = difflib.get_close_matches(alias, names, n=1, cutoff=0.5)
    if not close:  # a prefix ("prod") is what a person usually shortens to
        close = [n for n in names if n.startswith(alias) or alias.startswith(n)][:1]
    hint = f"did you mean {close[0]}? " if close else ""
    return (f"{folder / ALIASES_FILE}: no alias {alias!r} (known aliases: "
            f"{', '.join(names) or 'none'}); {hint}to create it, promote a version: "
            f"amv-calib promote {folder.name} vN --alias {alias}")


def resolve_reference(ref: str | os.PathLike[str] | None = None) -> Path:
    """The version folder a reference names (see the module docstring).

    ``None`` means :func:`amv_calib.settings.champion_reference`. Raises
    :class:`~amv_calib.ArtifactError` for a missing folder, a bare model folder, or an
    unknown alias. The folder's contents are not checked; :func:`load_artifact` does that.
    """
    return _resolve(ref).path


# -- loading --------------------------------------------------------------------------
def _check_rel_path(rel: Any, manifest_path: Path) -> str:
    if not isinstance(rel, str) or not rel:
        raise ArtifactError(f"{manifest_path}: 'files' has a non-string or empty name {rel!r}",
                            code="bad_path")
    parts = rel.split("/")
    if rel.startswith("/") or "\\" in rel or any(p in ("", ".", "..") for p in parts):
        raise ArtifactError(
            f"{manifest_path}: 'files' entry {rel!r} is not a plain relative path inside "
            f"the artifact folder", code="bad_path"
        )
    if rel == MANIFEST_FILE:
        raise ArtifactError(f"{manifest_path}: 'files' must not list {MANIFEST_FILE} itself",
                            code="bad_path")
    return rel


def load_artifact(ref: str | os.PathLike[str] | None = None, *,
                  trusted_keys: KeysLike | None = None,
                  check_signature: bool = True) -> LoadedArtifact:
    """Load and verify one artifact version; never unpickles.

    Parameters
    ----------
    ref : str or path-like, optional
        A version folder or ``MODEL_DIR@ALIAS`` (see the module docstring); ``None`` loads
        :func:`amv_calib.settings.champion_reference`.
    trusted_keys : path-like or sequence of path-like, optional
        Public keys (PEM) of whoever may sign artifacts (one path, or several). When some
        are given, or else when ``$AMV_CALIB_TRUSTED_KEYS`` names some
        (:func:`amv_calib.settings.trusted_keys`), the version must carry a ``model.sig``
        that one of them verifies. An empty sequence names no key and refuses every
        artifact, and so does a ``$AMV_CALIB_TRUSTED_KEYS`` that is set but names no key
        (whatever is given here): signing is never switched off by a blank.
    check_signature : bool, default True
        False skips the signature check (``amv-calib sign`` uses it to check a version's
        structure before signing it); the gate never does.

    Returns
    -------
    LoadedArtifact

    Raises
    ------
    ArtifactError
        Naming the file and the problem, checked in this order: folder missing (or a bare
        model folder, or an unknown alias); trusted keys given or set but naming no key;
        ``manifest.json`` missing, not JSON, or changed
        since the alias was promoted; unknown ``format`` / ``format_version``; manifest
        fields missing or malformed; a listed file missing; a sha256 mismatch; a file in
        the folder that the manifest does not list; ``calibrator.json`` not JSON or
        invalid (unknown transform or column, non-finite coefficient, non-monotone
        isotonic table, ...); a feature map or kind that differs between the two files;
        invalid gate thresholds; with trusted keys, a missing signature or one that no
        trusted key verifies. The folder is read once, through one handle on it: only
        regular files are read (never a FIFO, a device, or a link, the version folder itself
        included), each within a size cap, and every check, the signature's included, judges
        the bytes read then. JSON nested deeper than 32 levels, or giving a key twice, is
        refused.
    """
    res = _resolve(ref)
    keys = _trusted_keys_in_force(trusted_keys) if check_signature else []
    folder = read_version_folder(res.path, keep=frozenset({SIGNATURE_FILE}))
    manifest_path = res.path / MANIFEST_FILE
    manifest = _read_manifest(res, folder, manifest_path)
    files = _listed_files(manifest["files"], manifest_path)
    _verify_files(folder, files)
    # after the structural checks, on the digests of the same bytes
    signed_by = verify_folder(folder, keys) if keys else None
    calibrator = _read_calibrator(folder.data[CALIBRATOR_FILE], res.path / CALIBRATOR_FILE,
                                  manifest, manifest_path)
    try:
        thresholds = check_thresholds(manifest["gate"])
    except RuleError as exc:
        raise ArtifactError(f"{manifest_path}: gate: {exc}", code=exc.code) from None
    _check_bindings(manifest, files, thresholds, manifest_path)
    return LoadedArtifact(
        path=res.path,
        manifest=manifest,
        calibrator=_with_gate_clamp(calibrator, thresholds["clamp"], manifest_path),
        thresholds=thresholds,
        name=manifest["name"],
        version=manifest["version"],
        alias=res.alias,
        files=files,
        signed_by=signed_by,
        contents=MappingProxyType({k: v for k, v in folder.data.items()
                                   if k != SIGNATURE_FILE}),
    )


def refusal_reason(exc: ArtifactError) -> str:
    """The reason a gate that refuses an artifact gives: ``artifact refused: [CODE] ...``."""
    return f"artifact refused: [{exc.code}] {exc}"


def _check_bindings(manifest: Mapping[str, Any], files: Mapping[str, str],
                    thresholds: Mapping[str, Any], manifest_path: Path) -> None:
    """The tuning record is a listed file whose hash is its fingerprint, and the
    certificate, if any, is bound to this calibrator, these thresholds and that record."""
    tuning = manifest.get("tuning")
    if tuning is not None:
        members = tuning.get("members") if isinstance(tuning, dict) else None
        if not isinstance(members, str) or members not in files:
            raise ArtifactError(f"{manifest_path}: tuning: members={members!r} must name a "
                                f"file the manifest lists", code="tuning_binding")
        if tuning.get("fingerprint") != files[members]:
            raise ArtifactError(
                f"{manifest_path}: tuning: fingerprint {tuning.get('fingerprint')!r} is not "
                f"the sha256 of {members} ({files[members]})", code="tuning_binding")
    cert = manifest.get("certificate")
    if cert is None:
        return
    try:
        check_certificate_binding(cert, calibrator_sha256=files[CALIBRATOR_FILE],
                                  gate=thresholds, tuning=tuning)
    except RuleError as exc:
        raise CertificateMismatchError(f"{manifest_path}: {exc}", code=exc.code) from None


def _trusted_keys_in_force(given: KeysLike | None) -> list[Path]:
    """The keys given, else those of the environment; a blank refuses (a deployment that set
    keys must not run unchecked)."""
    try:
        from_env = trusted_keys()
    except ConfigError as exc:
        raise ArtifactError(str(exc)) from None
    if given is None:
        return from_env
    keys = [Path(given)] if isinstance(given, (str, os.PathLike)) else [Path(k) for k in given]
    if not keys:
        raise ArtifactError(
            "trusted_keys names no key (an empty list): nothing can be verified; give the "
            "public key(s), or None to use $AMV_CALIB_TRUSTED_KEYS")
    return keys


def _listed_bytes(folder: VersionFolder, rel: str, what: str) -> bytes:
    """The bytes read of the JSON file ``rel``, or the error naming it and ``what`` it is."""
    where = folder.path / rel
    problem = folder.problem(rel)
    if problem is not None:
        raise ArtifactError(f"{where}: {what} {problem}", code="bad_file")
    if rel not in folder.data:
        raise ArtifactError(f"{where}: {what} is missing", code="missing_file")
    return folder.data[rel]


def _read_manifest(res: _Resolved, folder: VersionFolder,
                   manifest_path: Path) -> dict[str, Any]:
    """``manifest.json`` of the resolved version: unchanged since its alias was promoted, of
    a known format, with the required keys, a name and a version matching the folder."""
    raw_manifest = _listed_bytes(folder, MANIFEST_FILE, "manifest")
    if res.manifest_sha256 is not None:
        got = hashlib.sha256(raw_manifest).hexdigest()
        if got != res.manifest_sha256:
            raise ArtifactError(
                f"{manifest_path}: sha256 {got} differs from {res.manifest_sha256} recorded "
                f"when alias {res.alias!r} was promoted (manifest edited after promotion?); "
                f"verify the artifact and promote it again", code="alias_binding"
            )
    manifest = _parse_json(raw_manifest, manifest_path)
    _check_file_format(manifest, ARTIFACT_FORMAT, ARTIFACT_FORMAT_VERSION, manifest_path)
    missing = [k for k in _REQUIRED_MANIFEST_KEYS if k not in manifest]
    if missing:
        raise ArtifactError(f"{manifest_path}: lacks keys {missing}", code="missing_field")
    unknown = sorted(set(manifest) - _MANIFEST_KEYS)
    if unknown:
        raise ArtifactError(f"{manifest_path}: unknown keys {unknown}", code="unknown_field")
    for key in RULES["manifest"]["objects"]:
        if manifest.get(key) is not None and not isinstance(manifest[key], dict):
            raise ArtifactError(f"{manifest_path}: {key} must be an object", code="bad_type")
    cert = manifest.get("certificate")
    if cert is not None and not all(_is_number(cert.get(k))
                                    for k in RULES["certificate"]["numbers"]):
        raise ArtifactError(f"{manifest_path}: certificate must be an object with numbers "
                            f"alpha, delta and n", code="bad_type")
    name, version = manifest["name"], manifest["version"]
    if not isinstance(name, str):
        raise ArtifactError(f"{manifest_path}: name={name!r} must be a non-empty string",
                            code="bad_type")
    if not name:
        raise ArtifactError(f"{manifest_path}: name={name!r} must be a non-empty string",
                            code="bad_value")
    if not isinstance(version, str):
        raise ArtifactError(f"{manifest_path}: version={version!r} must look like 'v1'",
                            code="bad_type")
    if not _VERSION_RE.fullmatch(version):
        raise ArtifactError(f"{manifest_path}: version={version!r} must look like 'v1'",
                            code="bad_value")
    named = res.path.name
    if _VERSION_RE.fullmatch(named) and named != version:
        raise ArtifactError(
            f"{manifest_path}: version={version!r} but the folder is {named!r} "
            f"(copied or renamed by hand?)", code="folder_mismatch"
        )
    return manifest


def _is_number(value: Any) -> bool:
    """A JSON number: an int or a float, never a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _listed_files(files_field: Any, manifest_path: Path) -> dict[str, str]:
    """The manifest's ``files``: plain relative names to sha256 digests, the calibrator
    among them."""
    if not isinstance(files_field, dict):
        raise ArtifactError(f"{manifest_path}: 'files' must map file names to sha256 digests",
                            code="bad_type")
    files: dict[str, str] = {}
    for rel, digest in files_field.items():
        rel = _check_rel_path(rel, manifest_path)
        if not isinstance(digest, str) or not _SHA256_RE.fullmatch(digest):
            raise ArtifactError(
                f"{manifest_path}: 'files'[{rel!r}]={digest!r} is not a sha256 hex digest",
                code="bad_type" if not isinstance(digest, str) else "bad_value"
            )
        files[rel] = digest
    if CALIBRATOR_FILE not in files:
        raise ArtifactError(f"{manifest_path}: 'files' does not list {CALIBRATOR_FILE}",
                            code="missing_field")
    return files


def _verify_files(folder: VersionFolder, files: Mapping[str, str]) -> None:
    """Check every listed file read against its digest, and that no other file sits in the
    folder."""
    root = folder.path
    listed = f"file listed in {MANIFEST_FILE}"
    for rel in sorted(files):
        fpath = root / rel
        if rel == CALIBRATOR_FILE:
            _listed_bytes(folder, rel, listed)  # parsed later: read whole, within the JSON cap
        elif folder.problem(rel) is not None:
            raise ArtifactError(f"{fpath}: {listed} {folder.problem(rel)}", code="bad_file")
        elif rel not in folder.digests:
            raise ArtifactError(f"{fpath}: listed in {MANIFEST_FILE} but missing",
                                code="missing_file")
        got = folder.digests[rel]
        if got != files[rel]:
            raise ArtifactError(
                f"{fpath}: sha256 mismatch (tampered or truncated): {MANIFEST_FILE} lists "
                f"{files[rel]}, the file has {got}", code="hash_mismatch"
            )
    extra = sorted(folder.names() - set(files) - {MANIFEST_FILE, SIGNATURE_FILE})
    if extra:
        raise ArtifactError(
            f"{root / extra[0]}: not listed in {MANIFEST_FILE} (unlisted files: {extra}); "
            f"an artifact folder is immutable, export a new version instead",
            code="unlisted_file"
        )


def _read_calibrator(raw: bytes, cal_path: Path, manifest: Mapping[str, Any],
                     manifest_path: Path) -> PortableCalibrator:
    """The portable calibrator in ``raw``, whose feature map and kind the manifest repeats."""
    # NaN/Infinity tokens parse so that the calibrator's own check names the field.
    cal_data = _parse_json(raw, cal_path, allow_nan=True)
    try:
        calibrator = PortableCalibrator.from_dict(cal_data)
    except PortableFormatError as exc:
        raise ArtifactError(f"{cal_path}: {exc}", code="calibrator") from None
    try:
        manifest_map = FeatureMap.from_list(manifest["feature_map"])
    except PortableFormatError as exc:
        raise ArtifactError(f"{manifest_path}: feature_map: {exc}", code="calibrator") \
            from None
    if manifest_map != calibrator.feature_map:
        raise ArtifactError(
            f"{manifest_path}: feature_map {manifest_map.names} differs from "
            f"{CALIBRATOR_FILE}'s {calibrator.feature_map.names}", code="calibrator_binding"
        )
    if manifest["calibrator_kind"] != calibrator.kind:
        raise ArtifactError(
            f"{manifest_path}: calibrator_kind={manifest['calibrator_kind']!r} but "
            f"{CALIBRATOR_FILE} has kind={calibrator.kind!r}", code="calibrator_binding"
        )
    return calibrator


def _with_gate_clamp(calibrator: PortableCalibrator, clamp: list[float] | None,
                     manifest_path: Path) -> PortableCalibrator:
    """The calibrator under the gate's clamp, which must agree with its own if it has one."""
    if clamp is None:
        return calibrator
    gate_clamp = (clamp[0], clamp[1])
    if calibrator.clamp is not None and calibrator.clamp != gate_clamp:
        raise ArtifactError(
            f"{manifest_path}: gate clamp {list(gate_clamp)} differs from "
            f"{CALIBRATOR_FILE}'s clamp {list(calibrator.clamp)}", code="calibrator_binding"
        )
    if calibrator.clamp is None:
        return replace(calibrator, clamp=gate_clamp)
    return calibrator


def gate_from_artifact(
    cls: Callable[..., G],
    ref: str | os.PathLike[str] | LoadedArtifact | None = None,
    *,
    strict: bool = False,
    trusted_keys: KeysLike | None = None,
    **overrides: Any,
) -> G:
    """Build a gate from an artifact; a refused artifact gives a gate that always abstains.

    Parameters
    ----------
    cls : type
        The gate class (``amv_calib.gate.Gate``), called with keyword arguments.
    ref : str, path-like or LoadedArtifact, optional
        See :func:`load_artifact`; an artifact already loaded is used as it is (so that a
        caller who also needs the artifact reads the folder once).
    strict : bool, default False
        Re-raise :class:`~amv_calib.ArtifactError` instead of failing closed.
    trusted_keys : path-like or sequence of path-like, optional
        See :func:`load_artifact`: with trusted keys, an unsigned or wrongly signed
        artifact is refused like a tampered one.
    **overrides
        Keyword arguments for ``cls`` that win over the artifact's (``mode``,
        ``decision_log``, a threshold, ...).

    Returns
    -------
    gate
        ``cls(calibrator=..., lambda_cost_scale=..., delta_loss_threshold=...,
        epsilon_harm_bound=..., harm_price=..., planner=..., max_verifications=...,
        artifact_name=..., artifact_version=..., **overrides)``, ``harm_price`` only when
        the manifest has one (an older manifest leaves the gate's default, 0.0: no harm
        priced); when the artifact is refused and ``strict`` is
        false, ``cls(refusal="artifact refused: ...", **overrides)``, whose every decision is
        ABSTAIN with that reason.
    """
    try:
        art = ref if isinstance(ref, LoadedArtifact) else load_artifact(
            ref, trusted_keys=trusted_keys)
    except ArtifactError as exc:
        if strict:
            raise
        _log.warning("artifact refused, the gate will abstain: %s", exc)
        kept = {k: v for k, v in overrides.items() if k != "refusal"}
        return cls(refusal=refusal_reason(exc), **kept)
    t = art.thresholds
    kwargs: dict[str, Any] = {
        "calibrator": art.calibrator,
        "lambda_cost_scale": t["lambda_cost_scale"],
        "delta_loss_threshold": t["delta_loss_threshold"],
        "epsilon_harm_bound": t["epsilon_harm_bound"],
        "planner": t["planner"],
        "max_verifications": t["max_verifications"],
        "artifact_name": art.name,
        "artifact_version": art.version,
    }
    if "harm_price" in t:
        kwargs["harm_price"] = t["harm_price"]
    kwargs.update(overrides)
    return cls(**kwargs)
