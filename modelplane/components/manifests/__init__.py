"""Vendored upstream manifests (data only; see README.md), shipped as package data."""

from pathlib import Path

MANIFESTS_DIR = Path(__file__).resolve().parent
GKE_NVIDIA_DRIVER_INSTALLER = MANIFESTS_DIR / "nvidia-driver-installer-cos-daemonset-preloaded.yaml"
