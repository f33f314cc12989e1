"""The AWS edge: EKS endpoints and tokens, and the instance facts refreshed from EC2 and the Pricing API."""
