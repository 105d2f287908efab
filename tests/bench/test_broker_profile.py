"""bench/broker_profile.py: samples of the broker CPU's NAPI threads, by function, from perf script."""
from __future__ import annotations

from camus.bench.broker_profile import napi_profile, render

SCRIPT = """\
4242
\tffffffff81001 __pi_memcpy
\tffffffff81002 xdpf_clone
\tffffffff81003 dev_map_enqueue_multi
\tffffffff81004 napi_threaded_poll
\tffffffff81005 kthread

4242
\tffffffff81001 __pi_memcpy
\tffffffff81006 bpf_xdp_load_bytes
\tffffffff81007 bpf_prog_0a47965021412a4c_camus_fan_out
\tffffffff81004 napi_threaded_poll

4242
\tffffffff81001 __pi_memcpy
\tffffffff81002 xdpf_clone
\tffffffff81003 dev_map_enqueue_multi
\tffffffff81004 napi_threaded_poll
\tffffffff81005 kthread

977
\t4fd990 PyDict_SetDefault
\t4feeee [unknown]

4242
\tffffffff81008 __napi_schedule
\tffffffff81004 napi_threaded_poll
"""


def test_only_napi_thread_samples_count_by_the_function_they_landed_in() -> None:
    prof = napi_profile(SCRIPT)
    assert prof.samples == 4                              # the Python sample is not the broker's NAPI
    assert prof.by_function == {"__pi_memcpy": 3, "__napi_schedule": 1}
    assert prof.chains["__pi_memcpy"].most_common(1)[0] == (
        "xdpf_clone < dev_map_enqueue_multi < napi_threaded_poll < kthread", 2)


def test_the_listing_gives_shares_and_the_main_chain() -> None:
    text = render(napi_profile(SCRIPT), top=5)
    assert "4 samples in the broker CPU's NAPI threads" in text
    assert "       3  75.0%  __pi_memcpy" in text
    assert "__pi_memcpy < xdpf_clone < dev_map_enqueue_multi < napi_threaded_poll < kthread  (2)" in text
    assert "no samples" in render(napi_profile("977 \n\t4fd990 PyDict_SetDefault\n"), top=5)
