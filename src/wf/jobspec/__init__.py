"""The developer's job spec (`kind: TrainingJob`) and the references inside it. Pure."""
