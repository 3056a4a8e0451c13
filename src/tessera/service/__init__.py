"""The Tessera service: job store, scheduler loop, Ray backend, HTTP API, dashboard.

``tessera server`` runs it (:mod:`tessera.service.server`); ``tessera submit|list|status|logs|cancel`` talk to
it through :mod:`tessera.service.client`. Heavy pieces (Ray, torch, FastAPI) are imported where used.
"""
