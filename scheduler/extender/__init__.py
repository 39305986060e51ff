"""The scheduler extender: the webhook kube-scheduler calls to filter, prioritize, bind and preempt.

Shell package. ``create_app()`` (``app``) builds the FastAPI app over ``service.ExtenderService``; one
module per concern below it: ``wire`` (the wire types and parsers), ``context`` (the request's pod and
its signatures), ``nodes`` (node classes), ``filtering``, ``gang`` (gang plans), ``scoring``,
``preempt``. ``docs/extender.md`` is the user documentation.
"""

from __future__ import annotations

from scheduler.extender.app import create_app

__all__ = ["create_app"]
