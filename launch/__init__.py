"""Sweep launchers: sweep files from configs/sweeps/ run locally, on SLURM or on Cloud TPU VMs (launch/README.md).

`launch.cli.main(argv)` is `python -m launch`; `launch.report.main(argv)` is `python -m launch.report`.
"""
