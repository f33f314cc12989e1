"""The platform's data: the compute-class catalog, its teams and quotas, instance facts, accelerators and the
node groups every renderer and placement derive from. Pure."""
