"""Key pairs and signatures for artifact versions (OpenSSF ``model-signing``, key-based).

``keygen`` writes an ECDSA P-256 key pair as PEM files; ``sign_artifact`` writes the
version's ``model.sig`` (a Sigstore bundle over the sha256 of every file of the folder).
Verification lives with the loader, in :mod:`amv_calib.contract`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from amv_calib.contract import SIGNATURE_FILE, read_regular, require_regular, verify_signature
from amv_calib.exceptions import ArtifactError, ConfigError

#: File names ``keygen`` writes into its folder.
PRIVATE_KEY_FILE: Final = "amv-calib-signing.key"
PUBLIC_KEY_FILE: Final = "amv-calib-signing.pub"


def keygen(out_dir: str | os.PathLike[str], *, overwrite: bool = False) -> tuple[Path, Path]:
    """Write a new signing key pair into ``out_dir``; returns ``(private, public)`` paths.

    The private key (PKCS#8 PEM, unencrypted, mode 0600) signs artifacts and must stay
    with whoever exports them; the public key (PEM) goes to every gate that loads them.

    Raises
    ------
    ConfigError
        A key file already exists there and ``overwrite`` is False, or the private key would
        land inside a git work tree without being ignored there (one ``git add .`` from a
        commit): ignore the folder first (the checkout's ``.gitignore`` ignores ``keys/``).
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    out = Path(out_dir)
    private, public = out / PRIVATE_KEY_FILE, out / PUBLIC_KEY_FILE
    _refuse_committable(private)
    out.mkdir(parents=True, exist_ok=True)
    for path in (private, public):
        if path.exists() and not overwrite:
            raise ConfigError(f"{path} exists; pass --overwrite to replace the key pair")
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    public.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def _refuse_committable(private: Path) -> None:
    """Refuse a private key path inside a git work tree that git does not ignore."""
    import subprocess

    where = private.resolve().parent
    top = next((d for d in (where, *where.parents) if (d / ".git").exists()), None)
    if top is None:
        return
    try:
        done = subprocess.run(["git", "-C", str(top), "check-ignore", "-q", "--no-index",
                               str(private.resolve())], capture_output=True, timeout=30,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"{private}: inside the git work tree {top}, and git cannot say "
                          f"whether it is ignored ({exc}); write the key pair outside it") \
            from None
    if done.returncode != 0:
        rel = private.resolve().parent.relative_to(top).as_posix()
        raise ConfigError(
            f"{private}: inside the git work tree {top} and not ignored there, one `git add .` "
            f"from a commit; add '{rel}/' to {top / '.gitignore'} (or write the key pair "
            f"outside the work tree)")


def sign_artifact(version_dir: str | os.PathLike[str], private_key: str | os.PathLike[str],
                  *, password: str | None = None) -> Path:
    """Sign a version folder in place: writes ``version_dir/model.sig``; returns its path.

    The signature covers the sha256 of every file in the folder (``model.sig`` itself
    excepted), so ``manifest.json`` and everything it lists are bound to the key.

    Raises
    ------
    ArtifactError
        The folder or the key cannot be read, or the key is not an elliptic-curve key.
    """
    import model_signing

    root = Path(version_dir)
    key = Path(private_key)
    if not (root / "manifest.json").is_file():
        raise ArtifactError(f"{root}: not an artifact version folder (no manifest.json)")
    if not key.exists():
        raise ArtifactError(f"{key}: private key file not found")
    require_regular(key, what="private key", error=ArtifactError)
    hashing = model_signing.hashing.Config().set_ignored_paths(  # type: ignore[no-untyped-call]
        paths=[SIGNATURE_FILE], ignore_git_paths=False)
    try:
        (model_signing.signing.Config()  # type: ignore[no-untyped-call]
         .use_elliptic_key_signer(private_key=key, password=password)
         .set_hashing_config(hashing)
         .sign(root, root / SIGNATURE_FILE))
    except (ValueError, TypeError, OSError) as exc:
        raise ArtifactError(f"cannot sign {root} with {key}: {exc}") from exc
    return root / SIGNATURE_FILE


def signed_with(version_dir: str | os.PathLike[str], private_key: str | os.PathLike[str],
                *, password: str | None = None) -> bool:
    """Whether the version carries a signature that ``private_key``'s public half verifies."""
    import tempfile

    from cryptography.hazmat.primitives import serialization

    try:
        key = serialization.load_pem_private_key(
            read_regular(private_key, what="private key", error=ArtifactError),
            None if password is None else password.encode())
    except (OSError, ValueError, TypeError) as exc:
        raise ArtifactError(f"{private_key}: cannot read the private key ({exc})") from exc
    pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
    with tempfile.TemporaryDirectory() as tmp:
        public = Path(tmp) / PUBLIC_KEY_FILE
        public.write_bytes(pem)
        try:
            verify_signature(version_dir, [public])
        except ArtifactError:
            return False
    return True
