"""Every field of the workload manifests muster reads (Job, JobSet, Volcano Job, Pod,
PodTemplate), and what muster does with it: one table, read by the parser
(``manifests``), the docs (docs/api.md, "What each workload field does") and the fuzz
test that checks no field is silently dropped.

Each field is *honoured* (it changes what muster schedules; ``why`` says how), *passed
through* (not scheduling's business: the kubelet's, a controller's or the cluster's;
accepted and left alone, ``why`` says why) or *refused* (it would change scheduling in
the peer and muster does not model it: ``InvalidInput`` at its path, "is not supported by
muster: why", unless its value is one of ``harmless``, the values that ask for nothing).
A field in no table is refused as an unknown field, as ``kubectl apply``'s strict field
validation does. Queue objects and ProvisioningRequests are read strictly by ``parse``
itself: every field they accept is honoured.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from muster.core.model.fields import InvalidInput

Treatment = Literal["honoured", "passed", "refused"]
NOT_SUPPORTED = "is not supported by muster"


@dataclass(frozen=True, slots=True)
class Field:
    treatment: Treatment
    why: str
    harmless: tuple[object, ...] = ()  # refused fields: values that ask for nothing


@dataclass(frozen=True, slots=True)
class Shape:
    """An object's fields, and the shape of each honoured field that is an object (or a
    list of objects) read further."""

    name: str  # for the docs: "Pod spec", "container"...
    fields: Mapping[str, Field]
    nested: Mapping[str, Shape] = field(default_factory=dict)


def _with(shape: Shape, name: str, **fields: Field | Shape) -> Shape:
    """``shape`` with some fields (or nested shapes) replaced."""
    return Shape(
        name,
        {**shape.fields, **{k: v for k, v in fields.items() if isinstance(v, Field)}},
        {**shape.nested, **{k: v for k, v in fields.items() if isinstance(v, Shape)}},
    )


def honoured(why: str) -> Field:
    return Field("honoured", why)


def passed(why: str) -> Field:
    return Field("passed", why)


def refused(why: str, *harmless: object) -> Field:
    return Field("refused", why, harmless)


_KUBELET = "the kubelet's business (how the pod runs, not where)"
_STORAGE = "storage is not modelled: volumes do not constrain placement in muster"
_NAMING = "names, DNS and service accounts of the pods, not their placement"
_CLEANUP = "clean-up after the end, not scheduling"
_SLEEP = "read for the simulated runtime (`sleep N`); otherwise the kubelet's"

EXPRESSION = Shape(
    "node selector requirement",
    {
        "key": honoured("the node label"),
        "operator": honoured("only In, with one value, is a node selector; others refused"),
        "values": honoured("exactly one value"),
    },
)
TERM = Shape(
    "node selector term",
    {
        "matchExpressions": honoured("each In with one value is a node selector entry"),
        "matchFields": refused("node field selectors (metadata.name) are not modelled", []),
    },
    {"matchExpressions": EXPRESSION},
)
REQUIRED_NODE_AFFINITY = Shape(
    "required node affinity",
    {"nodeSelectorTerms": honoured("one term only: alternatives (OR) are refused")},
    {"nodeSelectorTerms": TERM},
)
NODE_AFFINITY = Shape(
    "node affinity",
    {
        "requiredDuringSchedulingIgnoredDuringExecution": honoured(
            "its In expressions join the node selector"
        ),
        "preferredDuringSchedulingIgnoredDuringExecution": refused(
            "preferred node affinity (weighted node scores) is not modelled", []
        ),
    },
    {"requiredDuringSchedulingIgnoredDuringExecution": REQUIRED_NODE_AFFINITY},
)
AFFINITY = Shape(
    "affinity",
    {
        "nodeAffinity": honoured("see node affinity"),
        "podAffinity": refused(
            "pod affinity is not modelled (use a topology annotation or gpu-group-size)", {}
        ),
        "podAntiAffinity": refused(
            "pod anti-affinity is not modelled (use JobSet's exclusive-topology)", {}
        ),
    },
    {"nodeAffinity": NODE_AFFINITY},
)
PORT = Shape(
    "container port",
    {
        "containerPort": passed("the pod's own network"),
        "hostIP": passed("only with hostPort, which is refused"),
        "hostPort": refused("host ports (one pod per port and node) are not modelled", 0),
        "name": passed("the pod's own network"),
        "protocol": passed("the pod's own network"),
    },
)
RESOURCES = Shape(
    "container resources",
    {
        "requests": honoured("the pod's requests (Kubernetes' PodRequests)"),
        "limits": honoured("a resource with a limit and no request requests its limit"),
        "claims": refused("dynamic resource allocation (resource claims) is not modelled", []),
    },
)
CONTAINER = Shape(
    "container",
    {
        "name": passed("the container's name"),
        "image": honoured("an image named `sleep` given a duration is the simulated runtime"),
        "command": honoured(_SLEEP),
        "args": honoured(_SLEEP),
        "resources": honoured("requests and limits"),
        "restartPolicy": refused("restart rules of a regular container are not modelled"),
        "ports": honoured("host ports are refused; the others are the pod's network"),
        **dict.fromkeys(
            [
                "env",
                "envFrom",
                "imagePullPolicy",
                "lifecycle",
                "livenessProbe",
                "readinessProbe",
                "startupProbe",
                "resizePolicy",
                "securityContext",
                "stdin",
                "stdinOnce",
                "tty",
                "terminationMessagePath",
                "terminationMessagePolicy",
                "workingDir",
            ],
            passed(_KUBELET),
        ),
        "volumeDevices": passed(_STORAGE),
        "volumeMounts": passed(_STORAGE),
    },
    {"resources": RESOURCES, "ports": PORT},
)
INIT_CONTAINER = _with(
    CONTAINER,
    "init container",
    restartPolicy=honoured(
        "Always: a sidecar, which keeps running: its requests add to the containers'"
    ),
)
POD_SPEC = Shape(
    "pod spec",
    {
        "containers": honoured("requests, runtime"),
        "initContainers": honoured("requests (the largest, or summed sidecars), runtime"),
        "nodeSelector": honoured("the pod set's node selector"),
        "affinity": honoured("required node affinity; pod (anti-)affinity refused"),
        "tolerations": honoured("the pod set's tolerations (tolerationSeconds passed)"),
        "priorityClassName": honoured("the workload's priority class (after Kueue's label)"),
        "overhead": honoured("added to the pod's requests, as Kubernetes does"),
        "schedulerName": passed(
            "muster is the scheduler of every workload it is given, whatever scheduler it names"
        ),
        "runtimeClassName": passed(
            "RuntimeClass objects are not read: their scheduling and overhead are not applied"
        ),
        "restartPolicy": passed("container restarts inside a running pod are the kubelet's"),
        "terminationGracePeriodSeconds": honoured(
            "SIGTERM to SIGKILL when muster stops the pod (preempted: time to checkpoint)"
        ),
        "os": passed("a validation hint; select nodes by kubernetes.io/os in nodeSelector"),
        "readinessGates": passed("readiness after the pod started"),
        **dict.fromkeys(
            [
                "automountServiceAccountToken",
                "dnsConfig",
                "dnsPolicy",
                "enableServiceLinks",
                "hostAliases",
                "hostname",
                "imagePullSecrets",
                "serviceAccount",
                "serviceAccountName",
                "setHostnameAsFQDN",
                "subdomain",
            ],
            passed(_NAMING),
        ),
        **dict.fromkeys(
            ["hostIPC", "hostPID", "hostUsers", "securityContext", "shareProcessNamespace"],
            passed(_KUBELET),
        ),
        "ephemeralContainers": passed("debugging containers, added to a running pod"),
        "volumes": passed(_STORAGE),
        "nodeName": refused("binding a pod to a node by name is muster's to decide"),
        "priority": refused("set from priorityClassName by Kubernetes; name a class instead", 0),
        "preemptionPolicy": refused(
            "a pod's own preemptionPolicy: give it on the PriorityClass", "PreemptLowerPriority"
        ),
        "topologySpreadConstraints": refused(
            "topology spread constraints are not modelled (use a topology annotation)", []
        ),
        "schedulingGates": refused("a gated pod is never scheduled until ungated", []),
        "resourceClaims": refused("dynamic resource allocation is not modelled", []),
        "resources": refused("pod-level resources are not modelled (give containers')"),
        "hostNetwork": refused("the host's ports (one such pod per port and node)", False),
        "activeDeadlineSeconds": refused("a pod deadline (the pod failed when reached)"),
    },
    {"containers": CONTAINER, "initContainers": INIT_CONTAINER, "affinity": AFFINITY},
)
POD_TEMPLATE_SPEC = Shape(
    "pod template",
    {
        "metadata": honoured("annotations (topology, HAMi, gpu-group-size, consume request)"),
        "spec": honoured("the pod spec"),
    },
    {"spec": POD_SPEC},
)
JOB_SPEC = Shape(
    "Job spec",
    {
        "parallelism": honoured("the pods at once (at most completions), as Kueue counts them"),
        "completions": honoured("caps the pods at once"),
        "backoffLimit": honoured("failed pods replaced in place before the pod set fails"),
        "template": honoured("the pod template"),
        "suspend": passed(
            "Kueue's convention: every queued Job is held (suspended) until admitted"
        ),
        "completionMode": passed("pod indexes (hostnames, env), not placement"),
        "manualSelector": passed("how the Job finds its pods"),
        "selector": passed("how the Job finds its pods"),
        "podReplacementPolicy": passed(
            "when a replacement pod is created; muster replaces a failed pod at once"
        ),
        "ttlSecondsAfterFinished": passed(_CLEANUP),
        "activeDeadlineSeconds": refused("a Job deadline (the Job failed when reached)"),
        "backoffLimitPerIndex": refused("per-index backoff limits (Indexed Jobs)"),
        "maxFailedIndexes": refused("per-index backoff limits (Indexed Jobs)"),
        "podFailurePolicy": refused("exit-code and condition rules for failed pods"),
        "successPolicy": refused("a Job succeeding before all its pods do"),
        "managedBy": refused("a Job another controller runs", "kubernetes.io/job-controller"),
    },
    {"template": POD_TEMPLATE_SPEC},
)
JOB_TEMPLATE_SPEC = Shape(
    "Job template",
    {
        "metadata": honoured("annotations: exclusive-topology for this replicated job"),
        "spec": honoured("the Job spec"),
    },
    {"spec": JOB_SPEC},
)
REPLICATED_JOB = Shape(
    "replicated job",
    {
        "name": honoured("the pod set's name"),
        "replicas": honoured("child Jobs: pods = replicas x the Job's pods"),
        "template": honoured("the Job template"),
        "groupName": passed("a label for the child Jobs"),
        "dependsOn": refused("starting after other replicated jobs are ready or done", []),
    },
    {"template": JOB_TEMPLATE_SPEC},
)
JOBSET_RULE = Shape(
    "JobSet failure policy rule",
    {
        "action": honoured(
            "FailJobSet, RestartJobSet, RestartJob and their AndIgnoreMaxRestarts forms"
        ),
        "targetReplicatedJobs": honoured("the pod sets whose failure the rule matches"),
        "onJobFailureReasons": honoured(
            "a child Job fails in muster by BackoffLimitExceeded only: a rule without it "
            "never matches"
        ),
        "name": passed("the rule's name"),
        "onJobFailureMessagePatterns": refused(
            "failure messages are not modelled: a pattern cannot be matched", []
        ),
    },
)
JOBSET_FAILURE_POLICY = Shape(
    "JobSet failure policy",
    {
        "maxRestarts": honoured("the workload's maxRestarts"),
        "rules": honoured("the workload's failure rules"),
        "restartStrategy": refused(
            "InPlaceRestart (muster recreates every pod on a restart)",
            "Recreate",
            "BlockingRecreate",
        ),
    },
    {"rules": JOBSET_RULE},
)
JOBSET_STARTUP = Shape(
    "JobSet startup policy",
    {
        "startupPolicyOrder": refused(
            "InOrder (replicated jobs started one after another): muster starts a gang at once",
            "AnyOrder",
        ),
    },
)
JOBSET_SPEC = Shape(
    "JobSet spec",
    {
        "replicatedJobs": honoured("one pod set each"),
        "failurePolicy": honoured("the workload's failure policy"),
        "startupPolicy": honoured("AnyOrder only"),
        "suspend": passed("Kueue's convention, as a Job's"),
        "network": passed("DNS hostnames and subdomain of the pods"),
        "coordinator": passed("a label naming the coordinator pod"),
        "ttlSecondsAfterFinished": passed(_CLEANUP),
        "successPolicy": refused(
            "a JobSet succeeding when some replicated jobs do (muster waits for every pod)",
            {"operator": "All"},
        ),
        "managedBy": refused(
            "a JobSet another controller runs", "jobset.sigs.k8s.io/jobset-controller"
        ),
    },
    {
        "replicatedJobs": REPLICATED_JOB,
        "failurePolicy": JOBSET_FAILURE_POLICY,
        "startupPolicy": JOBSET_STARTUP,
    },
)
VOLCANO_POLICY = Shape(
    "Volcano lifecycle policy",
    {
        "event": honoured("PodFailed, PodEvicted, TaskCompleted or *"),
        "events": honoured("PodFailed, PodEvicted, TaskCompleted or *"),
        "action": honoured("RestartJob/Task/Pod, AbortJob, TerminateJob, CompleteJob"),
        "exitCode": refused("exit-code policies are not modelled"),
        "timeout": refused("a delayed action (muster acts on the event at once)"),
    },
)
NETWORK_TOPOLOGY = Shape(
    "Volcano networkTopology",
    {
        "mode": honoured("hard (required) or soft (preferred); soft refused for a partition"),
        "highestTierAllowed": honoured("the HyperNode tier, 1 the lowest above the nodes"),
        "highestTierName": refused("HyperNode tier names are not modelled"),
    },
)
PARTITION_POLICY = Shape(
    "Volcano partitionPolicy",
    {
        "totalPartitions": honoured("x partitionSize must equal replicas"),
        "partitionSize": honoured("the pod set's slice size"),
        "networkTopology": honoured("each partition inside one HyperNode of its tier"),
    },
    {"networkTopology": NETWORK_TOPOLOGY},
)
VOLCANO_TASK = Shape(
    "Volcano task",
    {
        "name": honoured("the pod set's name"),
        "replicas": honoured("the pod set's pods"),
        "template": honoured("the pod template"),
        "policies": honoured("failure rules for the task's own pods"),
        "partitionPolicy": honoured("slices, each inside one HyperNode of a tier"),
        "minAvailable": honoured("equal to replicas (the gang is the job): below it refused"),
        # Volcano's default 3 is what an absent one means too: accepted.
        "maxRetry": refused("a task's own retry limit (the job's maxRetry is read)", 3),
        "dependsOn": refused("starting after other tasks"),
        "topologyPolicy": refused("NUMA topology policies are not modelled", "none", ""),
    },
    {
        "template": POD_TEMPLATE_SPEC,
        "policies": VOLCANO_POLICY,
        "partitionPolicy": PARTITION_POLICY,
    },
)
VOLCANO_SPEC = Shape(
    "Volcano Job spec",
    {
        "tasks": honoured("one pod set each"),
        "minAvailable": honoured(
            "the gang minimum (a job of one task; with several, below the total refused)"
        ),
        "queue": honoured("the LocalQueue (after Kueue's label)"),
        "priorityClassName": honoured("the priority class (after Kueue's label)"),
        "policies": honoured("failure rules"),
        "maxRetry": honoured("the workload's maxRestarts"),
        "networkTopology": honoured("every task within one HyperNode of that tier"),
        "schedulerName": passed("muster is the scheduler of every workload it is given"),
        "plugins": passed("env, ssh, svc, pytorch...: pod environment and services"),
        "volumes": passed(_STORAGE),
        "ttlSecondsAfterFinished": passed(_CLEANUP),
        "minSuccess": refused("a job succeeding once that many pods have (muster waits for all)"),
        "runningEstimate": refused("run-time estimates for reservations are not modelled"),
    },
    {
        "tasks": VOLCANO_TASK,
        "policies": VOLCANO_POLICY,
        "networkTopology": NETWORK_TOPOLOGY,
    },
)

# A PodTemplate stands for the pods a ProvisioningRequest asks capacity for: their
# requests, node selector and tolerations; its pods are not run by muster.
_CAPACITY = "a ProvisioningRequest's PodTemplate asks for capacity; its pods are not run"
_CAPACITY_CONTAINER = _with(
    CONTAINER,
    "PodTemplate container",
    image=passed(_CAPACITY),
    command=passed(_CAPACITY),
    args=passed(_CAPACITY),
)
CAPACITY_POD_TEMPLATE = _with(
    POD_TEMPLATE_SPEC,
    "PodTemplate template",
    metadata=passed(_CAPACITY),
    spec=_with(
        POD_SPEC,
        "PodTemplate pod spec",
        priorityClassName=passed(_CAPACITY),
        terminationGracePeriodSeconds=passed(_CAPACITY),
        containers=_CAPACITY_CONTAINER,
        initContainers=_with(
            _CAPACITY_CONTAINER,
            "PodTemplate init container",
            restartPolicy=INIT_CONTAINER.fields["restartPolicy"],
        ),
    ),
)

# (API group, kind) -> the shape of its ``spec`` (a PodTemplate's ``template``).
WORKLOAD_SHAPES: dict[tuple[str, str], Shape] = {
    ("batch", "Job"): JOB_SPEC,
    ("jobset.x-k8s.io", "JobSet"): JOBSET_SPEC,
    ("batch.volcano.sh", "Job"): VOLCANO_SPEC,
    ("", "Pod"): POD_SPEC,
    ("", "PodTemplate"): CAPACITY_POD_TEMPLATE,
}


# Labels and annotations of a workload or of its templates: free-form, so those muster
# does not read pass through (docs/api.md lists the ones it reads), except these, which
# change scheduling in the peer and which muster does not model.
REFUSED_ANNOTATIONS: dict[str, str] = {
    "kueue.x-k8s.io/podset-group-name": "Kueue's TAS pod set groups (pod sets placed together)",
    "kueue.x-k8s.io/max-exec-time-seconds": (
        "Kueue's maximum execution time (the workload deactivated when reached)"
    ),
    "volcano.sh/preemptable": (
        "Volcano's per-pod preemptability; give a PriorityClass with preemptible: false"
    ),
    "alpha.jobset.sigs.k8s.io/node-selector": (
        "JobSet's node-selector strategy (nodes labelled per child Job); give exclusive-topology"
    ),
}


def check_annotations(values: object, path: str) -> None:
    """Refuse, at its path, a label or annotation muster does not model (``path``: the map)."""
    if not isinstance(values, Mapping):
        return
    for key in values:
        why = REFUSED_ANNOTATIONS.get(key) if isinstance(key, str) else None
        if why is not None:
            raise InvalidInput(f"{path}.{key}", f"{NOT_SUPPORTED}: {why}")


def check(shape: Shape, data: object, path: str) -> None:
    """Refuse, at its path, a field of ``data`` (and of its nested objects) that ``shape``
    refuses or does not know; values of the wrong type are left to the parser."""
    if not isinstance(data, Mapping):
        return
    for key, value in data.items():
        at = f"{path}.{key}" if path else str(key)
        rule = shape.fields.get(key) if isinstance(key, str) else None
        if rule is None:
            raise InvalidInput(at, "unknown field")
        if rule.treatment == "refused" and value is not None and not _harmless(value, rule):
            raise InvalidInput(at, f"{NOT_SUPPORTED}: {rule.why}")
        nested = shape.nested.get(key)
        if nested is None:
            continue
        if isinstance(value, list):
            for i, item in enumerate(value):
                check(nested, item, f"{at}[{i}]")
        else:
            check(nested, value, at)


def _harmless(value: Any, rule: Field) -> bool:
    """``value in rule.harmless``, without ``False == 0`` (YAML's booleans are not numbers)."""
    return any(type(value) is type(h) and value == h for h in rule.harmless)
