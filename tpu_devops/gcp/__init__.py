"""Thin adapters over Google Cloud APIs. Only this package imports ``google.*``, always lazily."""
