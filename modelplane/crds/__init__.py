"""Vendored upstream CRD manifests (data only; see README.md), shipped as package data so that
an installed modelplane (not only a source checkout) can apply them."""

from pathlib import Path

CRDS_DIR = Path(__file__).resolve().parent
