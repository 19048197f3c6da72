"""The ``>>>`` examples in the docstrings of the main public entry points run as written."""

from __future__ import annotations

import doctest
import importlib

import pytest

#: module -> the public names whose docstrings carry examples.
EXAMPLES = {
    "amv_calib.gate._engine": ["Gate"],
    "amv_calib.calibration._calibrators": ["PlattCalibrator"],
    "amv_calib.claims._ingest": ["load_claims"],
}


@pytest.mark.parametrize("module", sorted(EXAMPLES))
def test_docstring_examples_run(module: str) -> None:
    mod = importlib.import_module(module)
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    ran = 0
    for name in EXAMPLES[module]:
        for test in finder.find(getattr(mod, name), name, module=mod):
            if test.examples:
                runner.run(test)
                ran += len(test.examples)
    result = runner.summarize(verbose=False)
    assert ran > 0, f"{module}: no examples found in {EXAMPLES[module]}"
    assert result.failed == 0, f"{module}: {result.failed} of {result.attempted} examples failed"
