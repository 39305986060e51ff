"""The scheduler extender: the webhook kube-scheduler calls to filter, prioritize, bind and preempt.

Shell package. ``create_app()`` (``scheduler.extender.app``) builds the FastAPI app; the wire types are in
``scheduler.extender.wire`` and the decisions in ``scheduler.extender.decide``. ``docs/extender.md`` is
the user documentation.
"""

from __future__ import annotations

from scheduler.extender.app import create_app

__all__ = ["create_app"]
