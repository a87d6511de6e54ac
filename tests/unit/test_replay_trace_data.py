"""The replay's default input ships with the checkout: `make replay` and `make bench` read the
Alibaba openb trace from data/alibaba-gpu-2023/, wherever the repository is cloned. Missing, it is
a failure, never a skip."""

from __future__ import annotations

from pathlib import Path

from bench import clusters
from replay import plan, settings, trace

REPO_ROOT = Path(__file__).resolve().parents[2]
TRACE_DIR = REPO_ROOT / "data" / "alibaba-gpu-2023"


def test_the_default_trace_is_inside_the_checkout() -> None:
    defaults = settings.parse_settings([])
    assert defaults.nodes == TRACE_DIR / "openb_node_list_all_node.csv"
    assert defaults.pods == TRACE_DIR / "openb_pod_list_default.csv"
    assert clusters.ALIBABA_DIR == TRACE_DIR
    # The data's own README carries where it comes from and the paper to cite.
    assert "Weng et al., USENIX ATC 2023" in (TRACE_DIR / "README.md").read_text(encoding="utf-8")


def test_the_default_slice_is_the_documented_one() -> None:
    defaults = settings.parse_settings([])
    nodes = trace.parse_nodes(defaults.nodes.read_text(encoding="utf-8"))
    pods = trace.parse_pods(defaults.pods.read_text(encoding="utf-8"))
    assert (len(nodes), sum(n.gpus for n in nodes), len(pods)) == (1523, 6212, 8152)
    built = plan.build_plan(
        nodes, pods, start_index=defaults.start_index, count=defaults.count, free_gpus=None, seed=defaults.seed
    )
    replayed = [built.pods[name].row for name in built.replay]
    assert len(replayed) == 2000
    assert round((built.end - built.start) / 86400, 1) == 5.4
    assert sum(1 for row in replayed if row.gpus > 1) == 21
