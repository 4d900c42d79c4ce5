"""Unit tests never reach the Hugging Face hub: a hub id that is not bundled is looked up in the HF cache
only (HF_HUB_OFFLINE), so no test waits on the network or passes only with it. Tests of the fetch set
their own endpoint on loopback (tests/helpers/fake_hub.py)."""

import pytest


@pytest.fixture(autouse=True)
def _hub_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
