"""The ``perfsched demo``: a local control plane, perfsched's processes and a Philly workload, watched live.

``job_mix`` turns the shipped Philly sample into TrainingJob manifests (pure); ``report`` summarises what
happened from TrainingJob statuses (pure); ``emulated`` brings the pieces up through the harness's public
API (``perfsched_dev.devcluster``), submits, watches and cleans up (impure);
``real`` (with ``real_cli``) is ``demo --real``, real training processes on exec nodes. The CLI
command lives in ``perfsched_dev.commands.demo``.
"""
