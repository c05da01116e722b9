"""`backend-wizard smoke DIR`: run a written set for a few steps, beside the wizard's estimate.

The set is re-decided with the wizard's own engine (`wizard.app.run`, a dry run: nothing is
written). The training process is a probe rendered from `templates/smoke_probe.py.j2` into a fresh
temporary folder and launched through the set's own launch.sh, so Accelerate reads the set's config
and DeepSpeed JSON exactly as a user's script would. torch, accelerate, deepspeed and transformers
run only in that subprocess: nothing here imports them.
"""

from wizard.smoke.launch import check_can_run, run_smoke
from wizard.smoke.plan import load_plan
from wizard.smoke.records import MARKER, RankResult, SmokeError, SmokePlan, SmokeResult
from wizard.smoke.verdict import CONCLUSIVE_STATES, TOLERANCE, TOLERANCE_BYTES, held_against, judge, resolved_problems

__all__ = [
    "CONCLUSIVE_STATES",
    "MARKER",
    "TOLERANCE",
    "TOLERANCE_BYTES",
    "RankResult",
    "SmokeError",
    "SmokePlan",
    "SmokeResult",
    "check_can_run",
    "held_against",
    "judge",
    "load_plan",
    "resolved_problems",
    "run_smoke",
]
