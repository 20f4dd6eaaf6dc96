"""Tests of tuner/results: exported files and what a deployment starts from them."""
