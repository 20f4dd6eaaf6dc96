"""Placeholder until this family is modelled."""

PROFILES: list = []
