"""The rewrite policy, burst decision and terms the patch tables share (test_mutation, test_decision_label)."""

from __future__ import annotations

from tests.unit.webhook.builders import GPU
from webhook.rewrite_terms import BurstTerms, RewritePolicy
from webhook.types import Decision
from webhook.walltime import Walltime

LEGACY = "alpha.kubernetes.io/nvidia-gpu"
POLICY = RewritePolicy(
    gpu_resources=(GPU, LEGACY),
    remote_cpu="100m",
    remote_memory="128Mi",
    strip_node_selector_keys=frozenset({"gpu-model"}),
    strip_toleration_keys=frozenset({"nvidia.com/gpu"}),
    strip_runtime_classes=frozenset({"nvidia"}),
    credentials_secret="",  # the credentials mount has its own table (test_burst_essentials)
)
REMOTE = Decision(kind="remote", reason="needs 4 nvidia.com/gpu; best node a has 2 free")
TERMS = BurstTerms(cluster="prod-0f1e2d3c4b5a", limit=Walltime(3600, "activeDeadlineSeconds 3600"))
