"""The app-layer sub-commands of ``swarmscope`` that use scenario kinds (run, controller, worker)."""
