"""Platform configuration rendered from the catalog: eksctl node groups, Karpenter NodePools, Kueue queues,
team roles. Pure."""
