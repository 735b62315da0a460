"""`jformer report-card`: one command that grades an attention variant (built-in, or a researcher's own file through
`--config.imports`) on a fixed suite, beside dot-product attention.

    jformer report-card --config.model.attention=linear [--seeds=2]
    jformer report-card --config.imports=my_attention.py --config.model.attention=mine [--workdir=runs/card]
    jformer report-card --remeasure     # dot_product graded here, cached in docs/results/report_cards/dot_product.json
    jformer report-card --leaderboard   # every row of the board not yet graded at this suite version

The suite (`suite`): MQAR, induction heads, selective copying and the LM demo's test bits per byte at 256 with 512
and 1,024, each at a fixed number of steps and once per seed; a train step's time and temporary memory at 2,048
tokens, a decode step's time and state, measured for dot_product in the same command. `card` grades and writes the
card (markdown, JSON, plot), `verdict` says better, worse or within noise, `leaderboard` builds the board row by row;
`measure` holds the two measurements.
"""

from jformer.report_card.card import beside, cached_row, grade, save_row, write
from jformer.report_card.suite import (BASELINE, SUITE_VERSION, VARIANT_KEYS, check_variant, default_suite,
                                       variant_name)

__all__ = ["BASELINE", "SUITE_VERSION", "VARIANT_KEYS", "beside", "cached_row", "check_variant", "default_suite",
           "grade", "save_row", "variant_name", "write"]
