"""The servable gate model: an MLflow pyfunc ("models from code") over a portable artifact.

MLflow logs this *file* as the model's code (no pickled object): on load it runs the file,
takes the model object given to ``mlflow.models.set_model`` below, and calls
:meth:`GateModel.load_context`, which reads the artifact folder (``manifest.json`` +
``calibrator.json``) through :func:`amv_calib.gate.load_artifact` -- hashes checked, nothing
unpickled. The serving environment needs ``amv_calib`` importable (``--env-manager local``
in this package's virtual environment).

One model answers two kinds of request, told apart by their columns:

**Probabilities** -- a DataFrame of claims with the four feature columns
``recency_hours``, ``source_trust_score``, ``model_confidence``, ``contradiction_flag``
(and optionally ``claim_id``, and ``memory_kind``, which a calibrator with kinds reads and
one without ignores). Returns one row per claim: ``p_violation`` (and ``claim_id`` when
given)::

    {"dataframe_records": [{"claim_id": "c1", "recency_hours": 30.0,
      "source_trust_score": 0.9, "model_confidence": 0.8, "contradiction_flag": false}]}

**Decisions** -- a DataFrame with an ``action`` column; each cell is the JSON text of the
gate CLI's request object ``{"action": {...}, "verifiers": [...]}`` (the seed's
``CandidateAction`` and ``Verifier`` objects, camelCase or snake_case; a premise carries
either ``calibrated_violation_probability`` or its claim). A cell may instead hold the bare
action object, with the verifiers as JSON text in a ``verifiers`` column. Returns one row
per action: ``action_id``, ``decision`` (PROCEED / VERIFY / ABSTAIN), ``regime`` (0 / 1 /
2), ``verifier_id`` (VERIFY only, else empty), ``reason``, ``p_any`` (``H``),
``expected_loss`` (``R``), ``probabilities`` (a list of floats, premise order),
``artifact_version``.

A request mixing claim features and actions is refused. A refused artifact (tampered,
unknown format) makes every decision ABSTAIN with the reason, and probability requests fail.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Final

import mlflow
import numpy as np
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.models import ModelSignature
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
from mlflow.pyfunc.model import PythonModel, PythonModelContext
from mlflow.types import ColSpec, DataType, Schema
from mlflow.types.schema import Array

from amv_calib.contract import CLAIM_FEATURES, loads_strict

#: Key of the portable artifact folder in the logged model's ``artifacts``.
ARTIFACT_KEY: Final = "amv_artifact"
ACTION_COLUMN: Final = "action"
VERIFIERS_COLUMN: Final = "verifiers"
DECISION_COLUMNS: Final = ("action_id", "decision", "regime", "verifier_id", "reason",
                           "p_any", "expected_loss", "probabilities", "artifact_version")


def _bad_request(message: str) -> MlflowException:
    # INVALID_PARAMETER_VALUE is what MLflow's scoring server answers with HTTP 400.
    return MlflowException(message, error_code=INVALID_PARAMETER_VALUE)


class GateModel(PythonModel):
    """Calibrated violation probabilities and gate decisions from one artifact."""

    def __init__(self) -> None:
        self._calibrator: Any = None
        self._gate: Any = None
        self._version: str = ""
        self._refusal: str | None = None

    def load_context(self, context: PythonModelContext) -> None:
        """Load and verify the artifact folder shipped in the model's artifacts."""
        from amv_calib.exceptions import ArtifactError
        from amv_calib.gate import Gate, load_artifact

        path = context.artifacts[ARTIFACT_KEY]
        try:
            art = load_artifact(path)
        except ArtifactError as exc:
            self._refusal = f"artifact refused: [{exc.code}] {exc}"
            # fails closed: every decision ABSTAINs with the reason
            self._gate = Gate(refusal=self._refusal)
            return
        # The gate's own constructor maps the manifest's thresholds; built from the artifact
        # just read, so that the probabilities and the decisions come from the same bytes.
        self._gate = Gate.from_artifact(art)
        self._calibrator = art.calibrator
        self._version = art.version

    def predict(self, context: PythonModelContext, model_input: pd.DataFrame,
                params: dict[str, Any] | None = None) -> pd.DataFrame:
        """Probabilities for a frame of claims, decisions for a frame of actions."""
        if not isinstance(model_input, pd.DataFrame):
            model_input = pd.DataFrame(model_input)
        has_action = ACTION_COLUMN in model_input.columns and \
            bool(model_input[ACTION_COLUMN].notna().any())
        has_features = any(c in model_input.columns and bool(model_input[c].notna().any())
                           for c in CLAIM_FEATURES)
        if has_action and has_features:
            raise _bad_request(
                "a request holds either claims (the four feature columns) or actions (an "
                "'action' column), not both")
        if has_action:
            return self._decide(model_input)
        return self._probabilities(model_input)

    # -- probabilities ------------------------------------------------------------------
    def _probabilities(self, frame: pd.DataFrame) -> pd.DataFrame:
        if self._refusal is not None:
            raise MlflowException(self._refusal)
        missing = [c for c in CLAIM_FEATURES if c not in frame.columns]
        if missing:
            raise _bad_request(
                f"claims lack columns {missing}; a request needs {list(CLAIM_FEATURES)} "
                f"(probabilities) or an 'action' column (decisions)")
        X = np.empty((len(frame), len(CLAIM_FEATURES)), dtype=np.float64)
        for j, col in enumerate(CLAIM_FEATURES):
            X[:, j] = _feature_column(frame[col], col)
        kinds = None  # a calibrator without kinds ignores the column
        if "memory_kind" in frame.columns and self._calibrator.has_kinds:
            kinds = frame["memory_kind"].to_numpy(dtype=object)
            try:
                self._calibrator.kind_codes(kinds)
            except ValueError as exc:
                raise _bad_request(str(exc)) from None
        out = pd.DataFrame({"p_violation": self._calibrator.predict(X, kinds)})
        if "claim_id" in frame.columns:
            out.insert(0, "claim_id", [None if _missing(v) else str(v)
                                       for v in frame["claim_id"].tolist()])
        return out

    # -- decisions ----------------------------------------------------------------------
    def _decide(self, frame: pd.DataFrame) -> pd.DataFrame:
        from amv_calib.gate import CandidateAction, Verifier

        rows = []
        verifier_cells = (frame[VERIFIERS_COLUMN].tolist() if VERIFIERS_COLUMN in frame.columns
                          else [None] * len(frame))
        for i, (cell, vcell) in enumerate(zip(frame[ACTION_COLUMN].tolist(), verifier_cells,
                                              strict=True)):
            request = _json_cell(cell, ACTION_COLUMN, i)
            if not isinstance(request, Mapping):
                raise _bad_request(f"row {i}: 'action' must hold a JSON object")
            if "action" in request:
                unknown = sorted(set(request) - {"action", "verifiers"})
                if unknown:
                    raise _bad_request(f"row {i}: request has unknown keys {unknown}")
                action_data, verifiers_data = request["action"], request.get("verifiers", [])
            else:
                action_data, verifiers_data = request, []
            if not _missing(vcell):
                if verifiers_data:
                    raise _bad_request(f"row {i}: verifiers given both in the request and in "
                                       f"the 'verifiers' column")
                verifiers_data = _json_cell(vcell, VERIFIERS_COLUMN, i)
            if not isinstance(verifiers_data, list):
                raise _bad_request(f"row {i}: 'verifiers' must be a JSON list")
            try:
                action = CandidateAction.from_dict(action_data)
                verifiers = [Verifier.from_dict(v) for v in verifiers_data]
                decision = self._gate.evaluate(action, verifiers)
            except (ValueError, TypeError) as exc:
                raise _bad_request(f"row {i}: {exc}") from None
            rows.append({
                "action_id": action.action_id,
                "decision": decision.regime,
                "regime": int(decision.regime_code),
                "verifier_id": "" if decision.verifier is None else decision.verifier.id,
                "reason": decision.reason,
                "p_any": float(decision.h_harm),
                "expected_loss": float(decision.r_expected),
                "probabilities": [float(p) for p in decision.probabilities],
                "artifact_version": self._version,
            })
        return pd.DataFrame(rows, columns=list(DECISION_COLUMNS))


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _feature_column(col: pd.Series, column: str) -> np.ndarray:
    """One feature column as float64, refusing (with the first bad row) what the gate would."""
    if col.dtype == bool or str(col.dtype) == "boolean":
        values = col.to_numpy(dtype=np.float64, na_value=np.nan)
    else:
        values = pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64,
                                                             na_value=np.nan)
    if column in ("source_trust_score", "model_confidence"):
        ok, rule = (values >= 0.0) & (values <= 1.0), "must lie in [0, 1]"
    elif column == "recency_hours":
        ok, rule = values >= 0.0, "must be >= 0"
    else:
        ok, rule = (values == 0.0) | (values == 1.0), "must be a boolean"
    ok &= np.isfinite(values)
    if not ok.all():
        row = int(np.argmin(ok))
        raw = col.iloc[row]
        raw = raw.item() if isinstance(raw, np.generic) else raw
        why = "is missing or not a number" if not np.isfinite(values[row]) else rule
        raise _bad_request(f"row {row}: {column}={raw!r} {why}")
    return values


def _json_cell(cell: Any, column: str, row: int) -> Any:
    if isinstance(cell, (Mapping, list)):
        return cell
    if not isinstance(cell, str):
        raise _bad_request(f"row {row}: {column!r} must hold JSON text, got {cell!r}")
    try:
        return loads_strict(cell)
    except json.JSONDecodeError as exc:
        raise _bad_request(f"row {row}: {column!r} is not valid JSON ({exc.msg} at "
                           f"column {exc.colno})") from None
    except RecursionError:
        raise _bad_request(f"row {row}: {column!r} holds JSON nested too deeply") from None
    except ValueError as exc:  # a key given twice
        raise _bad_request(f"row {row}: {column!r}: {exc}") from None


# -- what the logger needs ----------------------------------------------------------------
#: MLflow type of every column of a request and of an answer.
_COLUMN_TYPES: Final[dict[str, str | Array]] = {
    "claim_id": "string", "recency_hours": "double", "source_trust_score": "double",
    "model_confidence": "double", "contradiction_flag": "boolean", "memory_kind": "string",
    ACTION_COLUMN: "string",
    VERIFIERS_COLUMN: "string", "p_violation": "double", "action_id": "string",
    "decision": "string", "regime": "long", "verifier_id": "string", "reason": "string",
    "p_any": "double", "expected_loss": "double", "probabilities": Array(DataType.double),
    "artifact_version": "string",
}


def model_signature() -> ModelSignature:
    """Every column optional: a request carries the claim columns or ``action``, an answer
    holds probabilities or decisions."""
    def optional(columns: tuple[str, ...]) -> Schema:
        return Schema([ColSpec(_COLUMN_TYPES[c], c, required=False) for c in columns])

    return ModelSignature(
        inputs=optional(("claim_id", *CLAIM_FEATURES, "memory_kind", ACTION_COLUMN,
                         VERIFIERS_COLUMN)),
        outputs=optional(("claim_id", "p_violation", *DECISION_COLUMNS)),
    )


def input_example() -> pd.DataFrame:
    """A probability request of two claims (what the model's page in MLflow shows)."""
    return pd.DataFrame({
        "claim_id": ["iban-of-user", "prod-cluster-version"],
        "recency_hours": [12.0, 900.0],
        "source_trust_score": [0.9, 0.4],
        "model_confidence": [0.95, 0.6],
        "contradiction_flag": [False, True],
    })


def decision_example() -> pd.DataFrame:
    """A decision request: one transfer resting on one remembered IBAN, one verifier."""
    request = {
        "action": {
            "actionId": "transfer-1", "toolName": "bank.transfer",
            "impactCostTheta": 100.0, "abstentionCostKappa": 5.0,
            "premises": [{"id": "p1", "claim": {
                "id": "iban-of-user", "recencyHours": 400.0, "sourceTrustScore": 0.7,
                "modelConfidence": 0.8, "contradictionFlag": False}}],
        },
        "verifiers": [{"id": "ask-user", "resolvesPremiseIds": ["p1"], "executionCost": 0.5,
                       "symmetricReliability": 0.95}],
    }
    return pd.DataFrame({ACTION_COLUMN: [json.dumps(request)]})


def pip_requirements() -> list[str]:
    """The serving environment's requirements, pinned to what is installed.

    ``amv_calib`` itself is not on a package index: serve with ``--env-manager local`` from
    an environment where it is installed. Listing the requirements also saves MLflow from
    inferring them (which would load the model in a subprocess at logging time).
    """
    from importlib.metadata import version

    return [f"mlflow=={mlflow.__version__}", f"numpy=={version('numpy')}",
            f"pandas=={version('pandas')}"]


# Models from code: MLflow runs this file under a generated module name and takes the model
# from set_model. An ordinary ``import amv_calib.tracking._pyfunc`` registers nothing.
if __name__ != "amv_calib.tracking._pyfunc":
    mlflow.models.set_model(GateModel())
