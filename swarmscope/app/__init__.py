"""The app layer: the command line, process wiring, the Locust plug-in, the web UI and console.

The top of the stack: it may import every layer below it (kinds, controller, workers, targets,
probes, core); nothing below imports it. docs/architecture.md draws the layers.
"""
