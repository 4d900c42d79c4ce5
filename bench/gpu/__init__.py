"""The GPU kit (kit.sh, probe.py) and the GPU rounds' scripts (round2-4.sh), with the tools they run on the card."""
