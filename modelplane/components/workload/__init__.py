"""Builders for the Kubernetes objects of model workloads and routes (plain manifests)."""
