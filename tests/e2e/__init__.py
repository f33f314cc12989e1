"""End-to-end tests on the local cluster (see conftest.py for the `local_cluster` fixture)."""
