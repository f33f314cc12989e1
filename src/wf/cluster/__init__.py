"""The local cluster: source-built control plane, kwok-simulated node groups and Argo's controller as processes."""
