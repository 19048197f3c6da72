"""Signature of an artifact version: ``model.sig`` beside ``manifest.json``, checked by keys.

An artifact version is signed with the OpenSSF ``model-signing`` library (key-based, no
network): ``model.sig`` is a Sigstore bundle over the sha256 of every file of the version
folder, ``manifest.json`` included (which itself lists every file's sha256). A gate given
trusted public keys loads a version only if one of them verifies its signature; anything
unsigned, signed by another key, or changed after signing is refused (and the gate ABSTAINs).

``model_signing`` is imported only when a signature is checked, so ``import amv_calib.gate``
stays numpy and the standard library.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from amv_calib.exceptions import ArtifactError

#: The signature file of a version folder (not listed in the manifest, which it covers).
SIGNATURE_FILE: Final = "model.sig"


def _verify_with(public_key: Path, root: Path, sig: Path) -> None:
    import model_signing

    config = model_signing.verifying.Config()  # type: ignore[no-untyped-call]
    config.use_elliptic_key_verifier(public_key=public_key).verify(root, sig)


def verify_signature(version_dir: str | os.PathLike[str],
                     trusted_keys: Sequence[str | os.PathLike[str]]) -> Path:
    """The trusted public key that verifies the version's ``model.sig``.

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
        signature over the folder as it is now (the reason of each key is given).
    """
    root = Path(version_dir)
    keys = [Path(k) for k in trusted_keys]
    if not keys:
        raise ArtifactError("no trusted key given to check the signature with")
    sig = root / SIGNATURE_FILE
    if not sig.is_file() or sig.is_symlink():
        raise ArtifactError(f"{root}: unsigned (no {SIGNATURE_FILE}), and trusted keys are "
                            f"configured; sign it with `amv-calib sign {root} --key PRIVATE`")
    reasons = []
    for key in keys:
        if not key.is_file():
            reasons.append(f"{key}: trusted key file not found")
            continue
        try:
            _verify_with(key, root, sig)
        except Exception as exc:  # noqa: BLE001 - any failure refuses; say which and why
            reasons.append(f"{key.name}: {str(exc).splitlines()[0][:300]}")
            continue
        return key
    raise ArtifactError(f"{root}: signature does not verify with any trusted key ("
                        + "; ".join(reasons) + ")")
