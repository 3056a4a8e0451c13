"""Scheduling policies, one file each, found by name through :func:`tessera.scheduler.policy.get_policy`.

Each module registers its class with ``@register("name")``; see :mod:`tessera.scheduler.policy` for the
interface and :mod:`tessera.scheduler.policies.fcfs` for the reference policy.
"""
