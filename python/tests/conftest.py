# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures: the C++ reference records (skipped with a reason when the reference program
was not built, i.e. outside the CMake test run)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reference import load_records, run_reference  # noqa: E402


@pytest.fixture(scope="session")
def ref_file(tmp_path_factory) -> Path:
    """The records file the C++ reference program wrote."""
    if not os.environ.get("COMMPRESS_PY_REFERENCE"):
        pytest.skip("COMMPRESS_PY_REFERENCE unset: run through ctest (label python) to build the C++ reference")
    tmp = tmp_path_factory.mktemp("reference")
    run_reference(tmp)
    return tmp / "reference.bin"


@pytest.fixture(scope="session")
def ref(ref_file):
    return load_records(ref_file)
