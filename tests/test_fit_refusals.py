"""The compiler's refusals read as libtpu words them (scripts/fit/maxtext_pieces.py refusal): the need and
the limit from each form seen, sizes in powers of 1024, and nothing but a want of HBM taken as a
verdict. The messages are the compilers' own, recorded from the compiles this project ran: libtpu
0.0.44 for v6e (MaxText 0.2.4), 0.0.41 for v6e (MaxText 0.2.3), 0.0.42.1 for the lent v5e chip."""

from __future__ import annotations

from tpu_rl.scripts.fit.maxtext_pieces import refusal, size

GIB = 1 << 30


def test_sizes_are_in_powers_of_1024():
    assert size("31.24G") == round(31.24 * GIB) and size("2.00T") == 2 << 40 and size("260.00M") == 260 << 20
    assert size("1099511627776") == 1 << 40


def test_libtpu_0_0_44s_words_give_the_need_and_what_is_available():
    found = refusal(Exception("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO "
                              "temporaries (32.00G) exceeds available HBM (31.24G)."))
    assert (found["need_bytes"], found["limit_bytes"]) == (32 * GIB, round(31.24 * GIB))


def test_libtpu_0_0_41s_words_give_what_was_used_of_the_chip():
    found = refusal(Exception(
        "RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: XLA:TPU compile permanent error. Ran out of memory in "
        "memory space hbm. Used 32.94G of 31.25G hbm. Exceeded hbm capacity by 1.70G. Total hbm usage >= 31.33G: "
        "reserved 260.00M program 1.70G arguments 29.37G Output size 5.61G; shares 3.74G with arguments."))
    assert (found["need_bytes"], found["limit_bytes"]) == (round(32.94 * GIB), round(31.25 * GIB))


def test_one_buffer_larger_than_the_chip_names_its_whole_hbm_not_what_a_program_may_use():
    found = refusal(Exception("RESOURCE_EXHAUSTED: Allocation (size=1099511627776) would exceed memory "
                              "(size=33822867456) :: %s0 = inlined_call_operand.hbm [shape: s8[1,1048576,1048576]]"))
    assert found["limit_bytes"] is None and found["whole_bytes"] == 33822867456


def test_an_error_that_is_not_a_want_of_hbm_is_no_verdict():
    assert refusal(Exception("RESOURCE_EXHAUSTED: Ran out of memory in memory space vmem while allocating")) is None
    assert refusal(Exception("INVALID_ARGUMENT: mesh axis 'tensor' does not divide 3")) is None
