"""Issue 29, class 4: torchrun's variables bounded before any rendezvous."""

from __future__ import annotations

import sys
from types import ModuleType, SimpleNamespace

import pytest

from purlin_bench.procs import env as env_mod
from purlin_bench.procs.errors import DistError


def test_a_world_past_the_rank_bound_is_refused_before_any_rendezvous(monkeypatch):
    from purlin_bench.cli import procs
    from purlin_bench.base.errors import PurlinError

    for name, value in {"RANK": "0", "WORLD_SIZE": "100000", "TORCHELASTIC_RUN_ID": "x"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("PURLIN_STORE", raising=False)
    with pytest.raises(PurlinError, match="WORLD_SIZE=100000: purlin runs at most 64 ranks"):
        procs.enter(["bench", "all-reduce"])


@pytest.mark.parametrize("addr", ["256.1.1.1", "1.2.3.4.5", "999.0.0.1"])
def test_a_master_addr_that_is_no_address_is_one_line(addr):
    with pytest.raises(DistError, match="is not an IP address"):
        env_mod._check_master_addr(addr)


@pytest.mark.parametrize("addr", ["127.0.0.1", "::1", "[::1]", "localhost", "node-3.cluster", ""])
def test_addresses_and_names_pass(addr):
    env_mod._check_master_addr(addr)


def test_the_gloo_rendezvous_is_bounded_by_the_watchdog_not_the_command_timeout(monkeypatch):
    """It retried a wrong MASTER_ADDR for COMMAND_S (600 s)."""
    asked = {}

    class Stop(Exception):
        pass

    def init(backend, timeout):
        asked["s"] = timeout.total_seconds()
        raise RuntimeError("rendezvous failed\nmore lines")

    fake = ModuleType("torch.distributed")
    fake.is_available, fake.is_initialized, fake.init_process_group = (lambda: True), (lambda: False), init
    torch = ModuleType("torch")
    torch.distributed = fake
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.distributed", fake)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    rank_env = SimpleNamespace(rank=1)
    with pytest.raises(
        DistError, match=r"rank 1: torch.distributed could not start its gloo group \(rendezvous failed\)"
    ):
        env_mod._connect_torchrun(rank_env, timeout_s=600.0, silence_s=2.0)
    assert asked["s"] == 2.0 + env_mod.STARTUP_S
