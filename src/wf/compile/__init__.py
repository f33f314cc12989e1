"""A job spec and the catalog become an Argo manifest: placement, schedulability, interruptions, step kinds,
artifacts and queues. Pure."""
