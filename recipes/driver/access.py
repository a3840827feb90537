"""What the run's driver may do in the cluster: the rules of its namespaced Role, one table.

The driver (issue 27) runs `run`'s pipeline in the cluster as conventions.DRIVER_KSA. It submits and
deletes the steps' JobSets and reads what says how they fare. It never reads Secrets: the attaching
`tpu-rl run` fills the token Secret and creates the ConfigMaps with the user's own credentials.

The rules are exactly the calls the pipeline makes: tests/test_driver_access.py runs it against the
fake API, which maps each request to (group, resource, verb) as the API server's RequestInfo does,
and fails on a call no rule allows and on a verb no call used. Nothing here is cluster-scoped:
discovery (`check_ready`) is a non-resource URL, which Kubernetes' default ClusterRole system:discovery
grants every authenticated user, so no ClusterRole is needed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AccessRule:
    """One rule of the Role: verbs on one resource (a subresource as resource/sub) of one API group."""

    api_group: str  # "" is the core group
    resource: str
    verbs: tuple[str, ...]
    why: str


DRIVER_RULES: tuple[AccessRule, ...] = (
    AccessRule("jobset.x-k8s.io", "jobsets", ("get", "create", "delete"),
               "submit each step, follow its status, delete it to fail over or resubmit a lost slice"),
    AccessRule("", "pods", ("list",),
               "the step's pods by label: problems, readiness, restarts, the capacity they run on"),
    AccessRule("", "pods/log", ("get",),
               "the main container's log: progress, evaluations, stalls and failure reasons"),
    AccessRule("kueue.x-k8s.io", "workloads", ("list",),
               "Kueue's Workload of a JobSet: queued, admitted, evicted or deactivated"),
    AccessRule("autoscaling.x-k8s.io", "provisioningrequests", ("list",),
               "the flex-start slice's ProvisioningRequest: accepted, provisioned or failed"),
)

