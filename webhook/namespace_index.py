"""What the watch shows of namespaces (pure state): burst budgets and the GPUs their burst pods count
against them (kept by the cache's pod writes), cost caps, default walltimes, the settings of waiting
before bursting and of machines, and the cluster's identity (the UID of kube-system)."""

from __future__ import annotations

from collections.abc import Iterable

from jarvice import contract
from jarvice.gpubudget import NamespaceBudget
from webhook.spending import CostCaps
from webhook.types import NamespaceInfo, NamespaceMachines, PodInfo

# Every cluster has it and it is never deleted: its UID names the cluster (contract.cluster_identity).
CLUSTER_NAMESPACE = "kube-system"
_NO_KUBE_SYSTEM = "the kube-system namespace is not in the webhook's cache, so the cluster's identity is unknown"


class NamespaceIndex:
    """What the watch shows of namespaces: burst budgets and the GPUs their burst pods count against
    them (kept by the pod writes), default walltimes, the cluster's identity."""

    def __init__(self) -> None:
        self.budgets: dict[str, NamespaceBudget] = {}  # namespaces with a max-remote-gpus annotation
        self.default_walltimes: dict[str, str] = {}  # namespaces with a default-walltime annotation
        self.caps: dict[str, CostCaps] = {}  # namespaces with a cost cap
        self.apps: dict[str, str] = {}  # namespaces that name their JARVICE application
        self.burst_afters: dict[str, str] = {}  # namespaces with a burst-after annotation
        self.machines: dict[str, NamespaceMachines] = {}  # namespaces with a machines or max-remote-queue annotation
        self.own_accounts: set[str] = set()  # namespaces that pay with their own key
        self.kube_system_uid = ""
        self.remote_in_use: dict[str, int] = {}  # namespace -> GPUs of its watched burst pods
        # (kube-system UID, cluster name) -> (identity, why unknown): worked out once, not per review.
        self._identity: tuple[str, str, tuple[str, str]] = ("", "", ("", _NO_KUBE_SYSTEM))

    def replace(self, namespaces: Iterable[NamespaceInfo]) -> None:
        self.budgets = {}
        self.default_walltimes = {}
        self.caps = {}
        self.apps = {}
        self.burst_afters = {}
        self.machines = {}
        self.own_accounts = set()
        self.kube_system_uid = ""
        for namespace in namespaces:
            self.upsert(namespace)

    def upsert(self, namespace: NamespaceInfo) -> None:
        name = namespace.name
        if namespace.budget is None:
            self.budgets.pop(name, None)
        else:
            self.budgets[name] = namespace.budget
        if namespace.default_walltime is None:
            self.default_walltimes.pop(name, None)
        else:
            self.default_walltimes[name] = namespace.default_walltime
        if namespace.cost_caps is None:
            self.caps.pop(name, None)
        else:
            self.caps[name] = namespace.cost_caps
        if namespace.app:
            self.apps[name] = namespace.app
        else:
            self.apps.pop(name, None)
        if namespace.burst_after is None:
            self.burst_afters.pop(name, None)
        else:
            self.burst_afters[name] = namespace.burst_after
        if namespace.machines is None:
            self.machines.pop(name, None)
        else:
            self.machines[name] = namespace.machines
        if namespace.own_account:
            self.own_accounts.add(name)
        else:
            self.own_accounts.discard(name)
        if name == CLUSTER_NAMESPACE:
            self.kube_system_uid = namespace.uid

    def count_remote(self, pod: PodInfo, sign: int) -> None:
        # A finished burst pod still carries remote_gpus while its job may run (see model.parse_pod).
        if pod.remote_gpus:
            left = self.remote_in_use.get(pod.namespace, 0) + sign * pod.remote_gpus
            if left:
                self.remote_in_use[pod.namespace] = left
            else:
                del self.remote_in_use[pod.namespace]

    def cluster_identity(self, cluster_name: str) -> tuple[str, str]:
        """(the cluster's identity, "") or ("", why it is unknown). Every job a burst pod submits
        carries it, so the reaper of this cluster, and only that one, may stop the job."""
        uid = self.kube_system_uid
        known_uid, known_name, identity = self._identity
        if uid == known_uid and cluster_name == known_name:
            return identity
        if not uid:
            identity = "", _NO_KUBE_SYSTEM
        else:
            try:
                identity = contract.cluster_identity(uid, cluster_name), ""
            except ValueError as exc:
                identity = "", f"the cluster's identity is unknown: {exc}"
        self._identity = (uid, cluster_name, identity)
        return identity

    def delete(self, name: str) -> None:
        self.budgets.pop(name, None)
        self.default_walltimes.pop(name, None)
        self.caps.pop(name, None)
        self.apps.pop(name, None)
        self.burst_afters.pop(name, None)
        self.machines.pop(name, None)
        if name == CLUSTER_NAMESPACE:
            self.kube_system_uid = ""
