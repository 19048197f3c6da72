"""``import amv_calib.gate`` pulls in numpy and the standard library only."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("sklearn", "pandas", "mlflow", "optuna", "scipy", "matplotlib", "pyarrow", "joblib")

PROBE = """
import json, sys
import amv_calib.gate
from amv_calib.gate import Gate, CandidateAction, Premise, Verifier
act = CandidateAction(action_id="a", tool_name="t", impact_cost_theta=10.0,
                      abstention_cost_kappa=5.0,
                      premises=(Premise(id="p", calibrated_violation_probability=0.04),))
v = Verifier(id="v", resolves_premise_ids=("p",), execution_cost=0.1, symmetric_reliability=0.9)
Gate().evaluate(act, [v]); Gate(mode="seed").evaluate(act, [v])
Gate().run(act, [v], lambda *_: True)
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
"""


def test_gate_imports_numpy_and_stdlib_only() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         check=True).stdout
    loaded = set(json.loads(out))
    assert "numpy" in loaded
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
    third_party = {m for m in loaded if m not in sys.stdlib_module_names
                   and not m.startswith("_")} - {"amv_calib", "numpy"}
    assert not third_party, sorted(third_party)
