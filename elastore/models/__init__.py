"""Capacity, SLO-border, BwMan bandwidth and migration-time models (issue: decision core)."""
