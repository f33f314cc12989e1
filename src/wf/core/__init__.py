"""The foundation every layer stands on: errors and exit codes, names shared with Kubernetes and Argo, units,
YAML loading that keeps lines, and pydantic plumbing. Pure: no client, no subprocess, no network."""
