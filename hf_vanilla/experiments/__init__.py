"""Controlled experiments over the table's rows: ``hf-vanilla compare``, the scaling sweep, their runner and statistics."""
