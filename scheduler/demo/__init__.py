"""The ``perfsched demo``: a local control plane, perfsched's processes and a Philly workload, watched live.

``workload`` turns the shipped Philly sample into TrainingJob manifests (pure); ``report`` summarises what
happened from TrainingJob statuses (pure); ``runner`` brings the pieces up through the harness's public
API (``scheduler.devcluster``), submits, watches and cleans up (impure). The CLI command lives in
``scheduler.commands.demo``.
"""
