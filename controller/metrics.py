"""Prometheus metrics, on a registry owned by the app (no global default registry)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge


class Metrics:
    def __init__(self, *, is_leader: Callable[[], bool]) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.leader = Gauge(
            "nimbix_burst_controller_leader", "1 while this replica holds the Lease and acts", registry=r
        )
        self.leader.set_function(lambda: 1.0 if is_leader() else 0.0)
        self.rebursts = Counter(
            "nimbix_burst_controller_rebursts", "Stranded local pods deleted so their Job recreates them", registry=r
        )
        self.homecomings = Counter(
            "nimbix_burst_controller_homecomings",
            "Burst pods brought home: deleted (their Job recreates them locally) while their JARVICE job was queued",
            registry=r,
        )
        self.moves_home = Counter(
            "nimbix_burst_controller_moves_home",
            "Moves home of running burst jobs from their checkpoints, by how they ended (resumed: the replacement"
            " runs on a local node; given_up: the job kept running remotely, or its replacement burst again)",
            ["outcome"],
            registry=r,
        )
        self.gpu_hours_moved_home = Counter(
            "nimbix_burst_controller_gpu_hours_moved_home",
            "GPU-hours of walltime left to the jobs that moved home (what they would have run remotely)",
            registry=r,
        )
        self.stranded_noted = Counter(
            "nimbix_burst_controller_stranded_noted",
            "Stranded local pods reported (Event + annotation) but not deleted",
            ["reason"],
            registry=r,
        )
        self.cap_hits = Counter(
            "nimbix_burst_controller_reburst_cap_hits",
            "Stranded pods not re-burst because their owner reached the per-owner cap",
            registry=r,
        )
        self.reburst_aborted = Counter(
            "nimbix_burst_controller_reburst_aborted",
            "Actions on stranded pods given up at the last moment, by reason (changed: a re-burst's pod was bound,"
            " changed or went away; no-longer-stranded: its re-read showed it recovered; report-changed: a"
            " report's annotation found the pod changed or gone)",
            ["reason"],
            registry=r,
        )
        self.cluster = Gauge(
            "nimbix_burst_controller_cluster_info",
            "1, labeled with the cluster identity this controller's job labels carry (known once read)",
            ["cluster"],
            registry=r,
        )
        self.orphans_seen = Counter(
            "nimbix_burst_controller_orphans_seen",
            "This cluster's JARVICE jobs first seen unwanted, by why (pod-gone, pod-finished, deletion-overdue,"
            " container-exited, duplicate, not-decided)",
            ["reason"],
            registry=r,
        )
        self.orphans_pending = Gauge(
            "nimbix_burst_controller_orphans",
            "This cluster's JARVICE jobs nobody wants, as of the last round",
            registry=r,
        )
        self.jobs_not_ours = Gauge(
            "nimbix_burst_controller_jobs_not_ours",
            "Live JARVICE jobs with a runner label the reaper leaves alone, as of the last round, by kind"
            " (legacy-label: made without a cluster identity; other-cluster)",
            ["kind"],
            registry=r,
        )
        self.job_ended_recorded = Counter(
            "nimbix_burst_controller_job_ended_recorded",
            "Burst pods marked nimbix-burst.io/job-state=ended (no live JARVICE job carries their UID)",
            registry=r,
        )
        self.job_events = Counter(
            "nimbix_burst_controller_job_events",
            "Events recorded on burst pods about their JARVICE jobs, by reason (NimbixSubmitted, NimbixQueued,"
            " NimbixRunning, NimbixSucceeded, NimbixFailed), and NimbixOutputsKeptInVault once per pod",
            ["reason"],
            registry=r,
        )
        self.orphans_terminated = Counter(
            "nimbix_burst_controller_orphans_terminated", "Orphaned JARVICE jobs terminated", registry=r
        )
        self.orphans_dry_run = Counter(
            "nimbix_burst_controller_orphans_dry_run",
            "Orphaned JARVICE jobs that would have been terminated (dry run)",
            registry=r,
        )
        self.unaccounted_stopped = Counter(
            "nimbix_burst_controller_unaccounted_jobs_stopped",
            "Live jobs on the add-on's JARVICE accounts that nothing accounts for, terminated through the"
            " gateway, by why (not-decided, above-counted-size, over-cap)",
            ["reason"],
            registry=r,
        )
        self.unaccounted_marked = Gauge(
            "nimbix_burst_controller_unaccounted_jobs_marked",
            "Live jobs the last round found unaccounted for: the next round stops those still so",
            registry=r,
        )
        self.cluster_identity_known = Gauge(
            "nimbix_burst_controller_cluster_identity_known",
            "1 once the cluster identity (kube-system's UID) was read; until then no job of this cluster is"
            " told from another's: the reaper stops nothing and the spend record waits",
            registry=r,
        )
        self.reaper_running = Gauge(
            "nimbix_burst_controller_reaper_running",
            "1 while the orphan reaper terminates orphaned jobs: on, with JARVICE credentials, not a dry run,"
            " the cluster identity known",
            registry=r,
        )
        self.spend_record_observed = Gauge(
            "nimbix_burst_controller_spend_record_observed",
            "Unix time of the JARVICE listing the spend record this leader last built summarizes",
            registry=r,
        )
        self.namespace_cost_per_hour = Gauge(
            "nimbix_burst_namespace_cost_per_hour",
            "What the namespace's live JARVICE jobs cost per hour (mc_price x nodes), as the leader last counted",
            ["namespace"],
            registry=r,
        )
        self.namespace_month_cost = Gauge(
            "nimbix_burst_namespace_month_cost",
            "The namespace's cost this UTC month in the worst case: ended jobs' cost plus every live job's"
            " price x nodes x walltime",
            ["namespace"],
            registry=r,
        )
        self.namespace_remote_gpus = Gauge(
            "nimbix_burst_namespace_remote_gpus_live",
            "GPUs the namespace's live JARVICE jobs hold (machine GPUs x nodes)",
            ["namespace"],
            registry=r,
        )
        self.namespace_cap_per_hour = Gauge(
            "nimbix_burst_namespace_cost_cap_per_hour",
            "The namespace's nimbix-burst.io/max-cost-per-hour (an invalid value caps at 0)",
            ["namespace"],
            registry=r,
        )
        self.namespace_cap_per_month = Gauge(
            "nimbix_burst_namespace_cost_cap_per_month",
            "The namespace's nimbix-burst.io/max-cost-per-month (an invalid value caps at 0)",
            ["namespace"],
            registry=r,
        )
        self.unattributed_jobs = Gauge(
            "nimbix_burst_unattributed_jobs",
            "Live JARVICE jobs with this cluster's label whose pod's namespace is not known",
            registry=r,
        )
        self.unattributed_cost_per_hour = Gauge(
            "nimbix_burst_unattributed_cost_per_hour",
            "What the unattributed live jobs cost per hour",
            registry=r,
        )
        self.errors = Counter(
            "nimbix_burst_controller_errors",
            "Failed actions, by kind (kubernetes, kubernetes-identity, jarvice-list, jarvice-history,"
            " jarvice-machines, jarvice-terminate, spend-record, gateway-jobs, gateway-terminate,"
            " gateway-checkpoint)",
            ["kind"],
            registry=r,
        )
