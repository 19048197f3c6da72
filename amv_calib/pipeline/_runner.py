"""Declarative pipelines: ``pipelines/*.toml`` read with :mod:`tomllib` and run step by step.

A pipeline file has a ``[pipeline]`` table and an array of ``[[steps]]``. Each step names its
``kind`` (one of :func:`step_kinds`), a unique ``name`` and the parameters that kind takes.
A string parameter ``"@other.output"`` refers to an output of an earlier step; a path
parameter is relative to the pipeline file.

Every step runs into a fresh ``WORKDIR/<name>.partial-*`` folder that is renamed into place
only when the step succeeds, and records a key (sha256 of its parameters and of the content
of everything it reads). A re-run whose key is unchanged skips the step unless ``force``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
import tomllib
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

from amv_calib import __version__
from amv_calib.contract import open_regular, read_toml
from amv_calib.exceptions import AmvCalibError, ConfigError, PipelineError
from amv_calib.locks import exclusive
from amv_calib.pipeline._spec import (
    PipelineResult,
    PipelineSpec,
    StepContext,
    StepKind,
    StepResult,
    StepSpec,
)
from amv_calib.pipeline._steps import STEP_KINDS
from amv_calib.settings import Option

log = logging.getLogger(__name__)

_STATE = "state.json"
_LOCK = ".lock"
_PIPELINE_KEYS = {"name", "workdir", "seed", "tracking", "tracking_uri", "models_dir",
                  "experiment", "description", "engine", "spark_master",
                  "spark_scratch"}


def _kinds() -> dict[str, StepKind]:
    return STEP_KINDS


def step_kinds() -> list[str]:
    """Names of the step kinds a pipeline may use."""
    return sorted(_kinds())


# -- reading and validating ---------------------------------------------------------------
def _parse_override(text: str) -> tuple[str, str, Any]:
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE, e.g. compare.folds=3")
    key, raw = text.split("=", 1)
    if key.count(".") != 1:
        raise ConfigError(
            f"--set {text!r}: KEY must be <step name>.<param> or pipeline.<key>"
        )
    section, name = key.split(".")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw  # a bare word is a string
    return section, name, value


def load_pipeline(path: str | os.PathLike[str],
                  overrides: Sequence[str] = ()) -> PipelineSpec:
    """Read and validate a pipeline file.

    Raises
    ------
    ConfigError
        Unknown keys, unknown step kinds, duplicate step names, wrong types, missing
        required parameters, missing input files, references to unknown steps.
    """
    path = Path(path).resolve()
    doc = read_toml(path, "pipeline file")
    unknown_top = set(doc) - {"pipeline", "steps"}
    if unknown_top:
        raise ConfigError(f"{path.name}: unknown top-level keys {sorted(unknown_top)}")
    head = dict(doc.get("pipeline", {}))
    steps_raw = [dict(s) for s in doc.get("steps", [])]
    if not steps_raw:
        raise ConfigError(f"{path.name}: no [[steps]]")
    by_name = {str(s.get("name") or s.get("kind") or ""): s for s in steps_raw}
    for section, key, value in (_parse_override(o) for o in overrides):
        if section == "pipeline":
            head[key] = value
        elif section in by_name:
            by_name[section][key] = value
        else:
            raise ConfigError(f"--set {section}.{key}: no step named {section!r}; "
                              f"steps are {sorted(by_name)}")
    unknown = set(head) - _PIPELINE_KEYS
    if unknown:
        raise ConfigError(f"{path.name}: [pipeline] has unknown keys {sorted(unknown)}; "
                          f"allowed: {sorted(_PIPELINE_KEYS)}")
    base = path.parent
    name = _head(path, head, "name", str, path.stem)
    kinds = _kinds()
    steps: list[StepSpec] = []
    seen: set[str] = set()
    for i, raw in enumerate(steps_raw, start=1):
        where = f"{path.name}: step {i}"
        kind = raw.pop("kind", None)
        sname = raw.pop("name", None) or kind
        if kind not in kinds:
            raise ConfigError(f"{where}: kind={kind!r} is not one of {sorted(kinds)}")
        if not isinstance(sname, str) or not sname.isidentifier():
            raise ConfigError(f"{where}: name={sname!r} must be an identifier")
        if sname in seen:
            raise ConfigError(f"{where}: duplicate step name {sname!r}")
        params = _validate_params(where=f"{where} ({sname})", kind=kinds[kind], raw=raw,
                                  base=base, earlier=seen)
        seen.add(sname)
        steps.append(StepSpec(name=sname, kind=kind, params=params))
    uri = _head(path, head, "tracking_uri", str, "") or None
    engine = _head(path, head, "engine", str, "local")
    if engine not in ("local", "spark"):
        raise ConfigError(f"{path.name}: [pipeline] engine={engine!r} must be 'local' or 'spark'")
    return PipelineSpec(
        engine=engine,
        spark_master=_head(path, head, "spark_master", str, "local[*]"),
        spark_scratch=_location(base, _head(path, head, "spark_scratch", str, "") or None),
        path=path,
        name=name,
        workdir=(base / _head(path, head, "workdir", str, f".amv-cache/{name}")).resolve(),
        seed=_head(path, head, "seed", int, 20261202),
        tracking=_head(path, head, "tracking", bool, True),
        tracking_uri=uri,
        models_dir=(base / _head(path, head, "models_dir", str, "models")).resolve(),
        experiment=_head(path, head, "experiment", str, "amv-calib"),
        steps=tuple(steps),
    )


_T = TypeVar("_T", str, int, bool)
_TYPE_NAMES: Final = {str: "a non-empty string", int: "an integer", bool: "true or false"}


def _head(path: Path, head: Mapping[str, Any], key: str, kind: type[_T], default: _T) -> _T:
    """``[pipeline] key`` checked against its type (a bool is not an int here)."""
    value: _T = head.get(key, default)
    ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
    if not ok or (kind is str and not value and value != default):
        raise ConfigError(f"{path.name}: [pipeline] {key}={value!r} must be "
                          f"{_TYPE_NAMES[kind]}")
    return value


def _location(base: Path, value: str | None) -> str | None:
    """A folder relative to the pipeline file's folder, or a URI (``s3://...``) as given."""
    if value is None or "://" in value:
        return value
    return str((base / value).resolve())


def _validate_params(*, where: str, kind: StepKind, raw: dict[str, Any], base: Path,
                     earlier: set[str]) -> dict[str, Any]:
    allowed = kind.all_params()
    unknown = set(raw) - set(allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}; "
                          f"allowed: {sorted(allowed)}")
    out: dict[str, Any] = {}
    if kind.options is not None:
        # the option keys are checked by the options class, as the command line's are
        given = {k: raw[k] for k in kind.options.spec() if k in raw}
        refs = sorted(k for k, v in given.items() if isinstance(v, str) and v.startswith("@"))
        if refs:
            raise ConfigError(f"{where}: {refs} take values, not references to other steps")
        try:
            out.update(kind.options.from_mapping(given, where=where).to_dict())
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}" if not str(exc).startswith(where)
                              else str(exc)) from None
        out = {k: v for k, v in out.items() if k in allowed}
    for key, p in kind.params.items():
        if key not in raw:
            if p.required:
                raise ConfigError(f"{where}: missing required key {key!r}")
            out[key] = p.default
            continue
        value = raw[key]
        if isinstance(value, str) and value.startswith("@"):
            ref = value[1:].split(".", 1)
            if len(ref) != 2 or ref[0] not in earlier:
                raise ConfigError(f"{where}: {key}={value!r} must refer to an earlier step as "
                                  f"@<step>.<output>; earlier steps: {sorted(earlier)}")
            out[key] = value
            continue
        if p.path and p.kind is list:
            out[key] = _path_list(where, key, value, base)
            continue
        if p.path:
            if not isinstance(value, str) or not value:
                raise ConfigError(f"{where}: {key}={value!r} must be a path")
            # "models/NAME@alias" names an artifact through its alias file.
            folder, _, alias = value.rpartition("@") if "@" in Path(value).name else (value, "", "")
            full = (base / folder).resolve()
            if not full.exists():
                raise ConfigError(f"{where}: {key}={value!r} not found (looked for {full.name!r}"
                                  f" relative to the pipeline file)")
            out[key] = f"{full}@{alias}" if alias else full
            continue
        # an input's value is checked as an option's is: one check, one wording
        value = Option(help=key, type=p.kind, choices=p.choices).check(f"{where}: {key}", value)
        out[key] = value
    return out


def _path_list(where: str, key: str, value: Any, base: Path) -> list[Path]:
    """A list of paths (glob patterns allowed), relative to the pipeline file, each found."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{where}: {key}={value!r} must be a list of paths")
    found: list[Path] = []
    for v in value:
        matches = sorted(base.glob(v)) if any(c in v for c in "*?[") else [base / v]
        matches = [m.resolve() for m in matches if m.exists()]
        if not matches:
            raise ConfigError(f"{where}: {key} entry {v!r} not found (relative to the "
                              f"pipeline file)")
        found += matches
    return found


# -- hashing ------------------------------------------------------------------------------
def content_hash(path: Path) -> str:
    """sha256 of a file's bytes, or of a folder's relative paths and file bytes.

    Regular files only (links followed): a FIFO or a device, named or inside a folder, is
    a ``ConfigError`` at once, where reading it would hang (``/dev/zero`` never ends).
    """
    h = hashlib.sha256()
    if path.is_dir():
        for f in sorted(p for p in path.rglob("*") if not p.is_dir()):
            h.update(f.relative_to(path).as_posix().encode())
            h.update(b"\0")
            h.update(_file_digest(f).encode())
    else:
        h.update(_file_digest(path).encode())
    return h.hexdigest()


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open_regular(path, what="pipeline input", error=ConfigError) as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _step_key(spec: PipelineSpec, step: StepSpec, upstream_keys: dict[str, str]) -> str:
    material: dict[str, Any] = {"kind": step.kind, "seed": spec.seed, "package": __version__}
    if spec.engine != "local" and step.kind == "compare":
        material["engine"] = spec.engine
    for key, value in sorted(step.params.items()):
        if isinstance(value, str) and value.startswith("@"):
            material[key] = ["ref", value, upstream_keys[value[1:].split(".", 1)[0]]]
        elif isinstance(value, Path):
            material[key] = ["file", content_hash(value)]
        elif isinstance(value, list) and value and all(isinstance(v, Path) for v in value):
            material[key] = ["files", [content_hash(v) for v in value]]
        elif isinstance(value, str) and os.path.isabs(value) and "@" in value:
            material[key] = ["alias", value.rsplit("@", 1)[1],
                             content_hash(Path(value.rsplit("@", 1)[0]))]
        else:
            material[key] = value
    blob = json.dumps(material, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


# -- running ------------------------------------------------------------------------------
def _read_state(final_dir: Path) -> dict[str, Any] | None:
    try:
        state = json.loads((final_dir / _STATE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def _outputs_exist(outputs: Mapping[str, Any]) -> bool:
    for value in outputs.values():
        if isinstance(value, str) and value.startswith(("/", "./")) and not Path(value).exists():
            return False
    return True


def run_pipeline(spec: PipelineSpec, *, force: bool = False, tracking: bool | None = None,
                 tracking_uri: str | None = None, wait: bool | float = False) -> PipelineResult:
    """Run every step of ``spec`` in order, skipping those whose key is unchanged.

    The run holds a lock on the work folder: two runs of one pipeline would share its step
    folders and its Optuna study. ``wait`` says what to do when another live run holds it:
    False fails at once naming the holder, True waits, a number waits that many seconds. A
    lock left by a dead run is taken over (the kernel released it), and the folders its
    killed steps left behind (``*.partial-*``, ``*.old-*``) are swept first.

    Raises
    ------
    LockedError
        Another live run of this pipeline holds the work folder.
    PipelineError
        A step failed; nothing half-written is left in its output folder.
    """
    spec.workdir.mkdir(parents=True, exist_ok=True)
    with exclusive(spec.workdir / _LOCK, what=f"pipeline {spec.name!r} ({spec.workdir})",
                   wait=wait):
        _sweep_leftovers(spec.workdir)
        return _run_locked(spec, force=force, tracking=tracking, tracking_uri=tracking_uri)


def _sweep_leftovers(workdir: Path) -> None:
    """Remove the folders of steps killed mid-run (only called while holding the lock)."""
    for left in sorted(workdir.glob("*.partial-*")) + sorted(workdir.glob("*.old-*")):
        if left.is_dir():
            log.info("removing %s, left by a run that was killed", left.name)
            shutil.rmtree(left, ignore_errors=True)


def _run_locked(spec: PipelineSpec, *, force: bool, tracking: bool | None,
                tracking_uri: str | None) -> PipelineResult:
    kinds = _kinds()
    use_tracking = spec.tracking if tracking is None else tracking
    uri = tracking_uri or spec.tracking_uri
    result = PipelineResult(spec=spec, tracking=use_tracking, tracking_uri=uri)
    tracker = _LazyTracker(spec, enabled=use_tracking, uri=uri)
    with tracker:
        upstream_out: dict[str, dict[str, Any]] = {}
        upstream_keys: dict[str, str] = {}
        for step in spec.steps:
            resolved = _resolve(step, upstream_out)
            key = _step_key(spec, step, upstream_keys)
            final_dir = spec.workdir / step.name
            state = _read_state(final_dir)
            t0 = time.perf_counter()
            if (not force and state is not None and state.get("key") == key
                    and _outputs_exist(state.get("outputs", {}))):
                outputs = dict(state["outputs"])
                log.info("[%s] unchanged inputs: skipped (use --force to re-run)", step.name)
                status = "skipped"
            else:
                log.info("[%s] running (%s)", step.name, step.kind)
                outputs = _run_step(spec, step, kinds[step.kind], resolved, key, tracker)
                status = "ran"
            upstream_keys[step.name] = key
            upstream_out[step.name] = outputs
            result.steps.append(StepResult(name=step.name, kind=step.kind, status=status,
                                           seconds=time.perf_counter() - t0,
                                           outputs=outputs, key=key))
            if outputs.get("stop_pipeline"):
                # a monitor step that found nothing to act on: the retrain after it waits
                log.info("[%s] %s: the remaining steps do not run", step.name,
                         outputs.get("stop_reason", "stop"))
                break
        result.run_id = tracker.run_id
        if tracker.run_id is not None:
            name, description = _run_description(spec, result.steps)
            tracker.get().describe(run_name=name, description=description)
    return result


def _resolve(step: StepSpec, upstream: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in step.params.items():
        if isinstance(value, str) and value.startswith("@"):
            src, name = value[1:].split(".", 1)
            if name not in upstream.get(src, {}):
                raise PipelineError(step.name, f"{key}={value!r}: step {src!r} has no output "
                                    f"{name!r} (outputs: {sorted(upstream.get(src, {}))})")
            got = upstream[src][name]
            out[key] = Path(got) if isinstance(got, str) and os.path.isabs(got) else got
        else:
            out[key] = value
    return out


def _run_step(spec: PipelineSpec, step: StepSpec, kind: StepKind, resolved: dict[str, Any],
              key: str, tracker: Any) -> dict[str, Any]:
    final_dir = spec.workdir / step.name
    partial = spec.workdir / f"{step.name}.partial-{uuid.uuid4().hex[:8]}"
    partial.mkdir(parents=True)
    options = None if kind.options is None else kind.options.from_mapping(
        {k: resolved[k] for k in kind.options.spec() if k in resolved}, where=step.name)
    ctx = StepContext(spec=spec, step=step, params=resolved, out_dir=partial, key=key,
                      tracker=tracker, options=options)
    try:
        outputs = kind.run(ctx)
    except PipelineError:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    except AmvCalibError as exc:
        shutil.rmtree(partial, ignore_errors=True)
        # a setting or a decision a person must change (a refused promotion) exits as the
        # command does (2); any other failure of a step is 1
        raise PipelineError(step.name, str(exc), exit_code=exc.exit_code
                            if isinstance(exc, ConfigError) else 1) from exc
    except Exception as exc:
        shutil.rmtree(partial, ignore_errors=True)
        # not one of ours: a bug or a library's failure; its traceback is what to debug
        log.debug("step %r raised %s", step.name, type(exc).__name__, exc_info=True)
        raise PipelineError(step.name, f"{type(exc).__name__}: {exc}") from exc
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    # Outputs name files in the partial folder; they are rewritten to the final place.
    outputs = {k: _relocate(v, partial, final_dir) for k, v in outputs.items()}
    (partial / _STATE).write_text(
        json.dumps({"key": key, "kind": step.kind, "outputs": outputs,
                    "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                   indent=2, sort_keys=True) + "\n",
        encoding="utf-8")
    trash = spec.workdir / f"{step.name}.old-{uuid.uuid4().hex[:8]}"
    if final_dir.exists():
        final_dir.rename(trash)
    partial.rename(final_dir)
    shutil.rmtree(trash, ignore_errors=True)
    return outputs


def _relocate(value: Any, partial: Path, final_dir: Path) -> Any:
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, str) and value.startswith(str(partial)):
        return str(final_dir) + value[len(str(partial)):]
    return value


def _run_description(spec: PipelineSpec, steps: Sequence[StepResult]) -> tuple[str, str]:
    """A run name (pipeline, data fingerprint, resulting version) and a description (what
    data, which champion, what certificate, what happened to production)."""
    out = {s.kind: s.outputs for s in steps}
    fingerprint = ""
    parts = [f"pipeline {spec.name!r} ({spec.path.name})"]
    if "export" in out:
        art = Path(str(out["export"].get("artifact")))
        try:
            manifest = json.loads((art / "manifest.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            manifest = {}
        td = manifest.get("training_data") or {}
        fingerprint = str(td.get("sha256") or "")[:8]
        if td.get("rows"):
            parts.append(f"data: {td['rows']} claims {td.get('time_min')} .. "
                         f"{td.get('time_max')} (sha256 {td.get('sha256')})")
        parts.append(f"artifact: {out['export'].get('name')} {out['export'].get('version')}")
    if "compare" in out:
        parts.append(f"champion calibrator: {out['compare'].get('champion_name')}")
    if "certify" in out:
        parts.append(f"certified on {out['certify'].get('calibration_episodes')} episodes at "
                     f"harm price {out['certify'].get('harm_price')} (observed calibration "
                     f"harm bound {out['certify'].get('observed_upper_bound')})")
    if "promote" in out:
        parts.append("promoted to production" if out["promote"].get("promoted")
                     else "stays challenger: " + "; ".join(out["promote"].get("reasons", [])))
    version = out.get("export", {}).get("version")
    name = " ".join(x for x in (spec.name, fingerprint and f"data:{fingerprint}",
                                version and f"-> {version}") if x)
    return name, "\n".join(parts)


def _nothing(*args: Any, **kwargs: Any) -> None:
    """What a tracker method does with tracking off."""
    return None


class _LazyTracker:
    """Starts the pipeline's parent MLflow run only when a step first asks for it.

    A re-run whose steps are all skipped therefore makes no new run (and does not pay for
    importing MLflow).
    """

    def __init__(self, spec: PipelineSpec, *, enabled: bool, uri: str | None) -> None:
        self.spec = spec
        self.enabled = enabled
        self.uri = uri
        self.run_id: str | None = None
        self._inner: Any = None

    def __getattr__(self, name: str) -> Any:
        """A tracker method (``log_comparison``, ...): the started tracker's, or, with
        tracking off, one that does nothing and returns None (as a disabled
        ``PipelineTracker`` does), so that steps never branch on tracking."""
        if name.startswith("_"):
            raise AttributeError(name)
        if not self.enabled:
            return _nothing
        return getattr(self.get(), name)

    def get(self) -> Any:
        """The started tracker (an ``amv_calib.tracking.PipelineTracker``), or None if off."""
        if not self.enabled:
            return None
        if self._inner is None:
            from amv_calib.tracking import PipelineTracker

            self._inner = PipelineTracker(
                run_name=self.spec.name,
                experiment=self.spec.experiment,
                tracking_uri=self.uri,
                params={"pipeline": self.spec.name, "pipeline_file": self.spec.path.name,
                        "seed": self.spec.seed},
            )
            self._inner.__enter__()
            self.run_id = self._inner.run_id
        return self._inner

    def __enter__(self) -> _LazyTracker:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self._inner is not None:
            self._inner.__exit__(exc_type, exc, tb)
