"""Build of the optional compiled gate kernel; everything else is in pyproject.toml.

``amv_calib.gate._ckernel`` speeds up the myopic rule of ``Gate.evaluate`` and
``evaluate_batch``. It is optional: where it cannot be compiled the install goes on and the
gate runs its pure-Python / numpy code, which gives the same decisions bit for bit.
"""

from __future__ import annotations

import sys

from setuptools import Extension, setup

# IEEE double arithmetic evaluated as written: no fused multiply-add, no fast-math
# (the kernel must agree bit for bit with the Python engine)
_ARGS = [] if sys.platform == "win32" else ["-O2", "-ffp-contract=off", "-fno-fast-math"]

setup(
    ext_modules=[
        Extension(
            "amv_calib.gate._ckernel",
            ["amv_calib/gate/_ckernel.c"],
            extra_compile_args=_ARGS,
            optional=True,
        )
    ]
)
