"""A stream of TrainingJobs through the operator on a cluster with DRA GPUs, sampled all along.

Used by ``e2e/test_dra.py`` (a CI-sized stream) and ``bench/dra_stream.py`` (the 200-job run). The caller
starts the control plane, the extender, the workload emulator and the operator; ``submit_jobs`` creates
the jobs (every fourth a gang of 8 x 1 GPU) and ``StreamSampler`` samples until they have all finished:

- **Accounting, per DRA node and sample**: the extender's free GPUs (asked through its ``/filter`` verb: a
  probe pod asking for all of a node's GPUs passes when all are free, else the reason says how many are,
  and how many more it holds for pods planned there)
  against what DynamicResources can allocate there (the node's devices in ResourceSlices minus the
  devices allocated ResourceClaims hold). The claims are listed before and after the extender is asked;
  a node where any claim came or went in between (compared claim by claim, device by device, not by
  count) is counted *in flux* and not compared (either answer would be right for one of the two
  instants). ``settle_s`` between the first list and the question gives the extender's watch time to
  see what the list saw. A mismatch is *persistent* when the sample before also saw one on that node
  with the same claims on its devices.
- **Gangs of 8** (per job generation): the NVLink domains of the nodes the operator planned for its pods
  (their ``perfsched.dev/planned-node``) and of the nodes they were bound to once all 8 were; whether one
  domain had 8 free GPUs, of any type and of the gang's GPU type (``perfsched.dev/gpu-type``), at the first
  sample that saw its pods and none of them bound ("one fits"); and any sample that saw some but not all
  of its live pods bound (a *partial* gang; "persistent" when the next sample, ``interval_s`` later,
  still saw it partly bound).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

import httpx
from kubernetes import client as k8s

from e2e.harness import gpu_capacity, gpu_products
from perfmodel.gpus import canonical_gpu_type
from scheduler.core.spread import ALTHOUGH, UNLESS_STOPPED

DRIVER = "gpu.nvidia.com"
GANG = 8
#: where the operator's Started message says why a gang is spread
SPREAD = "; spread over "
#: (replicas, GPUs per replica), cycled: every fourth job is a gang of 8 x 1 GPU
SHAPES = [(GANG, 1), (1, 1), (1, 2), (2, 2)]
#: (model, dataset, global batch, iterations): a few emulated minutes each, seconds at the e2e time scale
MODELS = [
    ("resnet18", "cifar10", 128, 2000),
    ("resnet50", "imagenet", 256, 300),
    ("bert", "squad", 32, 300),
    ("lstm", "wikitext-2", 64, 5000),
]


def job_body(i: int) -> dict[str, Any]:
    """The ``i``-th TrainingJob of the stream (``s-000``, ``s-001``, ...)."""
    replicas, gpus = SHAPES[i % len(SHAPES)]
    model, dataset, batch, iterations = MODELS[(i // len(SHAPES)) % len(MODELS)]
    return {
        "apiVersion": "perfsched.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": f"s-{i:03d}"},
        "spec": {
            "model": model,
            "dataset": dataset,
            "batchSize": batch,
            "work": {"iterations": iterations},
            "replicas": {"max": replicas, "gpusPerReplica": gpus},
            "checkpointGraceSeconds": 10,
            "template": {"spec": {"containers": [{"name": "worker", "image": "registry.k8s.io/pause:3.10"}]}},
        },
    }


def gang_jobs(n: int) -> set[str]:
    """The names of the gangs of 8 among the first ``n`` jobs."""
    return {f"s-{i:03d}" for i in range(n) if SHAPES[i % len(SHAPES)][0] == GANG}


def submit_jobs(api: k8s.ApiClient, ns: str, n: int) -> list[str]:
    custom = k8s.CustomObjectsApi(api)
    for i in range(n):
        custom.create_namespaced_custom_object("perfsched.dev", "v1alpha1", ns, "trainingjobs", job_body(i))
    return [f"s-{i:03d}" for i in range(n)]


def phases(api: k8s.ApiClient, ns: str) -> Counter[str]:
    items = k8s.CustomObjectsApi(api).list_namespaced_custom_object(
        "perfsched.dev", "v1alpha1", ns, "trainingjobs"
    )["items"]
    return Counter((j.get("status") or {}).get("phase", "") or "New" for j in items)


#: (claim uid, device, uid of the pod owning the claim or "")
Holding = tuple[str, str, str]


def claim_holders(api: k8s.ApiClient) -> dict[str, frozenset[Holding]]:
    """Per node (a pool is named after its node), which allocated ResourceClaim holds which device of
    NVIDIA's driver, and for which pod."""
    out = k8s.CustomObjectsApi(api).list_cluster_custom_object("resource.k8s.io", "v1", "resourceclaims")
    held: defaultdict[str, set[Holding]] = defaultdict(set)
    for c in out.get("items") or []:
        meta = c.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        owner = next(
            (str(o.get("uid", "")) for o in meta.get("ownerReferences") or [] if o.get("kind") == "Pod"), ""
        )
        for r in ((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []:
            if r.get("driver") == DRIVER:
                held[r["pool"]].add((uid, str(r.get("device", "")), owner))
    return {node: frozenset(devices) for node, devices in held.items()}


def claimed_devices(api: k8s.ApiClient) -> Counter[str]:
    """Devices of NVIDIA's driver that allocated ResourceClaims hold, per node."""
    return Counter({node: len(devices) for node, devices in claim_holders(api).items()})


def dra_nodes(api: k8s.ApiClient) -> dict[str, int]:
    """DRA GPU nodes (no allocatable ``nvidia.com/gpu``) and their GPU devices."""
    allocatable = {
        n.metadata.name: (n.status.allocatable or {}).get("nvidia.com/gpu")
        for n in k8s.CoreV1Api(api).list_node().items
    }
    return {n: c for n, c in gpu_capacity(api).items() if allocatable.get(n) is None and c > 0}


def extender_free(extender_url: str, nodes: dict[str, int]) -> dict[str, int | str]:
    """The extender's free GPUs per node (one ``/filter`` call per device count), those it holds for pods
    planned there included (its refusal names both); a reason that names no count comes back as the
    reason's text."""
    out: dict[str, int | str] = {}
    by_count: dict[int, list[str]] = defaultdict(list)
    for node, devices in nodes.items():
        by_count[devices].append(node)
    for devices, names in by_count.items():
        probe = {
            "metadata": {"name": "free-gpu-probe", "namespace": "default", "uid": "free-gpu-probe"},
            "spec": {
                "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(devices)}}}]
            },
        }
        reply = httpx.post(
            f"{extender_url}/filter", json={"Pod": probe, "NodeNames": names}, timeout=30
        ).json()
        failed = {**(reply.get("FailedNodes") or {}), **(reply.get("FailedAndUnresolvableNodes") or {})}
        for node in names:
            if node in (reply.get("NodeNames") or []):
                out[node] = devices
                continue
            reason = failed.get(node, "")
            m = re.search(r"node has (\d+) free", reason)
            held = re.search(r"; (\d+) more held for pods planned there", reason)
            # GPUs held for planned pods are free devices the extender keeps for them
            out[node] = (
                int(m.group(1)) + (int(held.group(1)) if held else 0)
                if m
                else failed.get(node, "neither passed nor failed")
            )
    return out


def judge_decision(message: str) -> tuple[str, bool | None]:
    """(why the gang is spread, "" when it is not; whether one domain of its type had room at the
    decision, None when that depends on when the round's preemptions freed GPUs) from a Started
    Event's message."""
    at = message.find(SPREAD)
    if at < 0:
        return "", True
    note = message[at + 2 :]
    return note, None if UNLESS_STOPPED in note else ALTHOUGH in note


@dataclass
class GangRecord:
    gpu_type: str = ""
    #: one domain had 8 free GPUs (of any type; of the gang's type) when its pods were first seen unbound
    fits: bool | None = None
    fits_type: bool | None = None
    #: when its job was admitted (``status.admittedTime``, whole seconds), and how many domains of the
    #: gang's type had 8 free then, as the operator plans (``StreamSampler.admissions``); None: not judged
    admitted: float | None = None
    free_domains_at_start: int | None = None
    #: one of those domains was left for this gang after the gangs of its type admitted in the same
    #: second and ahead of it in the FIFO order had each taken one
    fits_type_at_start: bool | None = None
    #: the operator's record of the decision (its Started Event): "" when it started the gang in one
    #: NVLink domain, else why it is spread (``scheduler.core.spread``); None: no Started Event read
    decision_note: str | None = None
    #: one domain of its type had room for it in the operator's own view at the decision (planned in
    #: one domain, or spread "although" a domain had room: a placement miss); None: not judged
    fits_at_decision: bool | None = None
    planned: tuple[str, ...] = ()  # the domains of its planned nodes
    domains: tuple[str, ...] = ()  # the domains of its nodes once all 8 were bound
    partial_samples: int = 0
    persistent_partial: bool = False


@dataclass
class StreamSampler:
    """Samples accounting and gangs every ``interval_s`` in a thread (``with`` starts and stops it)."""

    api: k8s.ApiClient
    extender_url: str
    namespace: str
    gangs: set[str]
    interval_s: float = 1.0
    settle_s: float = 0.3
    samples: int = 0
    node_checks: int = 0
    node_equal: int = 0
    node_in_flux: int = 0
    mismatches: list[str] = field(default_factory=list)
    #: mismatches seen on the same node in two samples running with the same claims on it
    persistent_mismatches: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    records: dict[str, GangRecord] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.core = k8s.CoreV1Api(self.api)
        self.devices = dra_nodes(self.api)
        self.capacity = gpu_capacity(self.api)
        self.domain = {
            n.metadata.name: (n.metadata.labels or {}).get("perfsched.dev/nvlink-domain") or n.metadata.name
            for n in self.core.list_node().items
        }
        self.node_type = {n: canonical_gpu_type(p) or p for n, p in gpu_products(self.api).items()}
        self._partial_last: set[str] = set()
        self._unequal_last: dict[str, frozenset[Holding]] = {}
        #: (wall time of a sample, free GPUs per (GPU type, domain) as the operator plans with them)
        self._history: list[tuple[float, Counter[tuple[str, str]]]] = []
        self._bound_names: set[str] = set()
        #: bound pods of the stream that carried a planned node, and those bound elsewhere by (gang or
        #: single, on a DRA node)
        self.pods_planned = 0
        self.pods_off_plan: Counter[tuple[str, bool]] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stream-sampler", daemon=True)

    # --- one sample ----------------------------------------------------------------------------------------

    def sample(self) -> None:
        started = time.time()
        before = claim_holders(self.api)
        time.sleep(self.settle_s)
        free = extender_free(self.extender_url, self.devices)
        after = claim_holders(self.api)
        unequal: dict[str, frozenset[Holding]] = {}
        for node, devices in sorted(self.devices.items()):
            held = after.get(node, frozenset())
            if before.get(node, frozenset()) != held:
                # a claim came or went between the two lists (also one going and another coming on the
                # same devices, which leaves the count as it was): either answer is right for one instant
                self.node_in_flux += 1
                continue
            self.node_checks += 1
            if free[node] == devices - len(held):
                self.node_equal += 1
                continue
            unequal[node] = held
            self.mismatches.append(
                f"sample {self.samples}: {node}: extender {free[node]!r} free, DynamicResources can "
                f"allocate {devices - len(held)} ({devices} devices, {len(held)} claimed)"
            )
            if self._unequal_last.get(node) == held:
                self.persistent_mismatches.append(self.mismatches[-1] + ", as in the sample before")
        self._unequal_last = unequal
        self._gangs(after, started)
        self.samples += 1

    def _gangs(self, holdings: dict[str, frozenset[Holding]], started: float) -> None:
        resp = self.core.list_pod_for_all_namespaces(_preload_content=False)
        pods = json.loads(resp.data).get("items") or []
        used: Counter[str] = Counter()  # GPUs of live bound pods per node (device-plugin nodes)
        planned_unbound: Counter[str] = Counter()  # GPUs of live pods planned on a node, not bound yet
        finished: set[str] = set()  # uids of pods that have finished
        names = self._bound_names
        gangs: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for p in pods:
            live = (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            if not live:
                finished.add(str(p["metadata"].get("uid", "")))
            live = live and not p["metadata"].get("deletionTimestamp")
            if not live:
                continue
            node = (p.get("spec") or {}).get("nodeName")
            gpus = sum(
                int(((c.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu", 0))
                for c in (p.get("spec") or {}).get("containers") or []
            )
            if node:
                used[node] += gpus
            else:
                planned_unbound[
                    (p["metadata"].get("annotations") or {}).get("perfsched.dev/planned-node", "")
                ] += gpus
            labels = p["metadata"].get("labels") or {}
            job = labels.get("perfsched.dev/job-name", "")
            uid = p["metadata"].get("uid", "")
            if node and job and p["metadata"].get("namespace") == self.namespace and uid not in names:
                names.add(uid)
                planned_node = (p["metadata"].get("annotations") or {}).get("perfsched.dev/planned-node")
                if planned_node:
                    self.pods_planned += 1
                    if planned_node != node:
                        self.pods_off_plan[
                            ("gang" if job in self.gangs else "single", node in self.devices)
                        ] += 1
            if p["metadata"].get("namespace") == self.namespace and job in self.gangs:
                gangs[f"{job}/g{labels.get('perfsched.dev/generation', '')}"].append(p)
        free_by_domain: Counter[tuple[str, str]] = Counter()  # (GPU type, domain) -> free GPUs
        # as the operator plans: a finished pod's claim is GPUs being released, a planned pod takes its GPUs
        planning: Counter[tuple[str, str]] = Counter()
        for node, cap in self.capacity.items():
            held = holdings.get(node, frozenset())
            taken = len(held) if node in self.devices else used[node]
            where = (self.node_type.get(node, ""), self.domain.get(node, node))
            free_by_domain[where] += max(0, cap - taken)
            if node in self.devices:
                taken = sum(owner not in finished for _, _, owner in held)
            planning[where] += max(0, cap - taken - planned_unbound[node])
        self._history.append((started, planning))
        partial_now: set[str] = set()
        for key, members in gangs.items():
            rec = self.records.setdefault(key, GangRecord())
            nodes = [(m.get("spec") or {}).get("nodeName") for m in members]
            bound = [n for n in nodes if n]
            if not rec.gpu_type:  # also for a gang bound before any sample saw it unbound
                notes = members[0]["metadata"].get("annotations") or {}
                rec.gpu_type = notes.get("perfsched.dev/gpu-type", "")
            if not bound and rec.fits is None:
                rec.fits = any(v >= GANG for v in free_by_domain.values())
                rec.fits_type = any(v >= GANG for (t, _), v in free_by_domain.items() if t == rec.gpu_type)
            if not rec.planned and len(members) == GANG:  # the operator has created all 8 pods
                planned = {
                    (m["metadata"].get("annotations") or {}).get("perfsched.dev/planned-node", "")
                    for m in members
                }
                rec.planned = tuple(sorted({self.domain.get(n, n) for n in planned}))
            if bound and len(bound) < len(members):
                rec.partial_samples += 1
                partial_now.add(key)
                if key in self._partial_last:
                    rec.persistent_partial = True
            elif len(bound) == GANG and not rec.domains:
                rec.domains = tuple(sorted({self.domain.get(n, n) for n in bound}))
        self._partial_last = partial_now

    # --- the thread ----------------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                self.sample()
            except (k8s.ApiException, httpx.HTTPError, OSError, ValueError) as exc:
                self.errors.append(f"sample {self.samples}: {type(exc).__name__}: {exc}")
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - t0)))

    def __enter__(self) -> StreamSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        try:
            self.admissions()
        except (k8s.ApiException, OSError, ValueError, KeyError) as exc:
            self.errors.append(f"admissions: {type(exc).__name__}: {exc}")
        try:
            self.decisions()
        except (k8s.ApiException, OSError, ValueError, KeyError) as exc:
            self.errors.append(f"decisions: {type(exc).__name__}: {exc}")

    def decisions(self) -> None:
        """For each first-generation gang, the operator's own judgement at its decision: its ``Started``
        Event's message ends with why the gang is spread when it is (``scheduler.core.spread``)."""
        events = self.core.list_namespaced_event(self.namespace, field_selector="reason=Started").items
        started = {
            e.involved_object.name: e.message or ""
            for e in events
            if e.involved_object is not None and e.involved_object.kind == "TrainingJob"
        }
        for key, rec in self.records.items():
            job, _, generation = key.partition("/")
            if generation == "g1" and job in started:
                rec.decision_note, rec.fits_at_decision = judge_decision(started[job])

    def admissions(self) -> None:
        """For each first-generation gang: was a domain of its type with 8 free GPUs left for it at the last
        sample that began before its job's ``status.admittedTime`` (the operator's round that started it;
        the time has whole seconds, so up to a second after it)? Free as the operator plans: a finished
        pod's claim counts free (being released), a pod planned on a node and not bound yet counts taken;
        a gang of the same type admitted in the same second and earlier in the FIFO order takes one of the
        free domains first."""
        items = k8s.CustomObjectsApi(self.api).list_namespaced_custom_object(
            "perfsched.dev", "v1alpha1", self.namespace, "trainingjobs"
        )["items"]
        admitted: dict[str, float] = {}
        for j in items:
            raw = (j.get("status") or {}).get("admittedTime")
            if raw:
                admitted[j["metadata"]["name"]] = datetime.fromisoformat(
                    raw.replace("Z", "+00:00")
                ).timestamp()
        for key, rec in self.records.items():
            job, _, generation = key.partition("/")
            at = admitted.get(job)
            if generation != "g1" or at is None or not rec.gpu_type:
                continue
            before = [free for t, free in self._history if t < at + 1.0]
            if before:
                rec.admitted = at
                rec.free_domains_at_start = sum(
                    v >= GANG for (t, _), v in before[-1].items() if t == rec.gpu_type
                )
        # gangs of one type started by one round compete for its free domains, in the FIFO order (the jobs
        # are created in name order)
        ahead: Counter[tuple[float, str]] = Counter()
        for key in sorted(self.records):
            rec = self.records[key]
            if rec.admitted is None or rec.free_domains_at_start is None:
                continue
            rec.fits_type_at_start = rec.free_domains_at_start > ahead[(rec.admitted, rec.gpu_type)]
            ahead[(rec.admitted, rec.gpu_type)] += 1

    # --- the figures ---------------------------------------------------------------------------------------

    def gang_figures(self) -> dict[str, int]:
        placed = [r for r in self.records.values() if r.domains]
        fit = [r for r in placed if r.fits]
        fit_type = [r for r in placed if r.fits_type]
        fit_start = [r for r in placed if r.fits_type_at_start]
        fit_decision = [r for r in placed if r.fits_at_decision]
        planned_one = [r for r in placed if len(r.planned) == 1]
        return {
            "gangs_placed": len(placed),
            "seen_before_binding": sum(r.fits is not None for r in placed),
            "one_domain": sum(len(r.domains) == 1 for r in placed),
            "one_fits": len(fit),
            "one_fits_and_one_domain": sum(len(r.domains) == 1 for r in fit),
            "one_of_its_type_fits": len(fit_type),
            "one_of_its_type_fits_and_one_domain": sum(len(r.domains) == 1 for r in fit_type),
            "judged_at_start": sum(r.fits_type_at_start is not None for r in placed),
            "one_of_its_type_fits_at_start": len(fit_start),
            "one_of_its_type_fits_at_start_and_one_domain": sum(len(r.domains) == 1 for r in fit_start),
            "judged_at_decision": sum(r.fits_at_decision is not None for r in placed),
            "fits_at_decision": len(fit_decision),
            "fits_at_decision_and_one_domain": sum(len(r.domains) == 1 for r in fit_decision),
            "spread_although_fitted": sum(
                r.decision_note is not None and ALTHOUGH in r.decision_note for r in placed
            ),
            "planned_one_domain": len(planned_one),
            "planned_one_domain_and_kept": sum(r.domains == r.planned for r in planned_one),
            "partial_samples": sum(r.partial_samples for r in self.records.values()),
            "persistent_partial": sum(r.persistent_partial for r in self.records.values()),
        }

    def summary(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "dra_nodes": len(self.devices),
            "node_checks": self.node_checks,
            "node_equal": self.node_equal,
            "node_in_flux": self.node_in_flux,
            "mismatches": self.mismatches[:20],
            "persistent_mismatches": self.persistent_mismatches[:20],
            "errors": self.errors[:20],
            **self.gang_figures(),
            "pods_planned": self.pods_planned,
            "pods_off_plan": {
                f"{kind} on {'DRA' if dra else 'device-plugin'} nodes": n
                for (kind, dra), n in sorted(self.pods_off_plan.items())
            },
            "gangs": {k: asdict(r) for k, r in sorted(self.records.items())},
        }
