"""The ingress-flood target: a local nginx load balancer + backends, and the flood runner."""
