"""Every Kubernetes name perfsched reads or writes, spelled once: the CRDs' group, version, kinds and
plurals, the GPU resource, the node labels, and the ``perfsched.dev/*`` pod labels and annotations.

Pure constants, no imports: any layer may use them (the pure core's node-fit messages name the GPU
resource; the adapter, the shells and the simulator's node manifests use the rest). A name that is
part of the wire format is defined here and nowhere else; the Helm chart and ``crds/*.yaml`` spell
the same strings (tests compare them).
"""

from __future__ import annotations

# -- Custom resources (``crds/trainingjob.yaml``, ``crds/trainingqueue.yaml``) ---------------------
GROUP = "perfsched.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
TRAININGJOB_KIND = "TrainingJob"
TRAININGJOB_PLURAL = "trainingjobs"
TRAININGQUEUE_KIND = "TrainingQueue"
TRAININGQUEUE_PLURAL = "trainingqueues"

# -- The GPU extended resource (NVIDIA device plugin) ---------------------------------------------
GPU_RESOURCE = "nvidia.com/gpu"

# -- Node labels --------------------------------------------------------------------------------
#: NVIDIA GPU Feature Discovery's labels: the product name, GPUs per node, memory per GPU in MiB.
LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"
LABEL_GPU_COUNT = "nvidia.com/gpu.count"
LABEL_GPU_MEMORY = "nvidia.com/gpu.memory"
#: Kubernetes' well-known zone label.
LABEL_ZONE = "topology.kubernetes.io/zone"
#: perfsched's topology labels (ARCHITECTURE.md): rack, NVLink domain, NIC bandwidth, interconnect.
LABEL_RACK = "perfsched.dev/rack"
LABEL_NVLINK_DOMAIN = "perfsched.dev/nvlink-domain"
LABEL_NETWORK_GBPS = "perfsched.dev/network-gbps"
LABEL_INTERCONNECT = "perfsched.dev/interconnect"
#: Nodes with this label (value "true") are served by ``perfsched emulate --exec``; KWOK does not
#: manage them (it manages nodes annotated ``kwok.x-k8s.io/node=fake`` only), and the table-driven
#: emulator leaves their pods alone.
LABEL_EXEC_NODE = "perfsched.dev/exec-node"
#: The table-driven emulator runs the gangs on a node with this label (a number in (0, 1], e.g. "0.6")
#: at that fraction of their true throughput: a slow node (thermal throttling, a bad NVLink) for
#: slow-node detection to find. Developer tooling; a real node never carries it.
LABEL_EMULATED_SPEED = "perfsched.dev/emulated-speed"

# -- Pod labels and annotations, shared by the operator, the extender and the workload emulator ----
LABEL_JOB_NAME = "perfsched.dev/job-name"
LABEL_REPLICA_INDEX = "perfsched.dev/replica-index"
LABEL_GENERATION = "perfsched.dev/generation"
ANNOTATION_GPU_TYPE = "perfsched.dev/gpu-type"
ANNOTATION_PLANNED_NODE = "perfsched.dev/planned-node"
ANNOTATION_TOTAL_WORK = "perfsched.dev/total-work"
ANNOTATION_WORLD_SIZE = "perfsched.dev/world-size"
#: What a pod trains (the actuator writes them; the extender predicts a pod of no TrainingJob by them).
ANNOTATION_MODEL = "perfsched.dev/model"
ANNOTATION_BATCH_SIZE = "perfsched.dev/batch-size"
#: Progress reporting (``scheduler/k8s/progress.py``, ``docs/progress-reporting.md``).
ANNOTATION_PROGRESS = "perfsched.dev/progress"
ANNOTATION_START_PROGRESS = "perfsched.dev/start-progress"
#: KWOK stage trigger (``e2e/kwok-stages.yaml``): a Running pod with it goes Succeeded after the duration.
ANNOTATION_KWOK_RUN_DURATION = "perfsched.dev/kwok-run-duration"
ANNOTATION_KWOK_RESULT = "perfsched.dev/kwok-result"
#: On the demo's TrainingJobs: the trace job a TrainingJob was made from.
ANNOTATION_TRACE_JOB = "perfsched.dev/trace-job"

# -- Events ---------------------------------------------------------------------------------------
#: ``reportingComponent`` of the Events the operator writes.
OPERATOR_COMPONENT = "perfsched.dev/operator"

# -- Adopted workloads: batch/v1 Jobs, JobSets and Kubeflow TrainJobs (``docs/job-kinds.md``) ------
#: Opt-in label: the TrainingQueue that admits the job (the job is perfsched's while it carries it).
LABEL_QUEUE = "perfsched.dev/queue"
#: Kueue's opt-in label (not perfsched's): a job carrying it is Kueue's; with perfsched's label too it is
#: refused.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: On an adopted job: what perfsched decided and why it waits (JSON; ``scheduler.k8s.adopt``).
ANNOTATION_STATUS = "perfsched.dev/status"
#: Predictor input on an adopted job (``perfsched.dev/model`` and ``perfsched.dev/batch-size`` as on pods).
ANNOTATION_PRECISION = "perfsched.dev/precision"
#: On an adopted job's pods: which admission of the job they run (1, 2, ...): pods of a new admission are a
#: new run of the workers, as a TrainingJob's new gang generation (the emulator resumes them from their
#: checkpoint).
ANNOTATION_ADMISSION = "perfsched.dev/admission"
#: Predictor input on an adopted job: the dataset (as a TrainingJob's ``spec.dataset``; default the model's).
ANNOTATION_DATASET = "perfsched.dev/dataset"
#: Elastic bounds of an adopted job (replicas; without them the job runs at the size it was written with).
ANNOTATION_MIN_REPLICAS = "perfsched.dev/min-replicas"
ANNOTATION_MAX_REPLICAS = "perfsched.dev/max-replicas"
#: The replicated job of a TrainJob's runtime that perfsched's runtime patch targets (default ``node``).
ANNOTATION_TRAINER_JOB = "perfsched.dev/trainer-replicated-job"
#: On an adopted job: seconds its pods have to be all running after an admission (1..86400; default the
#: operator's TrainingJob start timeout), else it is suspended and requeued with backoff.
ANNOTATION_START_TIMEOUT = "perfsched.dev/start-timeout-seconds"

# -- Dynamic Resource Allocation (``resource.k8s.io/v1``, ``scheduler/k8s/dra.py``) -----------------
DRA_GROUP = "resource.k8s.io"
DRA_VERSION = "v1"
DRA_API_VERSION = f"{DRA_GROUP}/{DRA_VERSION}"
#: the upstream gang API (Workload / PodGroup, beta in Kubernetes 1.37)
GANG_API_GROUP = "scheduling.k8s.io"
GANG_API_VERSION = "v1beta1"
#: NVIDIA's DRA driver (k8s-dra-driver-gpu): the driver name of its GPU devices and of its DeviceClass.
DRA_GPU_DRIVER = "gpu.nvidia.com"
#: Device attributes NVIDIA's driver publishes on a GPU (names unqualified: their domain is the driver's).
DRA_ATTR_TYPE = "type"
DRA_ATTR_PRODUCT = "productName"
DRA_ATTR_ARCHITECTURE = "architecture"
DRA_ATTR_COMPUTE_CAPABILITY = "cudaComputeCapability"
#: Device capacity: GPU memory in bytes (a Kubernetes quantity, e.g. ``80Gi``).
DRA_CAPACITY_MEMORY = "memory"
#: A device attribute perfsched reads when present (``nvlink`` or ``pcie``) has the name of the
#: interconnect label, ``LABEL_INTERCONNECT``; otherwise the product's form factor decides.
#: On the ResourceClaim kube-scheduler creates for a pod's DRA-backed extended resource (KEP-5004).
DRA_EXTENDED_RESOURCE_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
