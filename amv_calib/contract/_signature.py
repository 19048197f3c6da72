"""Signature of an artifact version: ``model.sig`` beside ``manifest.json``, checked by keys.

An artifact version is signed with the OpenSSF ``model-signing`` library (key-based, no
network): ``model.sig`` is a Sigstore bundle whose DSSE envelope holds an in-toto statement
listing the sha256 of every file of the version folder, ``manifest.json`` included (which
itself lists every file's sha256), signed with ECDSA over the envelope's PAE. A gate given
trusted public keys loads a version only if one of them verifies its signature; anything
unsigned, signed by another key, or changed after signing is refused (and the gate ABSTAINs).

The check is done here, on bytes already in memory, rather than by ``model_signing``'s
verifier, which reads the folder from disk again: the digests the signature vouches for are
compared with those of exactly the bytes the loader read (:mod:`._folder`), and the gate is
built from those same bytes. The rules are those of ``model_signing`` 1.x for key-based
signatures (bundle media type, DSSE payload type, in-toto statement and predicate type,
the key hint, ECDSA with the hash of the key's curve, the root digest over the resources),
stricter where a folder could otherwise differ from what was signed: every file of the
folder (``model.sig`` aside) must be covered, and every covered file present. Only the
signature format of ``model_signing`` 1.0 and later is accepted.

``cryptography`` is imported only when a signature is checked, so ``import amv_calib.gate``
stays numpy and the standard library.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from amv_calib.contract._files import read_regular
from amv_calib.contract._folder import VersionFolder, read_version_folder
from amv_calib.contract._json import loads_strict
from amv_calib.exceptions import ArtifactError

#: The signature file of a version folder (not listed in the manifest, which it covers).
SIGNATURE_FILE: Final = "model.sig"

_BUNDLE_MEDIA_TYPE: Final = "application/vnd.dev.sigstore.bundle.v0.3+json"
_PAYLOAD_TYPE: Final = "application/vnd.in-toto+json"
_STATEMENT_TYPE: Final = "https://in-toto.io/Statement/v1"
_PREDICATE_TYPE: Final = "https://model_signing/signature/v1.0"
#: Hash of the ECDSA signature for each curve ``model_signing`` signs with.
_CURVE_HASHES: Final = {"secp256r1": "SHA256", "secp384r1": "SHA384", "secp521r1": "SHA512"}


def _pae(payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding of an in-toto payload (what is signed)."""
    kind = _PAYLOAD_TYPE.encode()
    return b"DSSEv1 %d %s %d " % (len(kind), kind, len(payload)) + payload


def _field(obj: Any, key: str, kind: type, where: str) -> Any:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    if not isinstance(value, kind):
        raise ValueError(f"{where}{key!r} is missing or not a {kind.__name__}")
    return value


def _typed_json(raw: bytes, what: str, type_key: str, expected: str) -> dict[str, Any]:
    """``raw`` as a JSON object whose ``type_key`` is ``expected`` (keys given once)."""
    try:
        doc = loads_strict(raw, allow_nan=False)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{what} is not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get(type_key) != expected:
        raise ValueError(f"{what} is not of {type_key} {expected}")
    return doc


def _b64(text: str, where: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{where} is not base64") from None


def signed_digests(bundle: bytes, public_key_pem: bytes) -> dict[str, str]:
    """The files and sha256 digests a signature bundle vouches for, if the key signed it.

    Parameters
    ----------
    bundle : bytes
        The contents of ``model.sig``.
    public_key_pem : bytes
        A PEM public key (ECDSA P-256, P-384 or P-521).

    Returns
    -------
    dict
        Relative file name -> sha256 hex digest, as signed.

    Raises
    ------
    ValueError
        The bundle is malformed or of another format, the key is not a supported
        elliptic-curve key or not the one the bundle names, or the signature does not verify.
    """
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        key = serialization.load_pem_public_key(public_key_pem)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not a PEM public key ({exc})") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name not in _CURVE_HASHES:
        raise ValueError("not an ECDSA P-256, P-384 or P-521 public key")
    doc = _typed_json(bundle, "the signature bundle", "mediaType", _BUNDLE_MEDIA_TYPE)
    material = doc.get("verificationMaterial")
    public = material.get("publicKey") if isinstance(material, dict) else None
    hint = public.get("hint") if isinstance(public, dict) else None
    spki = key.public_bytes(serialization.Encoding.PEM,
                            serialization.PublicFormat.SubjectPublicKeyInfo)
    if hint and hint != hashlib.sha256(spki).hexdigest():
        raise ValueError("Key mismatch: the bundle names another public key")
    envelope = _field(doc, "dsseEnvelope", dict, "bundle: ")
    if envelope.get("payloadType") != _PAYLOAD_TYPE:
        raise ValueError(f"the DSSE payload type is not {_PAYLOAD_TYPE}")
    sigs = _field(envelope, "signatures", list, "dsseEnvelope: ")
    if len(sigs) != 1:
        raise ValueError(f"the DSSE envelope holds {len(sigs)} signatures, expected one")
    payload = _b64(_field(envelope, "payload", str, "dsseEnvelope: "), "the DSSE payload")
    sig = _b64(_field(sigs[0], "sig", str, "dsseEnvelope signature: "), "the signature")
    digest = getattr(hashes, _CURVE_HASHES[key.curve.name])()
    try:
        key.verify(sig, _pae(payload), ec.ECDSA(digest))
    except InvalidSignature:
        raise ValueError("Signature verification failed (another key, or the signed "
                         "statement was changed)") from None
    return _statement_digests(payload)


def _statement_digests(payload: bytes) -> dict[str, str]:
    """name -> sha256 of the resources of a (verified) in-toto statement."""
    stmt = _typed_json(payload, "the signed statement", "_type", _STATEMENT_TYPE)
    if stmt.get("predicateType") != _PREDICATE_TYPE:
        raise ValueError(f"predicate type {stmt.get('predicateType')!r} is not "
                         f"{_PREDICATE_TYPE} (signed before model_signing 1.0? sign again)")
    subjects = _field(stmt, "subject", list, "statement: ")
    if len(subjects) != 1:
        raise ValueError(f"the statement has {len(subjects)} subjects, expected one")
    root = _field(_field(subjects[0], "digest", dict, "subject: "), "sha256", str,
                  "subject digest: ")
    predicate = _field(stmt, "predicate", dict, "statement: ")
    serialization = _field(predicate, "serialization", dict, "predicate: ")
    if serialization.get("method") != "files" or serialization.get("hash_type") != "sha256":
        raise ValueError("only a per-file sha256 serialization is accepted")
    out: dict[str, str] = {}
    root_hash = hashlib.sha256()
    for res in _field(predicate, "resources", list, "predicate: "):
        name = _field(res, "name", str, "resource: ")
        value = _field(res, "digest", str, f"resource {name!r}: ")
        if res.get("algorithm") != "sha256" or len(value) != 64:
            raise ValueError(f"resource {name!r} has no sha256 digest")
        if name in out:
            raise ValueError(f"resource {name!r} appears twice")
        try:
            root_hash.update(bytes.fromhex(value))
        except ValueError:
            raise ValueError(f"resource {name!r}: digest {value!r} is not hex") from None
        out[name] = value.lower()
    if root_hash.hexdigest() != root.lower():
        raise ValueError("the statement is inconsistent: its root digest does not match "
                         "its resources")
    return out


def _compare(signed: Mapping[str, str], folder: VersionFolder) -> str | None:
    """Why the folder read differs from what was signed, or None."""
    unreadable = sorted(set(folder.problems) - {SIGNATURE_FILE})
    if unreadable:
        return f"{unreadable[0]} {folder.problems[unreadable[0]]}"
    present = {k: v for k, v in folder.digests.items() if k != SIGNATURE_FILE}
    for name in sorted(signed.keys() & present.keys()):
        if signed[name] != present[name]:
            return (f"{name} changed after signing (sha256 {present[name]}, signed "
                    f"{signed[name]})")
    unsigned = sorted(set(present) - set(signed))
    if unsigned:
        return f"{unsigned[0]} is not covered by the signature (uncovered: {unsigned})"
    missing = sorted(set(signed) - set(present))
    if missing:
        return f"{missing[0]} is signed but missing"
    return None


def verify_folder(folder: VersionFolder, trusted_keys: Sequence[Path]) -> Path:
    """The trusted key that verifies the signature of a folder already read (module docs).

    Raises
    ------
    ArtifactError
        As :func:`verify_signature`.
    """
    root = folder.path
    if not trusted_keys:
        raise ArtifactError("no trusted key given to check the signature with")
    if SIGNATURE_FILE in folder.problems:
        raise ArtifactError(f"{root / SIGNATURE_FILE}: signature "
                            f"{folder.problems[SIGNATURE_FILE]}", code="signature")
    bundle = folder.data.get(SIGNATURE_FILE)
    if bundle is None:
        raise ArtifactError(f"{root}: unsigned (no {SIGNATURE_FILE}), and trusted keys are "
                            f"configured; sign it with `amv-calib sign {root} --key PRIVATE`",
                            code="signature")
    reasons = []
    for key in trusted_keys:
        if not os.path.lexists(key):
            reasons.append(f"{key}: trusted key file not found")
            continue
        try:
            pem = read_regular(key, what="trusted key", error=ArtifactError)
            why = _compare(signed_digests(bundle, pem), folder)
        except (ValueError, ArtifactError) as exc:
            why = str(exc).splitlines()[0][:300]
        if why is None:
            return key
        reasons.append(f"{key.name}: {why}")
    raise ArtifactError(f"{root}: signature does not verify with any trusted key ("
                        + "; ".join(reasons) + ")", code="signature")


def verify_signature(version_dir: str | os.PathLike[str],
                     trusted_keys: Sequence[str | os.PathLike[str]]) -> Path:
    """The trusted public key that verifies the version's ``model.sig``.

    The folder is read once (:func:`~amv_calib.contract._folder.read_version_folder`) and
    the signature checked against the bytes read.

    Parameters
    ----------
    version_dir : path-like
        The version folder (``models/NAME/vN``).
    trusted_keys : sequence of path-like
        PEM public keys (as written by ``amv-calib keygen``); at least one.

    Returns
    -------
    pathlib.Path
        The first key in ``trusted_keys`` whose signature check passes.

    Raises
    ------
    ArtifactError
        No key given, no ``model.sig``, a key that cannot be read, or no key verifies the
        signature over the folder as read (the reason of each key is given): a file changed
        after signing, a file the signature does not cover, a signed file missing.
    """
    keys = [Path(k) for k in trusted_keys]
    if not keys:
        raise ArtifactError("no trusted key given to check the signature with")
    folder = read_version_folder(version_dir, keep=frozenset({SIGNATURE_FILE}))
    return verify_folder(folder, keys)
