"""Sweep launchers: expand sweep files from configs/sweeps/ and run them locally or on clusters."""
