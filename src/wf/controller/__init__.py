"""Submitting and watching workflows through the Kubernetes API (the developer's everyday path).

Modules here import the Kubernetes client and boto3 inside functions or are imported only by cluster
commands, so `wf compile` and `wf lint` never pay for them.
"""
