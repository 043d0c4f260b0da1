"""Every `stage` label of `sidecar_stage_seconds` the server observes is explained in the metric's
HELP and in docs/operations.md ("Tracing"): the `message` stage of ParseStream and Multiplex was
exported with neither saying what it timed."""

from __future__ import annotations

import re

from sidecar import metrics
from tests.conftest import REPO

#: Where the server names a stage: `STAGE_LATENCY.labels(rpc, "X")`, `stage="X"` (an offloaded
#: call's stage), `_stage(rpc, "X")` and the offloader's default `stage: str = "X"`.
_NAMED = [r'STAGE_LATENCY\.labels\([^,()]+, "(\w+)"\)', r'stage="(\w+)"', r'_stage\(rpc, "(\w+)"\)',
          r'stage: str = "(\w+)"']


def observed_stages() -> set[str]:
    stages = set()
    for path in (REPO / "sidecar").rglob("*.py"):
        text = path.read_text()
        for pattern in _NAMED:
            stages.update(re.findall(pattern, text))
    return stages


def test_every_stage_is_explained() -> None:
    stages = observed_stages()
    assert {"queue", "native", "decode", "message"} <= stages, stages
    docs = (REPO / "docs" / "operations.md").read_text()
    at = docs.index("sidecar_stage_seconds")
    histogram_docs = docs[docs.rindex("\n\n", 0, at):docs.index("\n\n", at)]  # its paragraph
    for stage in stages:
        assert f"{stage}:" in metrics.STAGE_LATENCY._documentation, stage
        assert f"`{stage}`" in histogram_docs, stage
