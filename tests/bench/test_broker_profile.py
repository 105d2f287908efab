"""bench/broker_profile.py: samples of the broker CPU's NAPI threads, by function, from perf script."""
from __future__ import annotations

from camus.bench.broker_profile import napi_profile, render

def _sample(tid: int, *frames: str) -> str:
    """One sample as `perf script -F tid,ip,sym` prints it: the thread, then a line per frame."""
    return f"{tid} \n" + "".join(f"\t{0xffffffff81000000 + i:x} {f}\n" for i, f in enumerate(frames)) + "\n"


CLONE = ("__pi_memcpy", "xdpf_clone", "dev_map_enqueue_multi", "napi_threaded_poll", "kthread")
SCRIPT = (_sample(4242, *CLONE)
          + _sample(4242, "__pi_memcpy", "bpf_xdp_load_bytes", "bpf_prog_0a47965021412a4c_camus_fan_out",
                    "napi_threaded_poll")
          + _sample(4242, *CLONE)
          + _sample(977, "PyDict_SetDefault", "[unknown]")
          + _sample(4242, "__napi_schedule", "napi_threaded_poll"))


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
