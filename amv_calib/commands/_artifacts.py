"""The artifact commands: rollback, verify-artifact, keygen, sign, bundle, unbundle."""

from __future__ import annotations

import argparse
import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from amv_calib.commands._parts import (
    alias_option,
    command,
    emit,
    models_dir_option,
    tracking_uri_option,
    trusted_key_option,
    version_arguments,
)
from amv_calib.settings import (
    DEFAULT_ALIAS,
    DEFAULT_REGISTERED_MODEL,
    TRUSTED_KEYS_ENV,
    models_dir,
)
from amv_calib.stages import alias_json, alias_lines, sync_registry, where

__all__ = ["add_artifacts"]



def add_artifacts(subparsers: Any) -> None:
    """Add the artifact sub-commands."""
    p = command(
        subparsers, "rollback", _run_rollback,
        help="move an alias back to its previous version",
        description="Point ALIAS back at the version it named before the current one.")
    p.add_argument("name", metavar="NAME", help="artifact name (the folder under models/)")
    alias_option(p)
    models_dir_option(p)
    _registry_options(p)

    p = command(
        subparsers, "verify-artifact", _run_verify_artifact,
        help="check an artifact as the gate would; print its summary",
        description="Check manifest, sha256 of every file, calibrator.json, the certificate's "
                    "binding and (with trusted keys) the signature, as the gate does; print "
                    "what was checked and what the version holds (--json: the manifest "
                    "summary as one object). Exit 1 when the artifact is refused, 2 when "
                    "PATH names an alias the model does not have.")
    p.add_argument("path", metavar="PATH", help="models/NAME/vN or models/NAME@ALIAS")
    trusted_key_option(p)

    p = command(
        subparsers, "keygen", _run_keygen, help="write a key pair for signing artifacts",
        description="Write an ECDSA P-256 key pair into DIR: amv-calib-signing.key (private, "
                    "mode 0600; keep it where artifacts are exported) and amv-calib-signing.pub "
                    "(give it to every gate as --trusted-key or $AMV_CALIB_TRUSTED_KEYS).")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the two key files")
    p.add_argument("--overwrite", action="store_true", help="replace an existing key pair")

    p = command(
        subparsers, "sign", _run_sign, help="sign an artifact version with a private key",
        description="Write VERSION_DIR/model.sig (OpenSSF model signing, key-based): a "
                    "signature over the sha256 of every file of the version, manifest.json "
                    "included. A gate with trusted keys loads only versions one of them signed.")
    p.add_argument("path", metavar="VERSION_DIR", help="models/NAME/vN")
    p.add_argument("--key", required=True, metavar="PRIVATE", help="the private key file")

    p = command(
        subparsers, "bundle", _run_bundle, help="write one version as a deterministic .tar.gz",
        description="Verify models/NAME/VERSION and write it as one reproducible .tar.gz "
                    "(extract with: tar -xzf FILE -C models). Given an alias as VERSION, the "
                    "bundle also carries NAME/aliases.json with that alias, so that "
                    "NAME@ALIAS resolves where it is extracted; tar replaces an aliases.json "
                    "already there: use `amv-calib unbundle` on a machine that has the model.")
    version_arguments(p)
    p.add_argument("--out", metavar="FILE", default=None,
                   help="output file (default: NAME-VERSION.tar.gz, NAME-ALIAS-VERSION.tar.gz "
                        "for an alias)")
    models_dir_option(p)

    p = command(
        subparsers, "unbundle", _run_unbundle,
        help="install a bundle into a models folder without replacing its aliases",
        description="Verify the bundle's version and add it to the models folder (an existing "
                    "folder of that version must hold the same files); add the bundle's alias "
                    "when the model has no such alias. An alias that points at another "
                    "version is not moved (exit 1, saying how to promote).")
    p.add_argument("bundle", metavar="FILE", help="a .tar.gz written by `amv-calib bundle`")
    models_dir_option(p)
    trusted_key_option(p)


def _registry_options(p: argparse.ArgumentParser) -> None:
    """Where the registry mirror of the file aliases lives."""
    p.add_argument("--registered-name", default=DEFAULT_REGISTERED_MODEL,
                   help=f"MLflow registered model to keep in sync (default: "
                   f"{DEFAULT_REGISTERED_MODEL})")
    tracking_uri_option(p)


def _run_rollback(args: argparse.Namespace) -> int:
    from amv_calib.artifacts import rollback

    entry = rollback(args.name, alias=args.alias, models_dir=args.models_dir)
    # rolling back again would go further back: promoting the version left undoes this one
    left = entry["log"][-1]["from_version"]
    force = " --force" if args.alias == DEFAULT_ALIAS else ""
    emit(args, alias_json(args.name, args.alias, entry), alias_lines(
        args.name, args.alias, entry,
        f"amv-calib promote {args.name} {left} --alias {args.alias}{force}"))
    sync_registry(Path(args.models_dir or models_dir()) / args.name, alias=args.alias,
                  registered_name=args.registered_name, tracking_uri=args.tracking_uri)
    return 0


def _run_verify_artifact(args: argparse.Namespace) -> int:
    from amv_calib.artifacts import verify_artifact

    info = verify_artifact(args.path, trusted_keys=args.trusted_keys or None)
    emit(args, info, _artifact_summary(info))
    return 0


def _artifact_summary(info: Mapping[str, Any]) -> list[str]:
    """What ``verify-artifact`` checked and what the version holds, for a person."""
    sig = info.get("signature") or {}
    cert = info.get("certificate_check") or {}
    gate = info.get("gate") or {}
    signed = (f"signature verified by {sig['verified_by']}" if sig.get("verified_by")
              else "signature not checked (no trusted key given)" if not sig.get("file")
              else f"signed ({sig['file']}), not checked: no trusted key given")
    lines = [f"OK: {info.get('name')} {info.get('version')} ({info.get('path')}) loads as "
             f"the gate loads it: {len(info.get('files') or {})} files' sha256 match; "
             f"{signed}"]
    if cert:
        bound = ("bound to this calibrator and thresholds" if cert.get("matches")
                 else "NOT bound to this calibrator and thresholds")
        lines.append(f"  certificate: {cert.get('certified')} ({bound}; observed upper "
                     f"bound {cert.get('observed_upper_bound', float('nan')):.4f})")
    else:
        lines.append("  certificate: none (not certified)")
    lines.append(f"  calibrator: {info.get('calibrator_source')} ({info.get('calibrator_kind')}, "
                 f"{len(info.get('feature_map') or [])} features)")
    lines.append("  gate: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                        for k, v in sorted(gate.items()) if v is not None))
    aliases = info.get("aliases") or []
    lines.append(f"  aliases on this version: {', '.join(aliases) or 'none'}; created "
                 f"{info.get('created_utc')} by amv-calib {info.get('package_version')}")
    lines.append("full manifest: --json")
    return lines


def _run_keygen(args: argparse.Namespace) -> int:
    from amv_calib.artifacts import keygen

    private, public = keygen(args.out, overwrite=args.overwrite)
    emit(args, {"private_key": str(private), "public_key": str(public)},
          [f"private key: {where(private)} (mode 0600: keep it where versions are signed, "
           "never commit it)",
           f"public key:  {where(public)} (give it to every gate: --trusted-key or "
           f"${TRUSTED_KEYS_ENV})",
           f"next: amv-calib sign models/NAME/vN --key {private}"])
    return 0


def _run_sign(args: argparse.Namespace) -> int:
    from amv_calib.artifacts import sign_artifact
    from amv_calib.contract import load_artifact

    load_artifact(args.path, check_signature=False)  # sign only what the gate could load
    sig = sign_artifact(args.path, args.key)
    digest = hashlib.sha256(sig.read_bytes()).hexdigest()
    emit(args, {"path": str(args.path), "signature": str(sig), "sha256": digest},
          [f"signed {args.path}: {where(sig)} (sha256 {digest[:12]})",
           f"check: amv-calib verify-artifact {args.path} --trusted-key PUBLIC_KEY"])
    return 0


def _run_bundle(args: argparse.Namespace) -> int:
    from amv_calib.artifacts import bundle

    path = bundle(args.name, args.version, args.out, models_dir=args.models_dir)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    emit(args, {"bundle": str(path), "sha256": digest},
          [f"wrote {where(path)} (sha256 {digest[:12]})",
           f"on the receiving machine: amv-calib unbundle {path.name} (or tar -xzf "
           f"{path.name} -C models where the model is new)"])
    return 0


def _run_unbundle(args: argparse.Namespace) -> int:
    from amv_calib.artifacts import unbundle

    res = unbundle(args.bundle, models_dir=args.models_dir, trusted_keys=args.trusted_keys)
    lines = [f"{'installed' if res['installed'] else 'already there (same files)'}: "
             f"{res['name']} {res['version']} at {where(res['path'])}"]
    if res.get("alias"):
        lines.append(f"  {res['name']}@{res['alias']} "
                     f"{'set to' if res['alias_set'] else 'already'} {res['version']}")
    emit(args, res, lines)
    return 0
