"""Scheduler extender (shell): the FastAPI webhook kube-scheduler calls for filter, prioritize and bind."""
