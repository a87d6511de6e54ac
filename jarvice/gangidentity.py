"""A gang's identity, the contract's rule (jarvice.contract, "gangs"), and whether a pod's claim to one
holds (pure).

The webhook names a gang from the pod's own namespace and owner, the controller checks a pod's
`nimbix-burst.io/gang` against the same rule: a pod that writes another gang's identity on itself
(a pod the webhook never saw can carry any annotation at creation) is then no member of that gang.
"""

from __future__ import annotations

import functools
import uuid

KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
# A gang's pod asks for its identity and its generations' at every admission: uuid5 (a SHA-1 and a
# UUID object) cost ~25 us each, a third of a gang's snapshot. Pure, so a bounded memo is exact.
_UID_MEMO = 4096


@functools.lru_cache(maxsize=_UID_MEMO)
def pod_group_uid(cluster: str, namespace: str, group: str) -> str:
    """A Kueue pod group's identity: the same for every pod of the group, another in another namespace."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{cluster}/{namespace}/{group}"))


@functools.lru_cache(maxsize=_UID_MEMO)
def generation_uid(gang_uid: str, generation: int) -> str:
    """The identity of a gang's generation: generation 1's is the gang's own (the Job's UID, the pod
    group's uuid5), a later one's a uuid5 of it, the same wherever it is computed."""
    if generation == 1:
        return gang_uid
    try:
        space = uuid.UUID(gang_uid)
    except ValueError:  # a Job's UID is a UUID; anything else still names one generation alone
        space = uuid.uuid5(uuid.NAMESPACE_URL, gang_uid)
    return str(uuid.uuid5(space, f"generation/{generation}"))


def claim_holds(gang: str, *, generation: int, namespace: str, group: str, job_uid: str, cluster: str) -> bool:
    """Whether `gang` (a pod's annotation) is the identity the pod's own fields make: its Kueue pod
    group in its own namespace (`group`, with the cluster's identity), or the Indexed Job that controls
    it (`job_uid`, its controller owner reference), in the generation it says."""
    if not gang or generation < 1:
        return False
    bases = []
    if group and cluster:
        bases.append(pod_group_uid(cluster, namespace, group))
    if job_uid:
        bases.append(job_uid)
    return any(generation_uid(base, generation) == gang for base in bases)
