"""The tt-model launcher shim for the LocateAnything Go worker.

tt-model's ``kind: tt-dit-server`` starts ``python -m uvicorn --host H --port P --lifespan on
<runtime.app>``. Pointing ``runtime.app`` at ``la_launcher.app:app`` makes that command
become the Go worker: see :mod:`la_launcher.app`.
"""
