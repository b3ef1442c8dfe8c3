"""The core layer: configuration, errors, events, messages, auth, TLS and system helpers (sys/).

The bottom of the stack (above only the generated ``swarmscope.v1``): it imports no role
package. docs/architecture.md draws the layers.
"""
