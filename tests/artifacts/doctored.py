"""The doctored-artifact corpus: hand-edited copies of the shipped version, for both loaders.

Every field of the manifest, the certificate, the tuning record, the calibrator and the
signature is mutated in type, value, presence and binding. Where a mutation should get past the
sha256 check, the edited file is rehashed into the manifest (and the certificate rebound to the
new calibrator), so that the deeper rule is what is tested; the same edit is also left
unhashed. Signed cases are signed with a key the caller makes (``amv-calib keygen``).

The Python loader and the TypeScript loader must give every case the same verdict: accept, or
refuse with the same reason code (``tests/gate/test_doctored_corpus.py``).

usage: python tests/artifacts/doctored.py OUT [--key PRIVATE.pem]
    writes OUT/<case>/v1/ for each case and OUT/cases.json (name, ref, signed, expect)
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "models" / "amv-guard" / "v1"
MANIFEST = "manifest.json"
CALIBRATOR = "calibrator.json"
MEMBERS = "tuning-episodes.u64"
SIGNATURE = "model.sig"
OTHER_SHA = "ab" * 32

Json = Any
Edit = Callable[[Path], None]


class Raw(str):
    """JSON text written as it is (``21.0``, ``NaN``, a 30-digit integer), not as a string."""


@dataclass(frozen=True)
class Case:
    """One doctored copy.

    Attributes
    ----------
    name : str
        Unique, also the case's folder name.
    edit : callable
        Applied to a fresh copy of the shipped version folder.
    signed : bool
        Load it under the trusted key (the copy is signed before ``edit`` when true).
    expect : str or None
        The reason code both loaders must give (None: only that they agree); set for the
        edits a review found the TypeScript gate accepting.
    """

    name: str
    edit: Edit
    signed: bool = False
    expect: str | None = None


# -- writing JSON with raw tokens -------------------------------------------------------------
def dumps(obj: Json) -> bytes:
    """Sorted, indented JSON as the exporter writes it, :class:`Raw` values spliced in as text."""
    raws: list[str] = []

    def mark(o: Json) -> Json:
        if isinstance(o, Raw):
            raws.append(str(o))
            return f"\x00RAW{len(raws) - 1}\x00"
        if isinstance(o, dict):
            return {k: mark(v) for k, v in o.items()}
        if isinstance(o, list):
            return [mark(v) for v in o]
        return o

    text = json.dumps(mark(obj), sort_keys=True, indent=2, ensure_ascii=True, allow_nan=False)
    for i, raw in enumerate(raws):
        text = text.replace(json.dumps(f"\x00RAW{i}\x00"), raw)
    return (text + "\n").encode("utf-8")


def _write(path: Path, data: bytes) -> None:
    """Replace ``path`` (never writing through a hard link to the shipped file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def read_json(folder: Path, rel: str) -> Json:
    return json.loads((folder / rel).read_bytes())


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def rehash(folder: Path, rel: str, *, rebind: bool = True) -> None:
    """List the current sha256 of ``rel`` in the manifest; for the calibrator, ``rebind`` also
    names it in the certificate, and for the members file, in the tuning record and ``seen``."""
    manifest = read_json(folder, MANIFEST)
    digest = sha((folder / rel).read_bytes())
    manifest["files"][rel] = digest
    if rebind and rel == CALIBRATOR:
        manifest["certificate"]["calibrator_sha256"] = digest
    if rebind and rel == MEMBERS:
        manifest["tuning"]["fingerprint"] = digest
        manifest["certificate"]["seen"]["fingerprint"] = digest
    _write(folder / MANIFEST, dumps(manifest))


# -- edits --------------------------------------------------------------------------------------
_DELETE = object()


def _set(doc: Json, path: tuple[Any, ...], value: Any) -> None:
    *head, last = path
    for p in head:
        doc = doc[p]
    if value is _DELETE:
        del doc[last]
    else:
        doc[last] = value


def json_edit(rel: str, *changes: tuple[tuple[Any, ...], Any], hashed: bool | None = None
              ) -> Edit:
    """An edit setting (or deleting, value :data:`_DELETE`) fields of the JSON file ``rel``.

    ``hashed``: for a listed file, rehash it into the manifest (and rebind) when true."""
    def edit(folder: Path) -> None:
        doc = read_json(folder, rel)
        for path, value in changes:
            _set(doc, path, value)
        _write(folder / rel, dumps(doc))
        if hashed:
            rehash(folder, rel)
    return edit


def manifest_edit(*changes: tuple[tuple[Any, ...], Any]) -> Edit:
    return json_edit(MANIFEST, *changes)


def raw_edit(rel: str, fn: Callable[[bytes], bytes], *, hashed: bool = False) -> Edit:
    def edit(folder: Path) -> None:
        _write(folder / rel, fn((folder / rel).read_bytes()))
        if hashed:
            rehash(folder, rel, rebind=True)
    return edit


def both(*edits: Edit) -> Edit:
    def edit(folder: Path) -> None:
        for e in edits:
            e(folder)
    return edit


def nothing(folder: Path) -> None:
    """The shipped version as it is (both loaders accept it)."""


#: One value of each JSON type and a few edge values, by label.
TYPES: dict[str, Any] = {
    "null": None, "true": True, "false": False, "zero": 0, "one": 1, "neg": -1, "half": 0.5,
    "str": "x", "empty_str": "", "list": [], "obj": {}, "float1": Raw("1.0"),
    "big": Raw("123456789012345678901234567890"),
}


def _type_cases(prefix: str, path: tuple[Any, ...], labels: tuple[str, ...] | None = None,
                rel: str = MANIFEST, hashed: bool | None = None) -> Iterator[Case]:
    yield Case(f"{prefix}-absent", json_edit(rel, (path, _DELETE), hashed=hashed))
    for label, value in TYPES.items():
        if labels is None or label in labels:
            yield Case(f"{prefix}-{label}", json_edit(rel, (path, value), hashed=hashed))


def _gate_everywhere(key: str, value: Any) -> Edit:
    """Set a threshold in the gate, the certificate's thresholds and its chosen path entry:
    past the binding, so the threshold's own rule is what is tested."""
    def edit(folder: Path) -> None:
        m = read_json(folder, MANIFEST)
        chosen = m["certificate"]["chosen"]
        for target in (m["gate"], m["certificate"]["thresholds"], m["certificate"]["path"][chosen]):
            if value is _DELETE:
                target.pop(key, None)
            else:
                target[key] = copy.deepcopy(value)
        _write(folder / MANIFEST, dumps(m))
    return edit


def _members(fn: Callable[[bytes], bytes], *, files: bool, fingerprint: bool,
             seen: bool) -> Edit:
    """Change the tuning record's members file; list its new sha256 where asked."""
    def edit(folder: Path) -> None:
        data = fn((folder / MEMBERS).read_bytes())
        _write(folder / MEMBERS, data)
        m = read_json(folder, MANIFEST)
        digest = sha(data)
        if files:
            m["files"][MEMBERS] = digest
        if fingerprint:
            m["tuning"]["fingerprint"] = digest
        if seen:
            m["certificate"]["seen"]["fingerprint"] = digest
        _write(folder / MANIFEST, dumps(m))
    return edit


def _remove(rel: str) -> Edit:
    return lambda folder: (folder / rel).unlink()


def _add(rel: str, data: bytes) -> Edit:
    return lambda folder: _write(folder / rel, data)


def _symlink(rel: str) -> Edit:
    def edit(folder: Path) -> None:
        target = folder / rel
        keep = folder.parent / f"{rel}.real"
        os.replace(target, keep)
        target.symlink_to(keep)
    return edit


def _deep(levels: int) -> Raw:
    return Raw("[" * levels + "]" * levels)


def cases() -> list[Case]:
    """Every case of the corpus, in a fixed order."""
    out: list[Case] = [Case("shipped", nothing)]
    m = json.loads((SHIPPED / MANIFEST).read_bytes())
    cert = m["certificate"]
    chosen = cert["chosen"]

    # the edits a review found the TypeScript gate PROCEEDing on; each must be refused
    other = (chosen - 1) % len(cert["path"])
    out += [
        Case("review-chosen-other-entry", manifest_edit((("certificate", "chosen"), other)),
             expect="certificate_binding"),
        Case("review-path-null", manifest_edit((("certificate", "path"), None)),
             expect="certificate_binding"),
        Case("review-chosen-true", manifest_edit((("certificate", "chosen"), True)),
             expect="certificate_binding"),
        Case("review-chosen-float", manifest_edit((("certificate", "chosen"), Raw(f"{chosen}.0"))),
             expect="certificate_binding"),
        Case("review-seen-other-record",
             manifest_edit((("certificate", "seen", "fingerprint"), OTHER_SHA)),
             expect="tuning_binding"),
        Case("review-tuning-removed", manifest_edit((("tuning",), _DELETE)),
             expect="tuning_binding"),
        Case("review-tuning-fingerprint-not-members-sha",
             both(manifest_edit((("tuning", "fingerprint"), OTHER_SHA),
                                (("certificate", "seen", "fingerprint"), OTHER_SHA))),
             expect="tuning_binding"),
        Case("review-members-missing-file",
             manifest_edit((("tuning", "members"), "no-such-file.u64")),
             expect="tuning_binding"),
        Case("review-format-version-true", manifest_edit((("format_version",), True)),
             expect="format"),
        Case("review-alpha-true", manifest_edit((("certificate", "alpha"), True)),
             expect="bad_type"),
        Case("review-huge-integer", manifest_edit((("training_data", "rows"), Raw("9" * 4301))),
             expect="bad_number"),
    ]

    # every top-level manifest field: presence and type
    for key in sorted(m):
        out += _type_cases(f"manifest.{key}", (key,),
                           ("null", "true", "one", "half", "str", "list", "obj"))
    out.append(Case("manifest.unknown-key", manifest_edit((("surprise",), 1))))
    out += [Case(f"manifest.version-{v}", manifest_edit((("version",), v)))
            for v in ("v2", "v01", "1", "V1", "v1 ")]
    out += [Case(f"manifest.format-{i}", manifest_edit((("format",), v)))
            for i, v in enumerate(("amv-calib/Artifact", "amv-calib/artifact ", ""))]
    out += [Case(f"manifest.format_version-{label}", manifest_edit((("format_version",), v)))
            for label, v in (("float", Raw("1.0")), ("two", 2), ("exp", Raw("1e0")),
                             ("digit-str", "1"), ("zero", 0))]
    out.append(Case("manifest.name-empty", manifest_edit((("name",), ""))))

    # the files list
    out += [
        Case("files.uppercase-digest", manifest_edit((("files", CALIBRATOR),
                                                      m["files"][CALIBRATOR].upper()))),
        Case("files.short-digest", manifest_edit((("files", CALIBRATOR), "ab"))),
        Case("files.digest-number", manifest_edit((("files", CALIBRATOR), 5))),
        Case("files.calibrator-unlisted", manifest_edit((("files", CALIBRATOR), _DELETE))),
        Case("files.parent-path", manifest_edit((("files", "../x"), OTHER_SHA))),
        Case("files.double-slash", manifest_edit((("files", "a//b"), OTHER_SHA))),
        Case("files.dot", manifest_edit((("files", "./profile.json"), OTHER_SHA))),
        Case("files.absolute", manifest_edit((("files", "/etc/passwd"), OTHER_SHA))),
        Case("files.backslash", manifest_edit((("files", "a\\b"), OTHER_SHA))),
        Case("files.lists-manifest", manifest_edit((("files", MANIFEST), OTHER_SHA))),
        Case("files.lists-absent-file", manifest_edit((("files", "ghost.txt"), OTHER_SHA))),
        Case("files.wrong-digest", manifest_edit((("files", "profile.json"), OTHER_SHA))),
        Case("files.wrong-digest-joblib", manifest_edit((("files", "calibrator.joblib"),
                                                         OTHER_SHA))),
        Case("folder.listed-file-removed", _remove("comparison.md")),
        Case("folder.calibrator-removed", _remove(CALIBRATOR)),
        Case("folder.unlisted-file", _add("notes.txt", b"hello\n")),
        Case("folder.profile-edited", raw_edit("profile.json", lambda b: b + b" ")),
        Case("folder.profile-edited-rehashed",
             raw_edit("profile.json", lambda b: b + b" ", hashed=True)),
        Case("folder.png-truncated", raw_edit("frontier.png", lambda b: b[:100])),
        Case("folder.calibrator-symlink", _symlink(CALIBRATOR)),
        Case("folder.profile-symlink", _symlink("profile.json")),
    ]

    # JSON text of the manifest
    text = (SHIPPED / MANIFEST).read_bytes()
    out += [
        Case("json.duplicate-key", raw_edit(MANIFEST, lambda b: b.replace(
            b'"name": "amv-guard"', b'"name": "amv-guard", "name": "other"', 1))),
        Case("json.nan", manifest_edit((("metrics", "auc"), Raw("NaN")))),
        Case("json.infinity", manifest_edit((("metrics", "auc"), Raw("-Infinity")))),
        Case("json.overflowing-float", manifest_edit((("metrics", "auc"), Raw("1e400")))),
        Case("json.negative-zero", manifest_edit((("metrics", "auc"), Raw("-0")))),
        Case("json.safe-integer", manifest_edit((("metrics", "n"), Raw("9007199254740991")))),
        Case("json.unsafe-integer", manifest_edit((("metrics", "n"), Raw("9007199254740992")))),
        Case("json.unsafe-negative", manifest_edit((("metrics", "n"),
                                                    Raw("-9007199254740992")))),
        Case("json.big-float", manifest_edit((("metrics", "n"), Raw("9007199254740993.0")))),
        Case("json.deep-32", manifest_edit((("metrics", "deep"), _deep(30)))),
        Case("json.deep-33", manifest_edit((("metrics", "deep"), _deep(31)))),
        Case("json.bom", raw_edit(MANIFEST, lambda b: b"\xef\xbb\xbf" + b)),
        Case("json.not-utf8", raw_edit(MANIFEST, lambda b: b.replace(b"amv-guard", b"amv\xff", 1))),
        Case("json.top-level-list", raw_edit(MANIFEST, lambda b: b"[" + b + b"]")),
        Case("json.trailing-data", raw_edit(MANIFEST, lambda b: b + b"{}")),
        Case("json.truncated", raw_edit(MANIFEST, lambda b: b[: len(text) // 2])),
        Case("json.empty", raw_edit(MANIFEST, lambda b: b"")),
        Case("json.lone-surrogate", manifest_edit((("metrics", "note"), "\ud800"))),
        Case("json.control-char", raw_edit(MANIFEST, lambda b: b.replace(
            b'"amv-guard"', b'"amv\x01guard"', 1))),
        Case("manifest.removed", _remove(MANIFEST)),
    ]

    # the gate thresholds: alone (the certificate then differs) and with the certificate
    values = {"null": None, "true": True, "str": "x", "neg": -1, "half": 0.5, "two": 2,
              "float3": Raw("3.0"), "big": Raw("1e300"), "list": [0.1, 0.2], "obj": {},
              "negzero": Raw("-0.0")}
    for key in m["gate"]:
        out.append(Case(f"gate.{key}-absent", manifest_edit((("gate", key), _DELETE))))
        out.append(Case(f"gate.{key}-absent-everywhere", _gate_everywhere(key, _DELETE)))
        for label, v in values.items():
            out.append(Case(f"gate.{key}-{label}", manifest_edit((("gate", key), v))))
            out.append(Case(f"gate.{key}-{label}-everywhere", _gate_everywhere(key, v)))
    out += [
        Case("gate.planner-myopic-everywhere", _gate_everywhere("planner", "myopic")),
        Case("gate.planner-unknown-everywhere", _gate_everywhere("planner", "greedy")),
        Case("gate.epsilon-above-one-everywhere",
             _gate_everywhere("epsilon_harm_bound", 1.5)),
        Case("gate.clamp-valid-everywhere", _gate_everywhere("clamp", [0.01, 0.99])),
        Case("gate.clamp-reversed-everywhere", _gate_everywhere("clamp", [0.9, 0.1])),
        Case("gate.clamp-three-everywhere", _gate_everywhere("clamp", [0.1, 0.5, 0.9])),
        Case("gate.clamp-bool-everywhere", _gate_everywhere("clamp", [False, True])),
        Case("gate.clamp-above-one-everywhere", _gate_everywhere("clamp", [0.1, 1.5])),
        Case("gate.unknown-key-everywhere", _gate_everywhere("extra", 1)),
        Case("gate.not-object", manifest_edit((("gate",), [1, 2]))),
    ]

    # the certificate: every field in type and presence, and its bindings
    for key in sorted(cert):
        out += _type_cases(f"certificate.{key}", ("certificate", key),
                           ("null", "true", "one", "half", "str", "list", "obj", "float1"))
    out += [
        Case("certificate.null", manifest_edit((("certificate",), None))),
        Case("certificate.absent", manifest_edit((("certificate",), _DELETE))),
        Case("certificate.alpha-false", manifest_edit((("certificate", "alpha"), False))),
        Case("certificate.n-big", manifest_edit((("certificate", "n"), Raw("1" * 20)))),
        Case("certificate.chosen-next", manifest_edit((("certificate", "chosen"), chosen + 1))),
        Case("certificate.chosen-negative", manifest_edit((("certificate", "chosen"), -1))),
        Case("certificate.chosen-past-end",
             manifest_edit((("certificate", "chosen"), len(cert["path"])))),
        Case("certificate.chosen-string", manifest_edit((("certificate", "chosen"), str(chosen)))),
        Case("certificate.chosen-exponent",
             manifest_edit((("certificate", "chosen"), Raw(f"{chosen / 10}e1")))),
        Case("certificate.chosen-huge", manifest_edit((("certificate", "chosen"), Raw("9" * 30)))),
        Case("certificate.path-empty", manifest_edit((("certificate", "path"), []))),
        Case("certificate.path-object", manifest_edit((("certificate", "path"), {"0": 1}))),
        Case("certificate.path-entry-differs",
             manifest_edit((("certificate", "path", chosen, "harm_price"), 13.0))),
        Case("certificate.path-entry-bool",
             manifest_edit((("certificate", "path", chosen, "max_verifications"), True))),
        Case("certificate.path-entry-float",
             manifest_edit((("certificate", "path", chosen, "max_verifications"), Raw("3.0")))),
        Case("certificate.path-entry-extra",
             manifest_edit((("certificate", "path", chosen, "extra"), 1))),
        Case("certificate.thresholds-differ",
             manifest_edit((("certificate", "thresholds", "harm_price"), 13.0),
                           (("certificate", "path", chosen, "harm_price"), 13.0))),
        Case("certificate.thresholds-negzero",
             manifest_edit((("certificate", "thresholds", "clamp"), None),
                           (("certificate", "thresholds", "harm_price"), Raw("-0.0")),
                           (("certificate", "path", chosen, "harm_price"), Raw("-0.0")),
                           (("gate", "harm_price"), 0.0))),
        Case("certificate.thresholds-int-for-float",
             manifest_edit((("certificate", "thresholds", "harm_price"), 12),
                           (("certificate", "path", chosen, "harm_price"), 12))),
        Case("certificate.thresholds-no-harm-price",
             manifest_edit((("certificate", "thresholds", "harm_price"), _DELETE),
                           (("certificate", "path", chosen, "harm_price"), _DELETE))),
        Case("certificate.calibrator-sha-other",
             manifest_edit((("certificate", "calibrator_sha256"), OTHER_SHA))),
        Case("certificate.calibrator-sha-upper", manifest_edit(
            (("certificate", "calibrator_sha256"), cert["calibrator_sha256"].upper()))),
        Case("certificate.seen-no-fingerprint",
             manifest_edit((("certificate", "seen", "fingerprint"), _DELETE))),
        Case("certificate.seen-fingerprint-true",
             manifest_edit((("certificate", "seen", "fingerprint"), True))),
        Case("certificate.seen-fingerprint-null-no-tuning",
             manifest_edit((("certificate", "seen", "fingerprint"), None),
                           (("tuning",), _DELETE))),
        Case("certificate.seen-number-no-tuning",
             manifest_edit((("certificate", "seen"), 5), (("tuning",), _DELETE))),
        Case("certificate.seen-absent-no-tuning",
             manifest_edit((("certificate", "seen"), _DELETE), (("tuning",), _DELETE))),
    ]

    # the tuning record: every field, and its binding to the members file and to "seen"
    for key in sorted(m["tuning"]):
        out += _type_cases(f"tuning.{key}", ("tuning", key),
                           ("null", "true", "one", "str", "list", "obj"))
    out += [
        Case("tuning.null", manifest_edit((("tuning",), None))),
        Case("tuning.list", manifest_edit((("tuning",), []))),
        Case("tuning.members-calibrator", manifest_edit((("tuning", "members"), CALIBRATOR))),
        Case("tuning.members-edited", _members(lambda b: b[:-8], files=False,
                                               fingerprint=False, seen=False)),
        Case("tuning.members-edited-listed", _members(lambda b: b[:-8], files=True,
                                                      fingerprint=False, seen=False)),
        Case("tuning.members-edited-fingerprinted", _members(lambda b: b[:-8], files=True,
                                                             fingerprint=True, seen=False)),
        Case("tuning.members-edited-all", _members(lambda b: b[:-8], files=True,
                                                   fingerprint=True, seen=True)),
        Case("tuning.members-removed", _remove(MEMBERS)),
        Case("tuning.members-unlisted",
             both(manifest_edit((("files", MEMBERS), _DELETE)), _remove(MEMBERS))),
        Case("tuning.fingerprint-upper",
             manifest_edit((("tuning", "fingerprint"), m["tuning"]["fingerprint"].upper()))),
    ]

    # the calibrator: every field, unhashed, and rehashed with the certificate rebound
    cal = json.loads((SHIPPED / CALIBRATOR).read_bytes())
    for hashed in (False, True):
        tag = "rehashed" if hashed else "unhashed"
        for key in sorted(cal):
            out += _type_cases(f"calibrator.{key}-{tag}", (key,),
                               ("null", "true", "one", "half", "str", "list", "obj", "float1"),
                               rel=CALIBRATOR, hashed=hashed)
        for label, v in (("nan", Raw("NaN")), ("inf", Raw("Infinity")), ("true", True),
                         ("str", "1"), ("big", Raw("1" * 20)), ("zero", 0)):
            out.append(Case(f"calibrator.coef0-{label}-{tag}",
                            json_edit(CALIBRATOR, (("coef", 0), v), hashed=hashed)))
        out += [
            Case(f"calibrator.coef-short-{tag}",
                 json_edit(CALIBRATOR, (("coef",), cal["coef"][:-1]), hashed=hashed)),
            Case(f"calibrator.coef-changed-{tag}",
                 json_edit(CALIBRATOR, (("coef", 0), 0.5), hashed=hashed)),
            Case(f"calibrator.kind-isotonic-{tag}",
                 json_edit(CALIBRATOR, (("kind",), "isotonic"), hashed=hashed)),
            Case(f"calibrator.clamp-valid-{tag}",
                 json_edit(CALIBRATOR, (("clamp",), [0.01, 0.99]), hashed=hashed)),
            Case(f"calibrator.clamp-reversed-{tag}",
                 json_edit(CALIBRATOR, (("clamp",), [0.99, 0.01]), hashed=hashed)),
            Case(f"calibrator.unknown-key-{tag}",
                 json_edit(CALIBRATOR, (("extra",), 1), hashed=hashed)),
            Case(f"calibrator.term-transform-{tag}",
                 json_edit(CALIBRATOR, (("feature_map", 0, "transform"), "exp"), hashed=hashed)),
            Case(f"calibrator.term-column-{tag}",
                 json_edit(CALIBRATOR, (("feature_map", 0, "column"), "age"), hashed=hashed)),
            Case(f"calibrator.term-eps-{tag}",
                 json_edit(CALIBRATOR, (("feature_map", 0, "eps"), 0.7), hashed=hashed)),
            Case(f"calibrator.term-eps-true-{tag}",
                 json_edit(CALIBRATOR, (("feature_map", 0, "eps"), True), hashed=hashed)),
            Case(f"calibrator.term-scale-{tag}",
                 json_edit(CALIBRATOR, (("feature_map", 1, "scale"), -1.0), hashed=hashed)),
            Case(f"calibrator.term-removed-{tag}",
                 json_edit(CALIBRATOR, (("feature_map", 18), _DELETE), (("coef", 18), _DELETE),
                           hashed=hashed)),
            Case(f"calibrator.json-nan-token-{tag}",
                 json_edit(CALIBRATOR, (("intercept",), Raw("NaN")), hashed=hashed)),
            Case(f"calibrator.not-json-{tag}",
                 raw_edit(CALIBRATOR, lambda b: b[:-10], hashed=hashed)),
        ]
    out += [
        Case("calibrator.manifest-kind-differs", manifest_edit((("calibrator_kind",),
                                                                "isotonic"))),
        Case("calibrator.manifest-map-differs",
             manifest_edit((("feature_map", 0, "eps"), 1e-4))),
        Case("calibrator.manifest-map-invalid",
             manifest_edit((("feature_map", 0, "transform"), "exp"))),
        Case("calibrator.clamp-differs-from-gate",
             both(json_edit(CALIBRATOR, (("clamp",), [0.02, 0.98]), hashed=True),
                  _gate_everywhere("clamp", [0.01, 0.99]))),
    ]

    out += _kind_cases()

    # the signature (under a trusted key the test makes)
    out += [
        Case("signature.signed", nothing, signed=True),
        Case("signature.unsigned", _remove(SIGNATURE), signed=True, expect="signature"),
        Case("signature.manifest-edited-after",
             manifest_edit((("metrics", "auc"), 0.99)), signed=True, expect="signature"),
        Case("signature.file-edited-rehashed",
             raw_edit("profile.json", lambda b: b + b" ", hashed=True), signed=True,
             expect="signature"),
        Case("signature.garbage", _add(SIGNATURE, b"not a bundle"), signed=True,
             expect="signature"),
        Case("signature.json-not-bundle", _add(SIGNATURE, b"{}"), signed=True,
             expect="signature"),
        Case("signature.payload-flipped", raw_edit(SIGNATURE, _flip_payload), signed=True,
             expect="signature"),
        Case("signature.sig-flipped", raw_edit(SIGNATURE, _flip_sig), signed=True,
             expect="signature"),
        Case("signature.hint-other", raw_edit(SIGNATURE, _other_hint), signed=True,
             expect="signature"),
        Case("signature.unlisted-file-added", _add("notes.txt", b"x"), signed=True,
             expect="unlisted_file"),
        Case("signature.hash-mismatch-first", raw_edit("profile.json", lambda b: b + b" "),
             signed=True, expect="hash_mismatch"),
    ]
    names = [c.name for c in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    assert not dup, f"case names must be unique: {dup}"
    return out


_V2 = ((("format_version",), 2), (("kinds",), ["event", "other"]),
       (("kind_intercept",), [0.5, 0.0]))


def _kinded(*changes: tuple[tuple[Any, ...], Any], term_kind: Any = None,
            manifest_kind: Any = _DELETE, hashed: bool = True) -> Edit:
    """The shipped calibrator made kind-aware (:data:`_V2`), then ``changes``; with
    ``term_kind``, term 1 carries it in calibrator.json and ``manifest_kind`` (default the
    same) in the manifest's feature map. Rehashed (and the certificate rebound) unless not
    ``hashed``, so that the kind rules are what is tested."""
    # a fresh list each time: a later edit of an element must not reach _V2
    cal = [(path, copy.deepcopy(v) if isinstance(v, list) else v)
           for path, v in (*_V2, *changes)]
    edits = []
    if term_kind is not None:
        cal.append((("feature_map", 1, "kind"), term_kind))
        in_manifest = term_kind if manifest_kind is _DELETE else manifest_kind
        if in_manifest is not None:
            edits.append(manifest_edit((("feature_map", 1, "kind"), in_manifest)))
    edits.append(json_edit(CALIBRATOR, *cal, hashed=hashed))
    return both(*edits)


def _kind_cases() -> list[Case]:
    """The memory-kind fields of a format_version 2 calibrator, valid and doctored."""
    three = ["event", "fact", "other"]
    return [
        Case("kinds.valid", _kinded()),
        Case("kinds.valid-term-kind", _kinded(term_kind="event")),
        Case("kinds.valid-only-other", _kinded((("kinds",), ["other"]),
                                               (("kind_intercept",), [0.0]))),
        # code-point order: U+FF5E before U+1F600 (UTF-16 code units would say otherwise)
        Case("kinds.valid-code-point-order",
             _kinded((("kinds",), ["other", "\uff5e", "\U0001f600"]),
                     (("kind_intercept",), [0.0, 0.1, 0.2]))),
        Case("kinds.valid-unhashed", _kinded(hashed=False)),
        Case("kinds.unsorted", _kinded((("kinds",), ["other", "event"]))),
        Case("kinds.unsorted-utf16", _kinded((("kinds",), ["other", "\U0001f600", "\uff5e"]),
                                             (("kind_intercept",), [0.0, 0.1, 0.2]))),
        Case("kinds.duplicate", _kinded((("kinds",), ["event", "event", "other"]),
                                        (("kind_intercept",), [0.5, 0.5, 0.0]))),
        Case("kinds.no-other", _kinded((("kinds",), ["event", "fact"]))),
        Case("kinds.empty", _kinded((("kinds",), []), (("kind_intercept",), []))),
        Case("kinds.not-a-list", _kinded((("kinds",), "other"), (("kind_intercept",), [0.0]))),
        Case("kinds.null", _kinded((("kinds",), None))),
        Case("kinds.item-number", _kinded((("kinds",), [1, "other"]))),
        Case("kinds.item-empty", _kinded((("kinds",), ["", "other"]))),
        Case("kinds.item-long", _kinded((("kinds",), ["e" * 65, "other"]))),
        Case("kinds.item-64", _kinded((("kinds",), ["e" * 64, "other"]))),
        Case("kinds.item-astral-64", _kinded((("kinds",), ["other", "\U0001f600" * 64]))),
        Case("kinds.intercept-short", _kinded((("kinds",), three))),
        Case("kinds.intercept-long", _kinded((("kind_intercept",), [0.5, 0.0, 1.0]))),
        Case("kinds.intercept-nan", _kinded((("kind_intercept", 0), Raw("NaN")))),
        Case("kinds.intercept-inf", _kinded((("kind_intercept", 1), Raw("-Infinity")))),
        Case("kinds.intercept-str", _kinded((("kind_intercept", 0), "0.5"))),
        Case("kinds.intercept-true", _kinded((("kind_intercept", 0), True))),
        Case("kinds.intercept-big", _kinded((("kind_intercept", 0), Raw("1" * 20)))),
        Case("kinds.intercept-missing", _kinded((("kind_intercept",), _DELETE))),
        Case("kinds.intercept-not-a-list", _kinded((("kind_intercept",), 0.5))),
        Case("kinds.term-kind-unknown", _kinded(term_kind="fact")),
        Case("kinds.term-kind-number", _kinded(term_kind=3)),
        Case("kinds.term-kind-empty", _kinded(term_kind="")),
        Case("kinds.term-kind-not-in-manifest", _kinded(term_kind="event", manifest_kind=None)),
        Case("kinds.term-kind-manifest-other", _kinded(term_kind="event",
                                                       manifest_kind="other")),
        Case("kinds.version-1-with-kinds", _kinded((("format_version",), 1))),
        Case("kinds.version-1-term-kind", both(
            manifest_edit((("feature_map", 1, "kind"), "other")),
            json_edit(CALIBRATOR, (("feature_map", 1, "kind"), "other"), hashed=True))),
        Case("kinds.version-2-without-kinds",
             json_edit(CALIBRATOR, (("format_version",), 2), hashed=True)),
        Case("kinds.version-3", _kinded((("format_version",), 3))),
        Case("kinds.version-2-float", _kinded((("format_version",), Raw("2.0")))),
        Case("kinds.version-2-string", _kinded((("format_version",), "2"))),
    ]


def _bundle_edit(fn: Callable[[dict[str, Any]], None]) -> Callable[[bytes], bytes]:
    def edit(raw: bytes) -> bytes:
        doc = json.loads(raw)
        fn(doc)
        return json.dumps(doc).encode()
    return edit


def _flip_b64(text: str) -> str:
    import base64

    data = bytearray(base64.b64decode(text))
    data[len(data) // 2] ^= 1
    return base64.b64encode(bytes(data)).decode()


def _flip_payload(raw: bytes) -> bytes:
    def fn(doc: dict[str, Any]) -> None:
        env = doc["dsseEnvelope"]
        env["payload"] = _flip_b64(env["payload"])
    return _bundle_edit(fn)(raw)


def _flip_sig(raw: bytes) -> bytes:
    def fn(doc: dict[str, Any]) -> None:
        sig = doc["dsseEnvelope"]["signatures"][0]
        sig["sig"] = _flip_b64(sig["sig"])
    return _bundle_edit(fn)(raw)


def _other_hint(raw: bytes) -> bytes:
    def fn(doc: dict[str, Any]) -> None:
        doc["verificationMaterial"]["publicKey"]["hint"] = OTHER_SHA
    return _bundle_edit(fn)(raw)


def build(out: Path, *, private_key: Path | None = None,
          source: Path = SHIPPED) -> list[dict[str, Any]]:
    """Write every case under ``out`` and ``out/cases.json``; returns its entries.

    A signed case is signed with ``private_key`` before its edit; without a key, the signed
    cases are left out.
    """
    from amv_calib.artifacts import sign_artifact

    out.mkdir(parents=True, exist_ok=True)
    signed_base = None
    if private_key is not None:
        signed_base = out / "_signed" / "v1"
        shutil.copytree(source, signed_base)
        sign_artifact(signed_base, private_key)
    entries = []
    for case in cases():
        if case.signed and signed_base is None:
            continue
        folder = out / case.name / "v1"
        # hard links: an edit replaces the file it changes (see _write), never writes through
        shutil.copytree(signed_base if case.signed else source, folder, copy_function=os.link)
        case.edit(folder)
        entries.append({"name": case.name, "ref": str(folder), "signed": case.signed,
                        "expect": case.expect})
    (out / "cases.json").write_text(json.dumps(entries, indent=2) + "\n")
    return entries


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="an empty or new folder")
    ap.add_argument("--key", type=Path, help="private key to sign the signed cases with")
    args = ap.parse_args(argv)
    entries = build(args.out, private_key=args.key)
    print(f"{len(entries)} cases written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
