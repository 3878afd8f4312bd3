"""The OpenAPI 3 document of intake's HTTP API, served at ``/openapi.json``.

Written out by hand, next to the handlers it describes: a test walks the aiohttp
router and checks every route is here and every path here is routed, and a bounded
schemathesis run checks the server against it.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from muster.core.model.queues import CHECK_STATES
from muster.core.model.workload import GPU_POLICIES
from services.intake.objects import KINDS

NAME = {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63}
QUANTITY = {"oneOf": [{"type": "string", "maxLength": 64}, {"type": "number"}]}
STRINGS = {"type": "array", "items": {"type": "string"}}
LABELS = {"type": "object", "additionalProperties": {"type": "string"}}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        out["required"] = list(required)
    return out


def _schemas() -> dict[str, Any]:
    pod_set = _obj(
        {
            "name": NAME,
            "count": {"type": "integer", "minimum": 1, "maximum": 100_000},
            "minCount": {"type": "integer", "minimum": 1},
            "surplus": {"enum": ["Drop", "Wait"]},
            "requests": {"type": "object", "additionalProperties": QUANTITY},
            "nodeSelector": LABELS,
            "tolerations": {"type": "array", "maxItems": 64, "items": _ref("Toleration")},
            "topology": _obj(
                {
                    "required": {"type": "string"},
                    "preferred": {"type": "string"},
                    "sliceSize": {"type": "integer", "minimum": 1},
                    "sliceRequired": {"type": "string"},
                    "exclusive": {"type": "string"},
                    "highestTierAllowed": {"type": "integer", "minimum": 1, "maximum": 16},
                    "mode": {"enum": ["hard", "soft"]},
                    "sliceHighestTierAllowed": {"type": "integer", "minimum": 1, "maximum": 16},
                }
            ),
            "devices": _obj(
                {k: STRINGS for k in ("useUuids", "avoidUuids", "useTypes", "avoidTypes")}
            ),
            "backoffLimit": {"type": "integer", "minimum": 0, "maximum": 10_000},
        },
        ("count",),
    )
    workload = _obj(
        {
            "name": NAME,
            "namespace": NAME,
            "queueName": NAME,
            "priority": {"type": "integer"},
            "priorityClassName": NAME,
            "podSets": {"type": "array", "minItems": 1, "maxItems": 8, "items": _ref("PodSet")},
            "maxRunDurationSeconds": {"type": "integer", "minimum": 1, "maximum": 604_800},
            "runtime": _obj(
                {
                    "durationSeconds": {"oneOf": [{"type": "number"}, {"type": "string"}]},
                    "exitCode": {"type": "integer", "minimum": 0, "maximum": 255},
                    "exitCodes": {"type": "array", "items": {"type": "integer"}},
                }
            ),
            "labels": LABELS,
            "consumesProvisioningRequest": NAME,
            "gpuGroupSize": {"type": "integer", "minimum": 1},
            "placement": _obj(
                {"node": {"enum": ["binpack", "spread"]}, "gpu": {"enum": list(GPU_POLICIES)}}
            ),
            "failurePolicy": _obj(
                {
                    "maxRestarts": {"type": "integer", "minimum": 0},
                    "onFailure": {"type": "string"},
                    "rules": {
                        "type": "array",
                        "items": _obj(
                            {
                                "event": {"type": "string"},
                                "action": {"type": "string"},
                                "podSets": STRINGS,
                            }
                        ),
                    },
                }
            ),
            "gang": _obj(
                {"name": NAME, "cardinality": {"type": "integer", "minimum": 1}},
                ("name", "cardinality"),
            ),
            "idempotencyKey": {"type": "string", "minLength": 1, "maxLength": 256},
        },
        ("name", "podSets"),
    )
    workload_status = {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "name": {"type": "string"},
            "namespace": {"type": "string"},
            "queueName": {"type": "string"},
            "clusterQueue": {"type": ["string", "null"]},
            "priority": {"type": "integer"},
            "pods": {"type": "integer"},
            "status": {
                "enum": [
                    "Pending",
                    "QuotaReserved",
                    "Admitted",
                    "Running",
                    "Succeeded",
                    "Failed",
                    "Cancelled",
                    "Rejected",
                ]
            },
            "reason": {"type": "string"},
            "message": {"type": "string"},
            "attempt": {"type": "integer"},
            "submittedAt": {"type": "number"},
            "updatedAt": {"type": "number"},
            "submittedTime": {"type": "string", "format": "date-time"},
            "updatedTime": {"type": "string", "format": "date-time"},
            "cancelRequested": {"type": "boolean"},
            "conditions": {"type": "array", "items": _ref("Condition")},
            "queue": {"type": "object"},
            "admissionChecks": {"type": "array", "items": _ref("AdmissionCheckState")},
            "gang": {"type": "object"},
        },
        "required": ["id", "status"],
    }
    return {
        "Error": {
            "type": "object",
            "properties": {
                "error": {
                    "type": "object",
                    "properties": {
                        "code": {"type": "string"},
                        "message": {"type": "string"},
                        "field": {"type": "string"},
                    },
                    "required": ["code", "message"],
                }
            },
            "required": ["error"],
        },
        "Toleration": _obj(
            {
                "key": {"type": "string"},
                "operator": {"enum": ["Equal", "Exists"]},
                "value": {"type": "string"},
                "effect": {"enum": ["", "NoSchedule", "PreferNoSchedule", "NoExecute"]},
            }
        ),
        "PodSet": pod_set,
        "PodSetUpdate": _obj(
            {
                "name": {"type": "string"},
                "labels": LABELS,
                "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                "nodeSelector": LABELS,
            },
            ("name",),
        ),
        "AdmissionCheckState": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "state": {"enum": list(CHECK_STATES)},
                "message": {"type": "string"},
                "lastTransitionTime": {"type": "string", "format": "date-time"},
                "podSetUpdates": {"type": "array", "items": _ref("PodSetUpdate")},
            },
            "required": ["name", "state"],
        },
        "Condition": {
            "type": "object",
            "properties": {
                "type": {"type": "string"},
                "status": {"enum": ["True", "False"]},
                "reason": {"type": "string"},
                "message": {"type": "string"},
                "lastTransitionTime": {"type": "string", "format": "date-time"},
            },
            "required": ["type", "status", "reason", "lastTransitionTime"],
        },
        "Explanation": {
            "type": "object",
            "properties": {
                "id": {"type": "string"},
                "position": {"type": "integer"},
                "time": {"type": "string", "format": "date-time"},
                "status": {"type": "string"},
                "reason": {"type": "string"},
                "message": {"type": "string"},
                "conditions": {"type": "array", "items": _ref("Condition")},
                "queue": {"type": "object"},
                "flavors": {"type": "object"},
                "flavorsTried": {"type": "array", "items": {"type": "string"}},
                "shortfall": {"type": "array", "items": {"type": "object"}},
                "victims": {"type": "array", "items": {"type": "string"}},
                "nodes": {"type": "object"},
                "admissionChecks": {"type": "array", "items": {"type": "object"}},
                "provisioningRequest": {"type": ["object", "null"]},
                "evictions": {"type": "array", "items": {"type": "object"}},
            },
            "required": ["id", "position", "time", "status", "reason", "message"],
        },
        "AdmissionCheckUpdate": _obj(
            {
                "state": {"enum": list(CHECK_STATES)},
                "message": {"type": "string", "maxLength": 32_768},
                "attempt": {"type": "integer", "minimum": 1},
                "requeueAfterSeconds": {"type": "integer", "minimum": 0, "maximum": 604_800},
                "podSetUpdates": {"type": "array", "items": _ref("PodSetUpdate")},
            },
            ("state",),
        ),
        "WorkloadSpec": workload,
        "Workload": workload_status,
        "WorkloadList": {
            "type": "object",
            "properties": {
                "items": {"type": "array", "items": _ref("Workload")},
                "next": {"type": ["string", "null"]},
            },
            "required": ["items"],
        },
        "Event": {
            "type": "object",
            "properties": {
                "position": {"type": "integer"},
                "time": {"type": "number"},
                "occurredTime": {"type": "string", "format": "date-time"},
                "type": {"type": "string"},
                "producer": {"type": "string"},
                "stream": {"type": "string"},
                "workloadId": {"type": ["string", "null"]},
                "reason": {"type": ["string", "null"]},
                "message": {"type": ["string", "null"]},
                "data": {"type": "object"},
            },
            "required": ["position", "type", "stream"],
        },
        "Events": {
            "type": "object",
            "properties": {"events": {"type": "array", "items": _ref("Event")}},
            "required": ["events"],
        },
        "ProvisioningRequestSpec": _obj(
            {
                "name": NAME,
                "namespace": NAME,
                "provisioningClassName": {"type": "string"},
                "parameters": LABELS,
                "podSets": {"type": "array", "minItems": 1, "items": _ref("PodSet")},
            },
            ("name", "podSets"),
        ),
        "ProvisioningRequest": {
            "type": "object",
            "properties": {
                "id": {"type": "string"},
                "status": {"type": "string"},
                "conditions": {"type": "array", "items": _ref("Condition")},
                "createdAt": {"type": "string", "format": "date-time"},
            },
            "required": ["id", "status"],
        },
        "Object": {
            "type": "object",
            "properties": {
                "kind": {"type": "string"},
                "name": {"type": "string"},
                "namespace": {"type": "string"},
                "spec": {"type": "object"},
                "status": {"type": "object"},
            },
            "required": ["kind", "name", "spec"],
        },
        "ObjectList": {
            "type": "object",
            "properties": {
                "items": {"type": "array", "items": _ref("Object")},
                "next": {"type": ["string", "null"]},
            },
            "required": ["items"],
        },
        "Applied": {
            "type": "object",
            "properties": {
                "items": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "kind": {"type": "string"},
                            "name": {"type": "string"},
                            "result": {"type": "string"},
                            "id": {"type": "string"},
                        },
                        "required": ["kind", "name", "result"],
                    },
                }
            },
            "required": ["items"],
        },
        "Report": _report(),
    }


def _report() -> dict[str, Any]:
    time = {"type": ["string", "null"], "format": "date-time"}
    number = {"type": ["number", "null"]}
    total = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "workloads": {"type": "integer"},
            "finished": {"type": "integer"},
            "meanWaitSeconds": number,
            "runSeconds": {"type": "number"},
            "gpuHours": {"type": "number"},
        },
    }
    row = {
        "type": "object",
        "properties": {
            **{k: {"type": "string"} for k in ("id", "name", "namespace", "queueName")},
            "clusterQueue": {"type": "string"},
            "status": {"type": "string"},
            "attempts": {"type": "integer"},
            **{k: time for k in ("submitTime", "startTime", "endTime")},
            "waitSeconds": number,
            "runSeconds": {"type": "number"},
            "gpuHours": {"type": "number"},
        },
    }
    return {
        "type": "object",
        "properties": {
            "since": time,
            "until": time,
            "now": time,
            "workloads": {"type": "array", "items": row},
            "namespaces": {"type": "array", "items": total},
            "clusterQueues": {"type": "array", "items": total},
        },
        "required": ["workloads", "namespaces", "clusterQueues"],
    }


def _json_body(schema: dict[str, Any], required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


def _answer(description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"description": description}
    if schema is not None:
        out["content"] = {"application/json": {"schema": schema}}
    return out


ERR = _ref("Error")


def _errors(*statuses: int) -> dict[str, Any]:
    what = {
        400: "malformed body or query",
        401: "no or unknown token",
        403: "the token's tenant may not do this",
        404: "not found",
        409: "conflict (see error.code)",
        413: "body or batch too large",
        422: "invalid field (error.field names it)",
        429: "over the tenant's submission rate (Retry-After)",
    }
    return {str(s): _answer(what[s], ERR) for s in (401, 403, *statuses)}


def _param(name: str, where: str = "query", schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "required": where == "path",
        "schema": schema or {"type": "string"},
    }


PAGE = [
    _param("limit", schema={"type": "integer", "minimum": 1, "maximum": 1000}),
    _param("after"),
]
EVENTS_QUERY = [
    _param("after", schema={"type": "integer", "minimum": 0}),
    _param("limit", schema={"type": "integer", "minimum": 1, "maximum": 1000}),
    _param("watch", schema={"type": "boolean"}),
]
PENDING_QUERY = [
    _param("limit", schema={"type": "integer", "minimum": 1, "maximum": 100_000}),
    _param("offset", schema={"type": "integer", "minimum": 0}),
]


def _events_op(summary: str, params: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "get": {
            "summary": summary + " (?watch=true: newline-delimited JSON, one event a line, "
            "following new events; resume with ?after=<last position>)",
            "parameters": params + EVENTS_QUERY,
            "responses": {
                "200": {
                    "description": "events in log order",
                    "content": {
                        "application/json": {"schema": _ref("Events")},
                        "application/x-ndjson": {"schema": _ref("Event")},
                    },
                },
                **_errors(400, 404),
            },
        }
    }


def _paths() -> dict[str, Any]:
    wid = _param("id", "path")
    name = _param("name", "path")
    ns = _param("namespace", "path")
    paths: dict[str, Any] = {
        "/v1/workloads": {
            "post": {
                "summary": "Submit a workload",
                "parameters": [_param("Idempotency-Key", "header")],
                "requestBody": _json_body(_ref("WorkloadSpec")),
                "responses": {
                    "201": _answer("submitted", _ref("Workload")),
                    "200": _answer(
                        "the original, for a repeated idempotency key", _ref("Workload")
                    ),
                    **_errors(400, 409, 413, 422, 429),
                },
            },
            "get": {
                "summary": "List workloads, in submission order",
                "parameters": [_param("namespace"), _param("status"), *PAGE],
                "responses": {"200": _answer("a page", _ref("WorkloadList")), **_errors(400)},
            },
        },
        "/v1/workloads:batch": {
            "post": {
                "summary": "Submit up to MUSTER_MAX_BATCH workloads: all or none",
                "requestBody": _json_body(
                    _obj(
                        {
                            "items": {
                                "type": "array",
                                "minItems": 1,
                                "items": _ref("WorkloadSpec"),
                            }
                        },
                        ("items",),
                    )
                ),
                "responses": {
                    "201": _answer("submitted", {"type": "object"}),
                    "200": _answer("every item was a repeat", {"type": "object"}),
                    **_errors(400, 409, 413, 422, 429),
                },
            }
        },
        "/v1/workloads/{id}": {
            "get": {
                "summary": "A workload's status; a pending one's queue positions and reason",
                "parameters": [wid],
                "responses": {"200": _answer("the workload", _ref("Workload")), **_errors(404)},
            },
            "delete": {
                "summary": "Cancel a workload",
                "parameters": [wid],
                "responses": {
                    "202": _answer("cancellation requested", _ref("Workload")),
                    **_errors(404, 409),
                },
            },
        },
        "/v1/workloads/{id}/cancel": {
            "post": {
                "summary": "Cancel a workload",
                "parameters": [wid],
                "responses": {
                    "202": _answer("cancellation requested", _ref("Workload")),
                    **_errors(404, 409),
                },
            }
        },
        "/v1/workloads/{id}/events": _events_op("A workload's events", [wid]),
        "/v1/workloads/{id}/explain": {
            "get": {
                "summary": "A workload's state and why (reason with numbers, queue position, "
                "flavors, nodes, conditions, evictions), now or at a past point of the log",
                "parameters": [
                    wid,
                    {
                        **_param("at"),
                        "description": "RFC 3339 time, relative (-5m, -2h) or a log position "
                        "(@12345 or 12345); absent: now",
                    },
                ],
                "responses": {
                    "200": _answer("the explanation", _ref("Explanation")),
                    **_errors(400, 404),
                },
            }
        },
        "/v1/workloads/{id}/admissionchecks/{check}": {
            "put": {
                "summary": "Admin: an external admission check's controller sets the check's "
                "state for the workload's current attempt (Kueue's status.admissionChecks[])",
                "parameters": [wid, _param("check", "path")],
                "requestBody": _json_body(_ref("AdmissionCheckUpdate")),
                "responses": {
                    "200": _answer("recorded: the workload", _ref("Workload")),
                    **_errors(400, 404, 409, 422),
                },
            }
        },
        "/v1/clusterqueues/{name}/events": _events_op(
            "A ClusterQueue's events: its workloads' and its configuration", [name]
        ),
        "/v1/namespaces/{namespace}/localqueues/{name}/events": _events_op(
            "A LocalQueue's events", [ns, name]
        ),
        "/v1/clusterqueues/{name}/pendingworkloads": {
            "get": {
                "summary": "Kueue's visibility API: pending workloads in admission order",
                "parameters": [name, *PENDING_QUERY],
                "responses": {"200": _answer("a page", {"type": "object"}), **_errors(400, 404)},
            }
        },
        "/v1/namespaces/{namespace}/localqueues/{name}/pendingworkloads": {
            "get": {
                "summary": "A LocalQueue's pending workloads in its own order",
                "parameters": [ns, name, *PENDING_QUERY],
                "responses": {"200": _answer("a page", {"type": "object"}), **_errors(400, 404)},
            }
        },
        "/v1/provisioningrequests": {
            "post": {
                "summary": "Create a standalone ProvisioningRequest (its spec is immutable)",
                "requestBody": _json_body(_ref("ProvisioningRequestSpec")),
                "responses": {
                    "201": _answer("created", _ref("ProvisioningRequest")),
                    "200": _answer("the same spec again", _ref("ProvisioningRequest")),
                    **_errors(400, 409, 413, 422, 429),
                },
            },
            "get": {
                "summary": "ProvisioningRequests with their conditions",
                "parameters": [
                    _param("namespace"),
                    _param("standalone", schema={"type": "boolean"}),
                    *PAGE,
                ],
                "responses": {"200": _answer("the requests", {"type": "object"}), **_errors()},
            },
        },
        "/v1/namespaces/{namespace}/provisioningrequests/{name}": {
            "get": {
                "summary": "One ProvisioningRequest",
                "parameters": [ns, name],
                "responses": {
                    "200": _answer("the request", _ref("ProvisioningRequest")),
                    **_errors(404),
                },
            },
            "delete": {
                "summary": "Delete a ProvisioningRequest (node creation stops)",
                "parameters": [ns, name],
                "responses": {
                    "202": _answer("deleted", _ref("ProvisioningRequest")),
                    **_errors(404, 409),
                },
            },
        },
        "/v1/apply": {
            "post": {
                "summary": "Apply Kubernetes manifests (multi-document YAML or JSON), as "
                "muster apply -f: queue objects need the admin scope",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/yaml": {"schema": {"type": "string"}},
                        "application/json": {"schema": {"type": "object"}},
                    },
                },
                "responses": {
                    "200": _answer("what each object became", _ref("Applied")),
                    **_errors(400, 409, 413, 422, 429),
                },
            }
        },
        "/v1/report": {
            "get": {
                "summary": "Accounting (muster report): per workload submit, start and end "
                "times, wait, run time and GPU-hours; totals per namespace and ClusterQueue. "
                "since/until: RFC 3339, epoch seconds or -<duration> before now; a tenant "
                "sees its own namespaces",
                "parameters": [_param("since"), _param("until"), _param("namespace")],
                "responses": {"200": _answer("the report", _ref("Report")), **_errors(400)},
            }
        },
        "/v1/admin/replay": {
            "post": {
                "summary": "Admin: rebuild the queue's state from the store",
                "requestBody": _json_body(
                    _obj({"untilPosition": {"type": "integer", "minimum": 0}}), required=False
                ),
                "responses": {
                    "200": _answer("the rebuilt state's summary", {"type": "object"}),
                    **_errors(400, 422),
                },
            }
        },
    }
    paths.update(_ui_paths())
    for k in KINDS:
        if k.kind == "ProvisioningRequest":
            continue
        listing = {
            "get": {
                "summary": f"List {k.kind}s",
                "parameters": list(PAGE),
                "responses": {"200": _answer("a page", _ref("ObjectList")), **_errors(400)},
            }
        }
        one = {
            "get": {
                "summary": f"One {k.kind}",
                "parameters": [ns, name] if k.namespaced else [name],
                "responses": {"200": _answer(k.kind, _ref("Object")), **_errors(404)},
            }
        }
        paths[f"/v1/{k.plural}"] = listing
        if k.namespaced:
            ns_listing = {"get": {**listing["get"], "parameters": [ns, *PAGE]}}
            paths[f"/v1/namespaces/{{namespace}}/{k.plural}"] = ns_listing
            paths[f"/v1/namespaces/{{namespace}}/{k.plural}/{{name}}"] = one
        else:
            paths[f"/v1/{k.plural}/{{name}}"] = one
    return paths


@cache
def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "muster intake",
            "version": "1.0.0",
            "description": "Submit, inspect and cancel GPU/TPU batch workloads; apply queue "
            "configuration. Errors: {error: {code, message, field}}. See docs/api.md.",
        },
        "components": {
            "schemas": _schemas(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": _paths(),
    }


AT = [
    _param("at", schema={"type": "integer", "minimum": 0}),
    _param("time"),
    _param("limit", schema={"type": "integer", "minimum": 1, "maximum": 100_000}),
]


def _ui_paths() -> dict[str, Any]:
    """The web UI's JSON (services/intake/ui): each page now, or as it was at a past log
    position (``at``) or time (``time``: RFC 3339 or epoch seconds), rebuilt from the log."""

    def page(summary: str, params: tuple[dict[str, Any], ...] = (), *errors: int) -> dict[str, Any]:
        return {
            "get": {
                "summary": summary + " (?at=POSITION or ?time=RFC3339: as it was then)",
                "parameters": [*params, *AT],
                "responses": {"200": _answer(summary, {"type": "object"}), **_errors(400, *errors)},
            }
        }

    return {
        "/v1/ui/clock": page("The log's head and intake's position; with time, its position"),
        "/v1/ui/queues": page("ClusterQueues and cohorts: quota, usage, borrowing per resource"),
        "/v1/ui/pending": page("Pending workloads with positions and current reasons"),
        "/v1/ui/workloads": page("Workloads the caller may see, newest first"),
        "/v1/ui/workloads/{id}": page(
            "A workload: conditions, pods and nodes, requests, events", (_param("id", "path"),), 404
        ),
        "/v1/ui/nodes": page("Nodes with their GPUs and the shares pods hold of them"),
        "/v1/ui/provisioningrequests": page("ProvisioningRequests with their conditions"),
        "/v1/ui/events": _events_op("Every event the caller may see", []),
    }
